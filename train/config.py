"""The run config: one frozen dataclass tree, read from TOML, changed with `--set key=value`.

A run is described completely by a `RunConfig`:

    [task]       which sentence pairs (the built-in task, your own files, Multi30k)
    [tokenizer]  the shared subword vocabulary (§5.1)
    [model]      transformer.TransformerConfig: the paper's names (§3, Table 3), and `impl`
                 (vocab_size and the special ids come from the tokenizer, not from here)
    [train]      batching, optimizer (§5.3), schedule, checkpoints, logging
    [decode]     beam search for validation and the final test (§6.1)

Every field has the paper's value as default where the paper has one, so a
config file only lists what differs. Keys are checked: an unknown key is an
`InputError` that names the file, the line and the closest valid key; a value
of the wrong type is an `InputError` that names the key and the expected type.
"""

import dataclasses
import difflib
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from train.errors import InputError
from transformer.config import TransformerConfig

TASK_KINDS = ("builtin", "files", "multi30k", "ptb")
PRECISIONS = ("fp32", "bf16", "fp16")
BACKENDS = ("numpy", "numba", "cupy", "cpu", "cuda")


@dataclass(frozen=True)
class TaskConfig:
    """Where the sentence pairs come from.

    kind = "builtin": train.data.builtin_task generates the number task into the run dir.
    kind = "files": your own parallel files; `*_src`/`*_tgt` are paths (`.gz` is fine).
      A path starting with `shared:` is under the project's `../shared/data`,
      e.g. `shared:wmt_newstest/newstest2013.en` (the paper's dev set, §6.2).
    kind = "multi30k": Multi30k task 1 En-De from `../shared/data/multi30k`.
    kind = "ptb": §6.3 parsing, words -> linearised tree, from Penn Treebank `.mrg` files in
      `treebank` (a .zip or a folder), split by file number (train/parsing/treebank.py).
    """

    kind: str = "builtin"
    seed: int = 0  # builtin: the grammar's seed
    n_train: int = 20_000  # builtin: number of generated pairs per split
    n_valid: int = 500
    n_test: int = 500
    train_src: str = ""  # files: "" means not set
    train_tgt: str = ""
    valid_src: str = ""
    valid_tgt: str = ""
    test_src: str = ""
    test_tgt: str = ""
    max_len: int = 128  # training pairs with more subword tokens on a side are dropped
    treebank: str = "shared:ptb_sample/treebank.zip"  # ptb: the WSJ sample; the full WSJ is yours
    treebank_train: str = "0001-0179"  # ptb: file numbers; full WSJ sections 02-21 = 0200-2199
    treebank_valid: str = "0180-0189"  # full WSJ section 22 = 2200-2299
    treebank_test: str = "0190-0199"  # full WSJ section 23 = 2300-2399

    def __post_init__(self):
        _choice("task.kind", self.kind, TASK_KINDS)
        _positive("task.max_len", self.max_len)


@dataclass(frozen=True)
class TokenizerConfig:
    """§5.1: one BPE vocabulary shared by source and target (37000 for En-De)."""

    vocab_size: int = 37_000
    model_type: str = "bpe"  # or "unigram" (word-piece-like, the En-Fr setting), "word" (whole words: parsing)
    sample_size: int = 2_000_000  # sentences sampled to train it

    def __post_init__(self):
        _choice("tokenizer.model_type", self.model_type, ("bpe", "unigram", "word"))
        _positive("tokenizer.vocab_size", self.vocab_size)


