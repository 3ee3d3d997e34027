"""The GRPO math, pure functions returning (loss, metrics): advantages, the loss and its
surrogates, the loss masks, the learning-rate schedule, and the one table of variant axes (axes)
that names each axis's registry and the claim it tests.
May import: tasks (the reward aggregations' registry), util."""
