"""A run is what its manifest says (train/run/manifest.py, train/run/run_dir.py): nothing of the user's is lost.

Each test sets up a way a user's file could be lost, then checks that nothing the user wrote changed.
"""

import shutil
import warnings

import numpy as np
import pytest

from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.run import checkpointing
from train.run.loop import fit
from train.run.manifest import MANIFEST_FILE, Manifest
from train.run.metrics import read_metrics
from transformer.checkpoint import load_checkpoint

TINY = [
    "task.n_train=100", "task.n_valid=8", "task.n_test=8", "tokenizer.vocab_size=80",
    "model.N=1", "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64",
    "train.max_tokens=256", "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1",
    "train.valid_every=0", "train.valid_bleu_sentences=0", "train.ckpt_every=2", "train.keep_last=2",
    "train.keep_last_full=1", "train.average_last=2", "train.threads=1",
]


def quiet_fit(run_dir, *extra, **kwargs):
    config = config_lib.apply_overrides(RunConfig(name="tiny"), TINY + list(extra))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(config, run_dir, progress=False, **kwargs)


def losses(run_dir) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def contents(folder) -> dict:
    """Every file under `folder` with its bytes and modification time."""
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The run to 10 steps without anyone's files in it: what the runs below must reproduce exactly."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    quiet_fit(run_dir, "train.max_steps=10")
    return run_dir