@dataclass(frozen=True)
class TrainConfig:
    """Batching (§5.1), optimizer and schedule (§5.3), and the run's bookkeeping."""

    max_tokens: int = 4096  # padded tokens per side of one micro-batch: what one device holds
    tokens_per_update: int = 0  # padded tokens per side per update, over all ranks (§5.1: ~25000); 0 = max_tokens
    max_steps: int = 100_000  # §5.2 base: 100k steps
    warmup_steps: int = 4000  # §5.3
    lr_factor: float = 1.0  # scales Eq. (3); 1.0 in the paper
    adam_beta1: float = 0.9  # §5.3
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    clip_norm: float = 0.0  # 0 = no clipping (the paper does not clip)
    seed: int = 0  # model init, dropout, batch order
    backend: str = "cpu"  # minitensor backend: numpy, numba, cupy, cpu (best CPU), cuda
    precision: str = "fp32"  # "bf16" = mixed precision (cuda only); "fp16" = the same with dynamic loss scaling
    threads: int = 0  # CPU threads for BLAS and Numba; 0 = the libraries' default (train/threads.py)
    log_every: int = 100  # updates between log lines
    log_norms: bool = False  # also log per-layer activation and gradient norms at each log line (train/run/layer_norms.py)
    valid_every: int = 1000  # updates between validations (0 = only at the end)
    valid_bleu_sentences: int = 200  # validation BLEU on this many sentences (0 = skip)
    valid_beam: int = 1  # 1 = greedy decoding during validation (fast), >1 = beam size
    ckpt_every: int = 1000  # updates between checkpoints
    ckpt_minutes: float = 0.0  # also checkpoint every this many minutes (0 = off; §6.1 used 10)
    keep_last: int = 5  # checkpoints kept on disk
    keep_last_full: int = 1  # of those, the newest this many keep Adam's state (an exact resume); the rest weights only
    average_last: int = 5  # §6.1: average this many last checkpoints for the final model (base 5, big 20)
    patience: int = 0  # stop after this many validations without a better best_metric (0 = never)
    best_metric: str = "loss"  # picks best.safetensors, drives patience: "loss" (dev loss) or "bleu" (>= 500 sentences)
    bucket_mb: float = 25.0  # many GPUs: all-reduce gradients in buckets of this many MB during backward (0 = after it)
    check_replicas: bool = False  # many GPUs, debug: check that every rank holds the same weights after the first update
    collective_timeout_s: float = 600.0  # many GPUs: end the job when a rank has not joined a collective for this long

    def __post_init__(self):
        _choice("train.backend", self.backend, BACKENDS)
        if self.bucket_mb < 0:
            raise InputError(f"train.bucket_mb must be 0 (no overlap) or positive, got {self.bucket_mb}")
        _choice("train.precision", self.precision, PRECISIONS)
        if self.threads < 0:
            raise InputError(f"train.threads must be 0 (library default) or positive, got {self.threads}")
        if self.tokens_per_update < 0:
            raise InputError(f"train.tokens_per_update must be 0 (= train.max_tokens) or positive, "
                             f"got {self.tokens_per_update}")
        for name in ("max_tokens", "max_steps", "collective_timeout_s", "warmup_steps", "log_every",
                     "ckpt_every", "keep_last", "keep_last_full", "average_last", "valid_beam"):
            _positive(f"train.{name}", getattr(self, name))
        if self.average_last > self.keep_last:
            raise InputError(f"train.average_last ({self.average_last}) cannot exceed "
                             f"train.keep_last ({self.keep_last}): the older checkpoints are deleted")
        if self.keep_last_full > self.keep_last:
            raise InputError(f"train.keep_last_full ({self.keep_last_full}) cannot exceed "
                             f"train.keep_last ({self.keep_last})")
        if self.patience < 0:
            raise InputError(f"train.patience must be 0 (never stop early) or positive, got {self.patience}")
        _choice("train.best_metric", self.best_metric, ("loss", "bleu"))


@dataclass(frozen=True)
class DecodeConfig:
    """§6.1: beam size 4, length penalty α = 0.6, maximum output length input + 50."""

    beam: int = 4
    alpha: float = 0.6
    max_len_b: int = 50
    max_tokens: int = 4096  # source tokens per decoding batch
    early_stop: bool = False  # stop a sentence once `beam` hypotheses finished (faster; transformer/search.py)

    def __post_init__(self):
        for name in ("beam", "max_len_b", "max_tokens"):
            _positive(f"decode.{name}", getattr(self, name))


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    task: TaskConfig = field(default_factory=TaskConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: TransformerConfig = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)


# [model] keys the tokenizer decides: the vocabulary and the special ids (train/data/tokenizer.py).
TOKENIZER_OWNED = ("vocab_size", "pad_id", "unk_id", "bos_id", "eos_id")


