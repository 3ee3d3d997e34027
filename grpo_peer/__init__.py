"""The TRL peer: claims checked against TRL's GRPOTrainer, part of the science (the report's peer
sections read its folders), run by `grpo peer`.

    trl_config.py   TRL's side built from a grpo-lab config, key by key (shared with `grpo bench`)
    check.py        one arm of a claim spec trained by TRL, seed by seed (`grpo peer SPEC --arm … --seeds …`)
    one_step.py     one step of both trainers on one batch, term by term (`grpo peer SPEC --arm … --one-step`)

It sits between the sweeps it reads specs and runs with and the measurements (benchmarks/) that
borrow its TRL builder (`lint-imports`, pyproject.toml)."""