def test_a_users_safety_copy_is_never_averaged_pruned_or_resumed_from(straight, tmp_path):
    """Not every ckpt_<digits>.safetensors is ours. A user's safety copy ckpt_30.safetensors must not be
    averaged into the final model nor deleted by pruning; being "newer", it must not make pruning drop the
    run's only optimizer state (no exact resume), nor break `average`."""
    run_dir = tmp_path / "run"
    quiet_fit(run_dir, "train.max_steps=6")
    copy = run_dir / "ckpt_30.safetensors"
    shutil.copy(run_dir / "ckpt_00000006.safetensors", copy)  # the user's safety copy, a higher "step"
    mine = contents(run_dir)[copy.relative_to(run_dir)]
    quiet_fit(run_dir, "train.max_steps=8")  # prunes ckpt 4, keeps Adam's state for 8 only
    assert (run_dir / "ckpt_00000008.optimizer.safetensors").is_file()  # the run's optimizer state is kept
    out, names = checkpointing.average_last(run_dir)  # train.average_last = 2
    assert names == ["ckpt_00000006.safetensors", "ckpt_00000008.safetensors"]
    assert "ckpt_30.safetensors" not in load_checkpoint(out)[1]["averaged_from"]
    resumed = quiet_fit(run_dir, "train.max_steps=10")  # resumes exactly from 8, not from the copy
    assert losses(run_dir) == losses(straight)
    for (name, a), (_, b) in zip(resumed.model.named_parameters(),
                                 checkpointing.load_for_inference(straight / "ckpt_00000010.safetensors")[0]
                                 .named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert contents(run_dir)[copy.relative_to(run_dir)] == mine  # byte for byte, never touched
    quiet_fit(run_dir, "train.max_steps=2", "model.d_model=32", force=True)  # --force starts over ...
    assert contents(run_dir)[copy.relative_to(run_dir)] == mine  # ... and deletes only what the manifest lists


def test_a_file_of_ours_by_name_but_not_in_the_manifest_stops_fit_before_it_writes(tmp_path):
    run_dir = tmp_path / "run"
    quiet_fit(run_dir, "train.max_steps=2")
    theirs = run_dir / "ckpt_00000004.safetensors"  # where step 4's checkpoint would go
    theirs.write_bytes(b"the user's own file")
    before = contents(run_dir)
    with pytest.raises(InputError, match=r"holds 'ckpt_00000004.safetensors', which this tool did not write .*"
                                         r"nothing was changed; move them out of the run directory"):
        quiet_fit(run_dir, "train.max_steps=4")
    after = contents(run_dir)
    assert {k: v for k, v in after.items() if k.name not in ("run.lock", MANIFEST_FILE)} == \
        {k: v for k, v in before.items() if k.name not in ("run.lock", MANIFEST_FILE)}


def test_a_folder_of_files_with_our_names_but_no_manifest_is_not_a_run(straight, tmp_path):
    """`fit` without --force never replaces or deletes a user's files in a folder that holds only files
    with our names (config.json, tokenizer.model, tokenizer.vocab, metrics.jsonl)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("config.json", "tokenizer.model", "tokenizer.vocab", "metrics.jsonl"):
        shutil.copy(straight / name, folder / name)  # a real run's config, even: still not a run
    before = contents(folder)
    for force in (False, True):
        with pytest.raises(InputError, match=r"mine: not a run directory \(it holds 'config.json', 'metrics.jsonl', "
                                             r"'tokenizer.model', 'tokenizer.vocab' but no manifest.jsonl.*nothing in "
                                             r"it is changed; choose a new or empty --run-dir"):
            quiet_fit(folder, "train.max_steps=2", force=force)
        assert contents(folder) == before


def test_a_run_made_before_manifests_is_adopted_once_when_every_checkpoint_verifies(straight, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(straight, old)
    (old / MANIFEST_FILE).unlink()  # a run made before manifests
    (old / "notes.txt").write_text("mine")
    (old / "ckpt_7.safetensors").write_bytes((old / "ckpt_00000010.safetensors").read_bytes())  # a safety copy
    capsys.readouterr()
    result = quiet_fit(old, "train.max_steps=12")
    out = capsys.readouterr().out
    assert "adopted" in out and "a run made before run manifests" in out and result.progress.step == 12
    listed = set(Manifest.load(old).listed())
    assert "notes.txt" not in listed and "ckpt_7.safetensors" not in listed and "config.json" in listed
    assert losses(old)[:10] == losses(straight)

    broken = tmp_path / "broken"
    shutil.copytree(straight, broken)
    (broken / MANIFEST_FILE).unlink()
    data = bytearray((broken / "ckpt_00000008.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (broken / "ckpt_00000008.safetensors").write_bytes(bytes(data))
    before = contents(broken)
    with pytest.raises(InputError, match=r"broken: not a run directory .*adopted only when every checkpoint "
                                         r"verifies: ckpt_00000008.safetensors"):
        quiet_fit(broken, "train.max_steps=12")
    assert contents(broken) == before


def test_force_keeps_a_file_of_ours_the_user_changed_and_says_so(tmp_path, capsys):
    run_dir = tmp_path / "run"
    quiet_fit(run_dir, "train.max_steps=2")
    (run_dir / "tokenizer.vocab").write_text("edited by hand")
    capsys.readouterr()
    with pytest.raises(InputError, match=r"tokenizer.vocab: exists and this tool did not write it .*nothing was "
                                         r"overwritten"):  # the new run would write it: the user moves it first
        quiet_fit(run_dir, "train.max_steps=2", "model.d_model=32", force=True)
    assert "kept 'tokenizer.vocab': changed since this tool wrote it, so it is yours now" in capsys.readouterr().out
    assert (run_dir / "tokenizer.vocab").read_text() == "edited by hand"


def test_a_kill_between_a_write_and_its_hash_leaves_the_file_ours(tmp_path):
    """Every write is announced in the manifest before it starts, so a file of ours overwritten (best.safetensors,
    config.json) by a process killed before it recorded the new hash is still ours, and the next run records it."""
    manifest = Manifest.create(tmp_path)
    manifest.write_bytes("best.safetensors", b"the first best")
    manifest.claim("best.safetensors")
    (tmp_path / "best.safetensors").write_bytes(b"a better one, written just before a kill")
    again = Manifest.load(tmp_path)
    assert again.owns("best.safetensors")
    again.settle()
    recorded = Manifest.load(tmp_path).entries["best.safetensors"]
    assert recorded["size"] == len(b"a better one, written just before a kill")
    (tmp_path / "best.safetensors").write_bytes(b"the user's own, written over ours")
    assert not Manifest.load(tmp_path).owns("best.safetensors")  # changed since: the user's now


def test_average_and_translate_replace_in_a_run_directory_only_a_file_of_the_runs(straight, tmp_path):
    """`average --out` and `translate --output` with --force anywhere inside a run directory (plots/ included)
    replace a file only if the run's manifest lists it; what they write there is then listed as the run's."""
    from train import commands
    from train.__main__ import build_parser

    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    (run_dir / "plots").mkdir(exist_ok=True)
    mine = run_dir / "plots" / "mine.safetensors"
    mine.write_bytes(b"the user's own")
    with pytest.raises(InputError, match="this tool did not write it"):
        checkpointing.average_last(run_dir, 2, mine, force=True)
    checkpointing.average_last(run_dir, 2, run_dir / "plots" / "avg.safetensors")
    assert Manifest.load(run_dir).owns("plots/avg.safetensors")

    source = tmp_path / "src.txt"
    source.write_text("one two\n")
    notes = run_dir / "notes.txt"
    notes.write_text("the user's notes")
    checkpoint = checkpointing.run_checkpoints(run_dir)[-1]
    translate = ["translate", "--ckpt", str(checkpoint), "--input", str(source), "--backend", "numpy",
                 "--threads", "1", "--force", "--output"]
    with pytest.raises(InputError, match="this tool did not write it"):
        commands.translate(build_parser().parse_args(translate + [str(notes)]))
    assert notes.read_text() == "the user's notes" and mine.read_bytes() == b"the user's own"
    assert commands.translate(build_parser().parse_args(translate + [str(run_dir / "out.txt")])) == 0
    assert Manifest.load(run_dir).owns("out.txt")


def test_translate_through_a_symlink_into_a_run_directory_is_that_runs_write(straight, tmp_path):
    """`translate --output LINK --force`, LINK a symlink (outside the run) to a file in a run directory: the path
    is resolved before the run is looked for, so a user's file there is refused and left as it was, and a file
    of the run's is replaced and recorded anew in the run's manifest (it stays the run's)."""
    from train import commands
    from train.__main__ import build_parser

    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    source = tmp_path / "src.txt"
    source.write_text("one two\nthree four five\n")
    translate = ["translate", "--ckpt", str(checkpointing.run_checkpoints(run_dir)[-1]), "--input", str(source),
                 "--backend", "numpy", "--threads", "1", "--force", "--output"]
    assert commands.translate(build_parser().parse_args(translate + [str(run_dir / "out.txt")])) == 0
    notes = run_dir / "notes.txt"
    notes.write_text("the user's notes")
    to_notes, to_out = tmp_path / "notes-link.txt", tmp_path / "out-link.txt"
    to_notes.symlink_to(notes)
    to_out.symlink_to(run_dir / "out.txt")
    with pytest.raises(InputError, match="this tool did not write it"):
        commands.translate(build_parser().parse_args(translate + [str(to_notes)]))
    assert notes.read_text() == "the user's notes"
    source.write_text("one\n")                                    # a shorter output: another size and hash
    before = (run_dir / "out.txt").read_bytes()
    assert commands.translate(build_parser().parse_args(translate + [str(to_out)])) == 0
    assert (run_dir / "out.txt").read_bytes() != before and to_out.is_symlink()
    assert Manifest.load(run_dir).owns("out.txt")


def test_settle_deletes_a_temporary_only_beside_a_write_it_announced(tmp_path):
    """A `<file>.tmp-<pid>` of a dead process is ours only while the manifest says that file is being written;
    beside a file recorded complete, a file of that name is the user's and stays."""
    manifest = Manifest.create(tmp_path)
    manifest.write_bytes("config.json", b"{}")
    dead = 2 ** 22 + 12345  # above Linux's largest pid
    users = tmp_path / f"config.json.tmp-{dead}"
    users.write_bytes(b"the user's")
    manifest.claim("best.safetensors")  # then killed: its temporary is left
    ours = tmp_path / f"best.safetensors.tmp-{dead}"
    ours.write_bytes(b"half a checkpoint")
    Manifest.load(tmp_path).settle()
    assert users.read_bytes() == b"the user's" and not ours.exists()


def test_resume_without_a_readable_config_json_is_a_one_line_error(tmp_path):
    """`fit --resume` of a run directory whose config.json is gone or not JSON: config_lib.load's InputError,
    not a traceback from the check for runs from before train.tokens_per_update."""
    from train.run.run_data import resumed_run

    Manifest.create(tmp_path)
    with pytest.raises(InputError, match="config file not found"):
        resumed_run(tmp_path, [], None)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        resumed_run(tmp_path, [], None)


def test_average_refuses_a_listed_checkpoint_whose_bytes_changed(straight, tmp_path):
    """`average` averages only checkpoints the manifest lists whose bytes still hash to what was recorded."""
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    newest = checkpointing.run_checkpoints(run_dir)[-1]
    shutil.copy(checkpointing.run_checkpoints(run_dir)[0], newest)  # the user's bytes under a name of the run's
    with pytest.raises(InputError, match=f"{newest.name} changed since this tool wrote it"):
        checkpointing.average_last(run_dir, 2)
    assert not list(run_dir.glob("averaged_last*"))
    model, _ = checkpointing.load_for_inference(checkpointing.run_checkpoints(run_dir)[0])
    with pytest.raises(InputError, match=f"{newest.name} changed since this tool wrote it"):  # the demo's average
        checkpointing.averaged_model(model, checkpointing.run_checkpoints(run_dir), 2)


def test_a_manifest_jsonl_of_another_program_above_an_output_makes_no_run(tmp_path):
    """run_containing: a folder whose manifest.jsonl is not this tool's is no run directory, so writing below it
    is neither refused nor recorded; a run further up still is."""
    from train.run.manifest import run_containing

    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / MANIFEST_FILE).write_text('{"some": "other program"}\n')
    assert run_containing(tmp_path / "theirs" / "out.txt") is None
    Manifest.create(tmp_path)
    run, name = run_containing(tmp_path / "theirs" / "out.txt")
    assert run.run_dir == tmp_path and name == "theirs/out.txt"