# Keys that may change between a run and its resumption: bookkeeping, validation and decoding (they do
# not change the math so far), and the ones fine-tuning habits need, which change it from the resumed
# step on (logged as such): the learning-rate scale and dropout. The batch is the checkpoint's update
# plan, kept on resume whatever the world size (train/distributed/global_batch.py).
RESUMABLE_KEYS = frozenset({
    "name", "train.max_steps", "train.log_every", "train.valid_every", "train.valid_bleu_sentences",
    "train.valid_beam", "train.ckpt_every", "train.ckpt_minutes", "train.keep_last",
    "train.average_last", "train.backend", "train.threads", "model.impl", "train.keep_last_full",
    "train.patience", "train.bucket_mb", "train.check_replicas", "train.collective_timeout_s",
    "train.lr_factor", "model.p_drop", "model.attention_dropout", "train.log_norms",
}) | {f"decode.{f.name}" for f in dataclasses.fields(DecodeConfig)} | {
    # where the corpus is (relative paths become absolute): a resumed run checks its content by sha256
    f"task.{split}_{side}" for split in ("train", "valid", "test") for side in ("src", "tgt")} | {"task.treebank"}


# ------------------------------------------------------------------ checks
def _choice(key: str, value, choices) -> None:
    if value not in choices:
        raise InputError(f"{key} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def _positive(key: str, value) -> None:
    if value <= 0:
        raise InputError(f"{key} must be positive, got {value}")


def _sections() -> dict[str, type]:
    return {f.name: f.type for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(f.type)}


def valid_keys() -> list[str]:
    """Every settable dotted key, e.g. 'model.d_model'."""
    keys = [f.name for f in dataclasses.fields(RunConfig) if not dataclasses.is_dataclass(f.type)]
    for section, cls in _sections().items():
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(cls)
                 if not (cls is TransformerConfig and f.name in TOKENIZER_OWNED)]
    return keys


def _tokenizer_value(data: dict, leaf: str):
    """What the tokenizer section makes of a TOKENIZER_OWNED key (so that from_dict(to_dict()) round-trips)."""
    if leaf == "vocab_size":
        return data.get("tokenizer", {}).get("vocab_size", TokenizerConfig.vocab_size)
    return getattr(TransformerConfig, leaf)


def _tokenizer_owned(key: str, where: str) -> InputError:
    what = "set tokenizer.vocab_size instead" if key.endswith("vocab_size") else "the tokenizer fixes pad 0, unk 1, bos 2, eos 3"
    return InputError(f"{where}: {key} is decided by the tokenizer; {what}")


def _unknown_key(key: str, where: str) -> InputError:
    # A bare field name (d_model) is most likely that field in some section.
    close = [k for k in valid_keys() if k.endswith("." + key)][:1] if "." not in key else []
    close = close or difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(f"{where}: unknown config key {key!r}{hint}")


def _check_type(key: str, value, annotation, where: str):
    """The value converted to the field's type, or InputError saying what was expected."""
    if isinstance(annotation, types.UnionType):                 # `int | None`: TOML has no None, so an int
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    kind = annotation if isinstance(annotation, type) else typing.get_origin(annotation)
    ok = (isinstance(value, bool) if kind is bool
          else isinstance(value, int) and not isinstance(value, bool) if kind is int
          else isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
          else isinstance(value, str) if kind is str
          else False)
    if not ok:
        raise InputError(f"{where}: {key} must be {kind.__name__}, got {type(value).__name__} {value!r}")
    return float(value) if kind is float else value


def _key_line(text: str, key: str) -> int | None:
    """Line number (from 1) where a dotted key is set in TOML text, for error messages."""
    section, _, leaf = key.rpartition(".")
    current = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped.strip("[]").strip()
        elif "=" in stripped and not stripped.startswith("#"):
            name = stripped.split("=", 1)[0].strip().strip('"')
            if (current, name) == (section, leaf) or (current == "" and name == key):
                return number
    return None


