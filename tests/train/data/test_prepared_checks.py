"""Prepared data is checked, not trusted: a damaged or partial folder is rebuilt by `prepare` and refused by
`fit`, and a corpus edited while it is prepared stores nothing."""

import shutil
import warnings

import numpy as np
import pytest

import train.data.store as store
from train.data.builtin_task import make_number_task
from train.data.store import damage, prepare_data
from train.errors import InputError
from train.run.loop import fit

from tests.train.data.test_prepare import files_config, quiet, write


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    task = make_number_task(seed=2, n_train=200, n_valid=10, n_test=10)
    return {split: (write(folder / f"{split}.en", [e for e, _ in pairs]),
                    write(folder / f"{split}.de", [d for _, d in pairs])) for split, pairs in task.items()}


def truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def drop(path):
    path.unlink()


def overwrite_ids(path):
    ids = np.load(path, mmap_mode="r+")
    ids[:5] = ids[5:10].copy()  # other token ids, same size and length
    ids.flush()


def strip_manifest(path):  # a copy interrupted before its last file
    (path.parent / "manifest.json").unlink()


@pytest.mark.parametrize("name, harm, why", [
    ("src_ids.npy", truncate, "src_ids.npy has"),
    ("tgt_offsets.npy", drop, "tgt_offsets.npy is missing"),
    ("tgt_ids.npy", overwrite_ids, "tgt_ids.npy has other contents"),
    ("tokenizer.model", drop, "tokenizer.model is missing"),
    ("src_ids.npy", strip_manifest, "no manifest.json"),
])
def test_a_damaged_store_is_refused_by_fit_and_rebuilt_by_prepare(tmp_path, corpus, name, harm, why):
    config, data_dir = files_config(corpus, "train.max_steps=1"), tmp_path / "prepared"
    made = quiet(prepare_data, config, data_dir, log=lambda m: None)
    good = {p.name: p.read_bytes() for p in made.folder.iterdir() if p.name != "manifest.json"}
    harm(made.folder / name)
    assert damage(made.folder) is not None

    with pytest.raises(InputError, match=rf"prepared data is damaged \({why}.*run `python -m train prepare`"):
        quiet(fit, config, tmp_path / "run", progress=False, data_dir=data_dir)
    assert not (tmp_path / "run" / "ckpt_00000001.safetensors").exists()

    logs = []
    rebuilt = quiet(prepare_data, config, data_dir, log=logs.append, rebuild=True)
    assert not rebuilt.reused and rebuilt.folder == made.folder and any("rebuilding" in m for m in logs)
    assert {p.name: p.read_bytes() for p in rebuilt.folder.iterdir() if p.name != "manifest.json"} == good
    assert not list(data_dir.glob("*.tmp-*")), "nothing left beside it"
    assert quiet(fit, config, tmp_path / "run", progress=False, data_dir=data_dir).progress.step == 1


def test_a_corpus_edited_while_it_is_prepared_stores_nothing(tmp_path, corpus, monkeypatch):
    src = tmp_path / "train.en"
    shutil.copy(corpus["train"][0], src)
    config = files_config(dict(corpus, train=(src, corpus["train"][1])))
    hashed = store.fingerprint

    def edit_after_hashing(*args, **kwargs):
        files = hashed(*args, **kwargs)
        src.write_bytes(src.read_bytes().replace(b"one", b"two", 1))  # the same size, after the hash was taken
        return files
    monkeypatch.setattr(store, "fingerprint", edit_after_hashing)
    with pytest.raises(InputError, match=rf"{src}: changed while it was being prepared; nothing was stored"):
        quiet(prepare_data, config, tmp_path / "prepared", log=lambda m: None)
    assert list((tmp_path / "prepared").iterdir()) == [], "no folder stored under the unedited text's key"

def test_reuse_checks_every_file_of_the_store(tmp_path, corpus):
    made = quiet(prepare_data, files_config(corpus), tmp_path / "prepared", log=lambda m: None)
    contents = made.manifest["contents"]
    assert set(contents) == {p.name for p in made.folder.iterdir()} - {"manifest.json"}
    assert contents["src_ids.npy"]["length"] == len(made.corpus.src_ids)
    assert contents["tgt_offsets.npy"]["length"] == len(made.corpus) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = prepare_data(files_config(corpus), tmp_path / "prepared", log=lambda m: None)
    assert again.reused


def test_a_dev_set_of_empty_lines_is_refused_at_prepare(tmp_path, corpus):
    from tests.cli_helpers import assert_one_line_error, run_cli
    from tests.train.data.test_prepare import ROOT, TINY

    empty_src, empty_tgt = write(tmp_path / "dev.en", ["", "", ""]), write(tmp_path / "dev.de", ["", " ", ""])
    (src, tgt) = corpus["train"]
    sets = ["task.kind=files", f"task.train_src={src}", f"task.train_tgt={tgt}", f"task.valid_src={empty_src}",
            f"task.valid_tgt={empty_tgt}", *TINY]
    done = run_cli("prepare", "--config", str(ROOT / "configs" / "demo.toml"), "--data-dir", str(tmp_path / "data"),
                   "--no-progress", *[arg for item in sets for arg in ("--set", item)])
    assert_one_line_error(done, str(empty_src), "a dev or test set needs at least one sentence pair")


def kill_self(*args):
    """Stands for an encoding worker the OOM killer ends."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_encoding_worker_is_a_one_line_error(tmp_path, corpus, monkeypatch):
    import train.data.corpus as corpus_module
    from train.data.tokenizer import Tokenizer

    made = quiet(prepare_data, files_config(corpus), tmp_path / "prepared", log=lambda m: None)
    monkeypatch.setattr(corpus_module, "_encode_in_worker", kill_self)
    with pytest.raises(InputError, match="an encoding worker process died .*nothing was stored"):
        corpus_module.TokenizedCorpus.build(*corpus["train"], Tokenizer(made.folder / "tokenizer.model"),
                                            tmp_path / "ids", workers=2, chunk_pairs=50)
    assert not list((tmp_path / "ids").glob("*.npy")) and not list((tmp_path / "ids").glob("*.raw"))
