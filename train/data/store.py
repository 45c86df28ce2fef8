"""Prepared data: the tokenizer and token ids of a corpus, made once and shared by every run that uses it.

    prepared = prepare_data(config, data_dir)      # `python -m train prepare`; `fit` calls it too

Layout of `data_dir` (by default `prepared/` beside the run directories, e.g. runs/prepared):

    builtin-<hash>/     the built-in task's text (train/data/builtin_task.py), named by a hash of its content
    ptb-<hash>/         the ptb task's words, linearised and gold trees (train/parsing/treebank.py), the same way
    <key>/              one prepared corpus:
        tokenizer.model, tokenizer.vocab    the shared BPE vocabulary (§5.1)
        {src,tgt}_{ids,offsets}.npy, meta.json     the token ids (train/data/corpus.py)
        manifest.json   what it was made from (paths, sizes, sha256), the settings, sizes, timings, and
                        "contents": every other file's size and sha256 (and each array's length)

`key` is a sha256 of the format, the sha256 of both training files' bytes and the
tokenizer settings. The same corpus with the same settings maps to the same folder on
any machine (copy the folder to share it); one changed byte maps to another. Every
input file is read and hashed each time (about 1.3 s per GB with hardware SHA): a file's
size and modification time never stand for its content, so an edit that keeps both is
seen, and a touched file finds the same key and nothing is re-encoded. The tokenizer sample
and the encoding hash the bytes they read as well, and a build whose text is not the hashed
text (a file edited meanwhile) stores nothing: what a folder holds is what its key names.

Folders are built privately and renamed into place whole, and checked, not trusted, each
time they are used: every file's size and sha256 (and each array's length) must be the ones
their manifest recorded (train/data/prepared_folder.py). A damaged or partial folder (an
interrupted copy, overwritten ids) is rebuilt by `prepare` and refused by `fit`, which says
to run `prepare`.
"""

import hashlib
import json
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from train.config import RunConfig, TaskConfig
from train.data import builtin_task
from train.data.corpus import TokenizedCorpus, default_workers
from train.data.files import count_lines, multi30k_paths, shared_data_dir, write_atomic
from train.data.prepared_folder import MANIFEST, building, contents, damage, publish, remove_stale_builds, tmp_folder
from train.data.progress import progress_bar
from train.data.tokenizer import Tokenizer
from train.errors import InputError, naming
from train.parsing import treebank

PREPARED_FORMAT = 1  # bump when the layout changes: every key changes with it
TOKENIZER_SAMPLE_SEED = 0  # the tokenizer's training sample depends on the corpus alone, not on train.seed
SPLIT_FILES = ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")


@dataclass
class PreparedData:
    folder: Path
    key: str
    tokenizer: Tokenizer
    corpus: TokenizedCorpus
    paths: dict[str, tuple[Path, Path] | None]  # {"train": (src, tgt), "valid": ..., "test": ... or None}
    files: dict[str, dict]  # "train_src", ...: {"path", "size", "sha256", "lines"} of every input file
    manifest: dict
    reused: bool
    workers: int  # encoding processes used (0 when reused)


# ------------------------------------------------------------------ where the text is
def _shared_path(value: str, key: str) -> Path:
    root = shared_data_dir()
    if root is None:
        raise InputError(f"task.{key} = {value!r}: the shared data folder (<repo>/../shared/data) "
                         f"is not here; point task.{key} at your own file")
    return root / value.removeprefix("shared:")


def _task_path(value: str, key: str) -> Path:
    """A path from the config: `shared:...` is under ../shared/data, anything else is the user's."""
    return _shared_path(value, key) if value.startswith("shared:") else Path(value).expanduser()


def resolve_paths(task: TaskConfig, data_dir: Path) -> dict[str, tuple[Path, Path] | None]:
    """{"train": (src, tgt), "valid": (src, tgt), "test": (src, tgt) or None} for the task."""
    if task.kind == "builtin":
        splits = builtin_task.make_number_task(seed=task.seed, n_train=task.n_train, n_valid=task.n_valid,
                                               n_test=task.n_test)
        texts = {f"{split}.{lang}": "".join(pair[side] + "\n" for pair in pairs).encode("utf-8")
                 for split, pairs in splits.items() for side, lang in enumerate(("en", "de"))}
        folder = _generated_task("builtin", texts, Path(data_dir))
        return {split: (folder / f"{split}.en", folder / f"{split}.de") for split in builtin_task.SPLITS}
    if task.kind == "ptb":  # §6.3 parsing: treebank files -> (words, linearised tree, gold tree) files
        ranges = {split: getattr(task, f"treebank_{split}") for split in treebank.SPLITS}
        folder = _generated_task("ptb", treebank.split_files(_task_path(task.treebank, "treebank"), ranges),
                                 Path(data_dir))
        return {split: (folder / f"{split}.words", folder / f"{split}.tree") for split in treebank.SPLITS}
    if task.kind == "multi30k":
        return {"train": multi30k_paths("train"), "valid": multi30k_paths("val"),
                "test": multi30k_paths("test")}
    paths: dict[str, tuple[Path, Path] | None] = {}
    for split in ("train", "valid", "test"):
        pair = []
        for side in ("src", "tgt"):
            key, value = f"{split}_{side}", getattr(task, f"{split}_{side}")
            if not value:
                pair = None
                break
            pair.append(_task_path(value, key))
        if pair is None and split != "test":
            raise InputError(f"task.{split}_src and task.{split}_tgt must be set for task.kind = 'files' "
                             f"(edit the config or pass --set task.{split}_src=PATH)")
        paths[split] = tuple(pair) if pair else None
    return paths