def from_dict(data: dict, where: str = "config", text: str | None = None) -> RunConfig:
    """Build a RunConfig from nested dicts (TOML or JSON), checking every key and type."""
    sections, kwargs = _sections(), {}
    hints = typing.get_type_hints(RunConfig)
    for key, value in data.items():
        if key in sections:
            if not isinstance(value, dict):
                raise InputError(f"{where}: [{key}] must be a table of settings, got {value!r}")
            cls, cls_hints = sections[key], typing.get_type_hints(sections[key])
            fields = {}
            for leaf, leaf_value in value.items():
                dotted = f"{key}.{leaf}"
                at = _where(where, text, dotted)
                if leaf not in cls_hints:
                    raise _unknown_key(dotted, at)
                if cls is TransformerConfig and leaf in TOKENIZER_OWNED and leaf_value != _tokenizer_value(data, leaf):
                    raise _tokenizer_owned(dotted, at)
                fields[leaf] = _check_type(dotted, leaf_value, cls_hints[leaf], at)
            kwargs[key] = fields
        elif key in hints:
            kwargs[key] = _check_type(key, value, hints[key], _where(where, text, key))
        else:
            raise _unknown_key(key, _where(where, text, key))
    for key, cls in sections.items():
        if cls is not TransformerConfig:
            kwargs[key] = cls(**kwargs.get(key, {}))
    vocab_size = kwargs["tokenizer"].vocab_size                  # what the model is built for (§5.1 shared vocabulary)
    try:
        kwargs["model"] = TransformerConfig(**{**kwargs.get("model", {}), "vocab_size": vocab_size})
    except ValueError as err:
        raise InputError(f"{where}: model.{str(err).removeprefix('TransformerConfig: ')}") from None
    return RunConfig(**kwargs)


def _where(where: str, text: str | None, key: str) -> str:
    line = _key_line(text, key) if text is not None else None
    return f"{where}:{line}" if line else where


def load(path: str | Path, overrides: list[str] = ()) -> RunConfig:
    """Read a TOML config file (or a run's config.json) and apply `key=value` overrides (values in TOML syntax)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: config file not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[:err.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8") from None
    if path.suffix == ".json":  # a run's own config.json (what `fit --resume RUN_DIR` reads)
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InputError(f"{path}: not valid JSON ({err})") from None
        return apply_overrides(from_dict(data, where=str(path)), overrides)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML ({err})") from None
    from_dict(data, where=str(path), text=text)                 # the file's own mistakes, named by line
    return from_dict(_override(data, overrides), where=f"{path} with --set" if overrides else str(path), text=text)


def parse_override(item: str) -> tuple[str, object]:
    """'model.d_model=256' -> ('model.d_model', 256); a value that is not TOML is a string."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"--set {item!r}: expected KEY=VALUE, e.g. model.d_model=256")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # bare words such as backend=numba
    return key, value


def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """A copy of `config` with each `--set key=value` applied (and re-checked).

    d_k and d_v that were derived from d_model/h (§3.2.2) are derived again when an
    override changes d_model or h (as TransformerConfig.replace does).
    """
    data = config.to_dict()
    model = data["model"]
    for key in TOKENIZER_OWNED:                                   # the tokenizer section decides these
        del model[key]
    keys = {parse_override(item)[0] for item in overrides}
    if keys & {"model.d_model", "model.h"}:
        for name in ("d_k", "d_v"):
            if f"model.{name}" not in keys and model[name] == config.model.d_model // config.model.h:
                del model[name]
    return from_dict(_override(data, overrides), where="--set")


def _override(data: dict, overrides: list[str]) -> dict:
    """The nested config dict with each `key=value` set; unknown keys are InputErrors."""
    data = json.loads(json.dumps(data))                           # a deep copy of plain data
    valid = set(valid_keys())
    for item in overrides:
        key, value = parse_override(item)
        section, _, leaf = key.rpartition(".")
        if section == "model" and leaf in TOKENIZER_OWNED:
            raise _tokenizer_owned(key, f"--set {item}")
        if key not in valid:
            raise _unknown_key(key, f"--set {item}")
        (data.setdefault(section, {}) if section else data)[leaf] = value
    return data


def diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    keys = []
    for key in sorted(old.keys() | new.keys()):
        a, b, dotted = old.get(key), new.get(key), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            keys += diff(a, b, dotted + ".")
        elif a != b:
            keys.append(dotted)
    return keys


def to_json(config: RunConfig) -> str:
    return json.dumps(config.to_dict(), indent=2, sort_keys=True)


__all__ = ["RunConfig", "TaskConfig", "TokenizerConfig", "TrainConfig", "DecodeConfig", "TransformerConfig",
           "load", "from_dict", "apply_overrides", "parse_override", "valid_keys", "diff", "to_json",
           "RESUMABLE_KEYS"]
