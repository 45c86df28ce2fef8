"""The run's record of its data: which prepared data it trains on (prepared.json) and its copy of the tokenizer.

A run that resumes must train on the data it started on (the data order of §5.1 is a
function of it). `check_same_data` compares the sha256 of every input file, read in full
(store.fingerprint: a size and modification time decide nothing), with prepared.json; the
data store calls it once the files are hashed and before anything is prepared, so an
edited corpus is refused at once, naming the file, and no new prepared folder is left behind.

The tokenizer is copied into the run directory, where `translate` and `evaluate` look for it.
"""

import json
from pathlib import Path

from train import config as config_lib
from train.config import RunConfig
from train.data.store import SPLIT_FILES, PreparedData
from train.data.tokenizer import Tokenizer
from train.errors import InputError
from train.run.manifest import MANIFEST_FILE, Manifest

RECORD_FILE = "prepared.json"
TOKENIZER_FILE = "tokenizer.model"


def recorded(run_dir: Path) -> dict | None:
    """The run's prepared.json (None when it has none)."""
    try:
        return json.loads((Path(run_dir) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def recorded_file(run_dir: Path, name: str) -> Path | None:
    """A data file the run trained with, e.g. "valid_src"; None if not recorded."""
    try:
        return Path(recorded(run_dir)["files"][name]["path"])
    except (TypeError, KeyError):
        return None


def resumed_run(run_dir: Path, overrides: list[str], data_dir: Path | None) -> tuple[RunConfig, Path, Path | None]:
    """(config, run dir, data dir) of `fit --resume RUN_DIR`: the run's own config.json with `overrides` (the
    settings that may change are checked by run_dir.plan_start) and, unless `data_dir` is given, the prepared
    data it recorded."""
    if not (run_dir / MANIFEST_FILE).is_file() and not (run_dir / "config.json").is_file():
        raise InputError(f"{run_dir}: not a run directory (no {MANIFEST_FILE}, no config.json) to resume")
    try:
        saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing or not JSON: config_lib.load below names it in one line
        saved = None
    refuse_a_config_with_train_accum(saved, run_dir)
    record = recorded(run_dir)
    data_dir = data_dir or (Path(record["data"]).parent if record else None)
    manifest = Manifest.find(run_dir)
    if not (run_dir / "config.json").exists() and manifest is not None and manifest.identity is not None:  # moved out
        where = f"{run_dir / MANIFEST_FILE} (the run's record; config.json is missing)"
        return config_lib.apply_overrides(config_lib.from_dict(manifest.identity["config"], where), overrides), \
            run_dir, data_dir
    return config_lib.load(run_dir / "config.json", overrides), run_dir, data_dir


def refuse_a_config_with_train_accum(saved: dict, run_dir: Path) -> None:
    """An InputError for a run config that sets train.accum (micro-batches, not tokens, per update): its update
    cannot be kept exactly on resume, nor on another world size."""
    train = saved.get("train") if isinstance(saved, dict) else None
    if isinstance(train, dict) and "accum" in train:
        raise InputError(f"{run_dir / 'config.json'}: this run was started before train.tokens_per_update replaced "
                         f"train.accum (accum {saved['train']['accum']}), so its update cannot be kept exactly on "
                         f"resume; start a new run (from its weights, if it saved any: --init-from {run_dir}/<a ckpt_*.safetensors>)")


def check_same_data(run_dir: Path, record: dict | None):
    """A `check_files` for store.prepare_data: an InputError naming the first changed file (None: no check)."""
    if record is None:
        return None

    def check(files: dict[str, dict]) -> None:
        changed = [_describe_change(name, record["files"].get(name), files.get(name)) for name in SPLIT_FILES
                   if _sha256(record["files"].get(name)) != _sha256(files.get(name))]
        if changed:
            raise InputError(f"{run_dir}: the data changed since this run started: {'; '.join(changed[:2])}; "
                             f"resume on the same data, use another --run-dir, or --force to start over")
    return check


def given_tokenizer(run_dir: Path, record: dict | None) -> Tokenizer | None:
    """A fine-tuning run's tokenizer when it resumes: its data was prepared with the one it was given
    (`fit --init-from`), so it is prepared with that one again (the run's copy), not with one trained from
    config.tokenizer (other data, which the run would refuse). None for a run that trained its own."""
    try:
        made = json.loads((Path(record["data"]) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    own = Path(run_dir) / TOKENIZER_FILE
    return Tokenizer(own) if "given" in made.get("tokenizer", {}) and own.is_file() else None


def check_recorded_data(run_dir: Path, data: PreparedData, resuming: bool, identity: dict | None) -> None:
    """A resumed run's vocabulary is never replaced: its tokenizer (prepared.json's, else the run's identity
    record's) must be the prepared data's; without prepared.json, the identity's data key decides too."""
    old = recorded(run_dir) or {}
    was = old.get("tokenizer_sha256") or (identity or {}).get("tokenizer_sha256")
    changed = None
    if was is not None and was != data.tokenizer.model_hash:
        changed = f"the tokenizer ({was[:12]} -> {data.tokenizer.model_hash[:12]})"
    elif not old and identity and identity.get("data_key") not in (None, data.key):
        changed = f"the prepared data ({identity['data_key'][:12]} -> {data.key[:12]})"
    if resuming and changed:
        raise InputError(f"{run_dir}: the data changed since this run started: {changed}; resume on the same "
                         f"data, use another --run-dir, or --force to start over")


def record_data(manifest: Manifest, data: PreparedData) -> None:
    """Write prepared.json and the run's tokenizer copy (after `check_recorded_data`)."""
    record = {"data": str(data.folder), "key": data.key, "tokenizer_sha256": data.tokenizer.model_hash,
              "files": {name: {k: v[k] for k in ("path", "size", "sha256")} for name, v in data.files.items()}}
    for name in (TOKENIZER_FILE, "tokenizer.vocab"):
        source, target = data.folder / name, manifest.run_dir / name
        if not (target.is_file() and target.read_bytes() == source.read_bytes()):
            manifest.write_bytes(name, source.read_bytes())
    text = json.dumps(record, indent=1).encode("utf-8")
    path = manifest.run_dir / RECORD_FILE
    if not path.is_file() or path.read_bytes() != text:
        manifest.write_bytes(RECORD_FILE, text)


def _sha256(file: dict | None) -> str | None:
    return None if file is None else file["sha256"]


def _describe_change(name: str, old: dict | None, new: dict | None) -> str:
    key = f"task.{name}"
    if old is None or new is None:
        return f"{key} was {'added' if old is None else 'removed'}"
    where = new["path"] if new["path"] == old["path"] else f"{old['path']} -> {new['path']}"
    return f"{key} {where} has other contents (sha256 {old['sha256'][:12]} -> {new['sha256'][:12]})"