def _generated_task(name: str, texts: dict[str, bytes], data_dir: Path) -> Path:
    """`data_dir/<name>-<hash of texts>/` holding the files `texts` (file name -> bytes), written once."""
    digest = hashlib.sha256()
    for file_name, data in sorted(texts.items()):
        digest.update(file_name.encode() + b"\0" + hashlib.sha256(data).digest())
    folder = data_dir / f"{name}-{digest.hexdigest()[:16]}"
    if folder.is_dir():
        return folder
    tmp = tmp_folder(data_dir, name)
    try:
        with naming(folder):
            for file_name, data in texts.items():
                (tmp / file_name).write_bytes(data)
            if not folder.is_dir():
                publish(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ------------------------------------------------------------------ what the text is
def _hash_and_count(path: Path, bar: tqdm, block: int = 1 << 24) -> dict:
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with open(path, "rb") as f:
        while data := f.read(block):
            digest.update(data)
            lines += data.count(b"\n")
            last = data[-1:]
            bar.update(len(data))
    if path.name.endswith(".gz"):
        return {"sha256": digest.hexdigest(), "lines": count_lines(path)}
    return {"sha256": digest.hexdigest(), "lines": lines + (last != b"\n")}


def fingerprint(paths: dict[str, Path], progress: bool = False) -> dict[str, dict]:
    """{name: {"path", "size", "sha256", "lines"}} for each file, every byte read and hashed; "path" is
    absolute, so a record of it names the file from any working directory.

    The hash decides whether a corpus is the one a run or a prepared folder was made from, so it is
    never taken from a file's size and modification time (an edit that keeps both is caught).
    """
    out = {}
    for name, path in paths.items():
        try:
            size = path.stat().st_size
        except OSError:
            raise InputError(f"{path}: file not found") from None
        with progress_bar(progress, total=size, unit="B", unit_scale=True, desc=f"hashing {path.name}") as bar:
            out[name] = {"path": str(path.absolute()), "size": size, **_hash_and_count(path, bar)}
    return out


def prepared_key(files: dict[str, dict], config: RunConfig, tokenizer: "Tokenizer | None" = None) -> str:
    """sha256 of what the tokenizer and the ids depend on: the training text and the tokenizer settings
    (or, for a given tokenizer, its model file's sha256)."""
    tok = config.tokenizer
    what = {"format": PREPARED_FORMAT, "train_src": files["train_src"]["sha256"],
            "train_tgt": files["train_tgt"]["sha256"]}
    if tokenizer is None:
        what.update(vocab_size=tok.vocab_size, model_type=tok.model_type, sample_size=tok.sample_size,
                    sample_seed=TOKENIZER_SAMPLE_SEED)
    else:
        what.update(tokenizer_sha256=tokenizer.model_hash)
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


# ------------------------------------------------------------------ the whole step
def prepare_data(config: RunConfig, data_dir: str | Path, workers: int = 0, log=print, progress: bool = False,
                 check_files: Callable[[dict], None] | None = None, tokenizer: Tokenizer | None = None,
                 rebuild: bool = False) -> PreparedData:
    """The prepared tokenizer and ids for `config`'s training corpus: reused when `data_dir` has them, else made.
    A damaged folder (see `damage`) is rebuilt with `rebuild` (`prepare`), else an InputError saying to run
    `prepare` (`fit`: a run never trains on ids it cannot vouch for).

    `workers` encoding processes (0: one per core for a large corpus, none for a small one).
    `check_files(files)` runs once every input file is hashed, before anything is prepared (a run
    that resumes refuses changed data there). `tokenizer`: encode with this one instead of training
    one (fine-tuning keeps the vocabulary of the model it starts from; `config.tokenizer` is then
    not used). Input problems (missing files, line counts that differ, bad UTF-8) are InputErrors.
    """
    if workers < 0:  # prepare --workers
        raise InputError(f"--workers must be 0 (one process per core for a large corpus) or more, got {workers}")
    data_dir = Path(data_dir)
    paths = resolve_paths(config.task, data_dir)
    remove_stale_builds(data_dir)
    named = {f"{split}_{side}": pair[i] for split, pair in paths.items() if pair
             for i, side in enumerate(("src", "tgt"))}
    start = time.perf_counter()
    files = fingerprint(named, progress)
    hash_s = time.perf_counter() - start
    if check_files is not None:
        check_files(files)
    given = tokenizer
    key = prepared_key(files, config, given)
    folder = data_dir / key[:16]
    src, tgt = paths["train"]
    problem = damage(folder) if folder.exists() else "absent"
    if problem is None:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        tokenizer, corpus = Tokenizer(folder / "tokenizer.model"), TokenizedCorpus(folder)
        log(f"reusing prepared data {folder} (made from {src.name} + {tgt.name}: {len(corpus):,} pairs, "
            f"tokenizer {tokenizer.vocab_size} pieces, every file checked; nothing to encode)")
        return PreparedData(folder, key, tokenizer, corpus, paths, files, manifest, True, 0)
    if problem != "absent" and not rebuild:
        raise InputError(f"{folder}: the prepared data is damaged ({problem}); nothing was trained; run `python -m "
                         f"train prepare` with the same config and --data-dir {data_dir} to rebuild it")
    if problem != "absent":
        log(f"rebuilding prepared data {folder}: {problem}")
    _check_line_counts(files)
    workers = workers or default_workers(files["train_src"]["size"] + files["train_tgt"]["size"])
    tok = config.tokenizer
    lines = files["train_src"]["lines"] + files["train_tgt"]["lines"]
    made = (f"the given tokenizer {given.model_path} ({given.vocab_size} pieces)" if given else
            f"a shared {tok.model_type} tokenizer ({tok.vocab_size} pieces) from {min(lines, tok.sample_size):,} "
            f"of the {lines:,} lines of {src.name} + {tgt.name}")
    log(f"preparing data in {folder}: {made}, then the ids of {files['train_src']['lines']:,} pairs with "
        f"{workers} process{'es' if workers > 1 else ''}")
    with building(folder) as tmp:
        start = time.perf_counter()
        if given is None:
            read = _reading(src, tgt)
            tokenizer = Tokenizer.train([src, tgt], tmp / "tokenizer", vocab_size=tok.vocab_size,
                                        model_type=tok.model_type, sample_size=tok.sample_size,
                                        seed=TOKENIZER_SAMPLE_SEED, progress=progress, digests=read)
            _check_read(files, read)
        else:
            write_atomic(tmp / "tokenizer.model", given.model_path.read_bytes())
            tokenizer = Tokenizer(tmp / "tokenizer.model")
            tokenizer.write_vocab(tmp / "tokenizer.vocab")
        tokenizer_s = time.perf_counter() - start
        read = _reading(src, tgt)
        corpus = TokenizedCorpus.build(src, tgt, tokenizer, tmp, workers=workers, total_lines=files["train_src"]["lines"],
                                       progress=progress, digests=(read[src], read[tgt]))
        _check_read(files, read)
        encode_s = time.perf_counter() - start - tokenizer_s
        manifest = {
            "format": PREPARED_FORMAT, "key": key, "made_from": {k: files[k] for k in ("train_src", "train_tgt")},
            "tokenizer": {"pieces": tokenizer.vocab_size, "sha256": tokenizer.model_hash,
                          **({"given": str(given.model_path)} if given else
                             {"vocab_size": tok.vocab_size, "model_type": tok.model_type,
                              "sample_size": tok.sample_size, "sample_seed": TOKENIZER_SAMPLE_SEED})},
            "ids_dtype": corpus.meta["dtype"], "stats": corpus.meta["stats"], "workers": workers,
            "seconds": {"hash": hash_s, "tokenizer": tokenizer_s, "encode": encode_s},
            "created": time.strftime("%Y-%m-%d %H:%M:%S"), "host": socket.gethostname(), "contents": contents(tmp),
        }
        write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
    log(f"prepared data {folder}: tokenizer {tokenizer_s:.0f} s, encoding {encode_s:.0f} s "
        f"({corpus.meta['dtype']} ids)")
    tokenizer, corpus = Tokenizer(folder / "tokenizer.model"), TokenizedCorpus(folder)
    return PreparedData(folder, key, tokenizer, corpus, paths, files, manifest, False, workers)


def _reading(src: Path, tgt: Path) -> dict:
    """{path: sha256 object} for one more read of the two training files (their bytes go in as they are read)."""
    return {src: hashlib.sha256(), tgt: hashlib.sha256()}


def _check_read(files: dict[str, dict], read: dict) -> None:
    """The bytes a pass read are the bytes the key was made from, else nothing is stored."""
    for name in ("train_src", "train_tgt"):
        path = Path(files[name]["path"])
        digest = next(d for p, d in read.items() if Path(p).absolute() == path)
        if digest.hexdigest() != files[name]["sha256"]:
            raise InputError(f"{path}: changed while it was being prepared; nothing was stored; run again once "
                             f"it is no longer being written")


def _check_line_counts(files: dict[str, dict]) -> None:
    """Parallel files must pair up line for line; say so before minutes of tokenizer training."""
    for split in ("train", "valid", "test"):
        src, tgt = files.get(f"{split}_src"), files.get(f"{split}_tgt")
        if src is None:
            continue
        for side in (src, tgt):
            if side["size"] == 0:
                raise InputError(f"{side['path']}: empty file")
        if src["lines"] != tgt["lines"]:
            raise InputError(f"{src['path']} has {src['lines']} lines but {tgt['path']} has {tgt['lines']}; "
                             "parallel files must have one sentence a line, line for line")
