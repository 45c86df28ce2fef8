"""A run is its record, not its files (train/run/run_dir.py, run_names.py): the tool's own commands never cost
a run its work.

One owner per name: no command but `fit` writes a name `fit` writes, reads or prunes (through a symlink
or with --force); a start is checked whole before the run directory changes; deleting checkpoints or
moving config.json out never turns a run into another; `fit --force` deletes only the tool's files.
"""

import json
import shutil

import pytest

from tests.train.run.test_run_dir import contents, quiet_fit
from train import commands
from train.__main__ import build_parser
from train.errors import InputError
from train.run import checkpointing
from train.run.manifest import MANIFEST_FILE, Manifest, sha256_of
from train.run.metrics import read_metrics


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run of 10 steps: checkpoints 8 and 10 (10 with its optimizer file), best.safetensors."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    quiet_fit(run_dir, "train.max_steps=10")
    return run_dir


@pytest.fixture
def run(trained, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    return run_dir


def _translate(run_dir, output, *extra):
    source = run_dir.parent / "src.txt"
    source.write_text("one two\nthree four five\n")
    args = ["translate", "--ckpt", str(run_dir / "best.safetensors"), "--input", str(source), "--backend", "numpy",
            "--threads", "1", "--output", str(output), *extra]
    return commands.translate(build_parser().parse_args(args))


@pytest.mark.parametrize("name, force", [
    ("ckpt_00000012.safetensors", False), ("config.json", True), ("best.safetensors", True),
    (MANIFEST_FILE, True), ("plots/loss.png", False), ("link-to:tokenizer.model", True), ("link-to:config.json", True),
    ("outside-link-to:tokenizer.model", True), ("outside-link-to:best.safetensors", True)])
def test_translate_never_writes_a_name_another_command_owns(run, tmp_path, name, force):
    """`translate --output RUN/ckpt_00000012.safetensors` was recorded as the run's checkpoint (the next fit resumed
    from text and pruned the real one); with --force or through a symlink (in the run or outside it) it replaced
    config.json, best.safetensors or the tokenizer; at a plot's name, `plot` overwrote the translation. Each is
    refused, naming RUN/outputs/, and nothing in the run changes; RUN/outputs/ takes the translation."""
    where, _, target = name.rpartition(":")
    output = {"": run / target, "link-to": run / "mine.txt", "outside-link-to": tmp_path / "mine.txt"}[where]
    if where:
        output.symlink_to(run / target)
    before = contents(run)
    with pytest.raises(InputError, match=f"write your own outputs under {run / 'outputs'}/"):
        _translate(run, output, *(["--force"] if force else []))
    assert contents(run) == before
    assert _translate(run, run / "outputs" / "hyp.txt") == 0
    quiet_fit(run, "train.max_steps=12")  # resumes from its own checkpoint 10, as if nobody had written there
    assert [p.name for p in checkpointing.run_checkpoints(run)] == ["ckpt_00000010.safetensors",
                                                                     "ckpt_00000012.safetensors"]
    assert (run / "outputs" / "hyp.txt").read_text().count("\n") == 2


@pytest.mark.parametrize("command, out", [
    ("evaluate", "ckpt_00000012.safetensors"), ("evaluate", "plots/bleu.png"),
    ("export", "ckpt_00000012.safetensors"), ("export", "plots"), ("export", "tensorboard"),
    ("average", "best.safetensors"), ("average", "ckpt_00000012.optimizer.safetensors"),
    ("export-tensorboard", "tensorboard")])
def test_every_writer_refuses_a_name_another_command_owns(run, tmp_path, command, out):
    """The same rule, one function, for evaluate --out, export --out, average --out and export-tensorboard --out."""
    source, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("one two\n")
    ref.write_text("eins zwei\n")
    ckpt = str(run / "best.safetensors")
    argv = {"evaluate": ["evaluate", "--ckpt", ckpt, "--src", str(source), "--ref", str(ref), "--backend", "numpy",
                         "--threads", "1"],
            "export": ["export", "--format", "ctranslate2", "--ckpt", ckpt],
            "average": ["average", str(run), "--last", "2", "--force"],
            "export-tensorboard": ["export-tensorboard", str(run)]}[command] + ["--out", str(run / out)]
    args = build_parser().parse_args(argv)
    before = contents(run)
    with pytest.raises(InputError, match=f"write your own outputs under {run / 'outputs'}/"):
        getattr(commands, args.command.replace("-", "_"))(args)
    assert contents(run) == before
    if command == "evaluate":  # the place the error names takes the output
        args = build_parser().parse_args(argv[:-1] + [str(run / "outputs" / "test.hyp")])
        assert commands.evaluate(args) == 0 and (run / "outputs" / "test.hyp").is_file()


def test_deleting_a_finished_runs_checkpoints_does_not_make_it_a_new_run(run):
    """With its ckpt_* files deleted to free disk, a finished run was taken for a new one: a changed setting
    deleted best.safetensors and averaged_last2.safetensors, and the same config "resumed" from step 0 and
    overwrote best.safetensors with a worse model. Both are refused, and nothing changes."""
    checkpointing.average_last(run, 2)
    for checkpoint in run.glob("ckpt_*.safetensors"):
        checkpoint.unlink()
    before = contents(run)
    with pytest.raises(InputError, match=r"train.warmup_steps \(4 -> 8\)"):
        quiet_fit(run, "train.max_steps=12", "train.warmup_steps=8")
    with pytest.raises(InputError, match="no checkpoint left.*best.safetensors"):
        quiet_fit(run, "train.max_steps=12")
    assert contents(run) == before


def test_a_fine_tune_resumes_only_from_the_model_it_started_from(run, tmp_path):
    """`--init-from B` on a run fine-tuned from A silently resumed the A fine-tune: the run records where it
    started (path and sha256), and another start is refused, naming both."""
    a, b = run / "best.safetensors", run / "ckpt_00000008.safetensors"
    tune = tmp_path / "tune"
    quiet_fit(tune, "train.max_steps=4", init_from=a)
    before = contents(tune)
    with pytest.raises(InputError, match=f"started from {a.resolve()}.*not from --init-from {b}"):
        quiet_fit(tune, "train.max_steps=6", init_from=b)
    with pytest.raises(InputError, match=f"started from scratch, not from --init-from {a}"):
        quiet_fit(run, "train.max_steps=12", init_from=a)
    assert contents(tune) == before
    assert quiet_fit(tune, "train.max_steps=6", init_from=a).progress.step == 6
    start = Manifest.load(tune).identity["init_from"]
    assert start["path"] == str(a.resolve()) and start["sha256"] == sha256_of(a)


def test_a_moved_out_config_is_checked_against_the_runs_record_and_written_again(run, tmp_path):
    """With config.json moved out (as the error for an edited one advises), any config "started" the run and
    restored its checkpoints under other settings, or overwrote config.json before a shape error. The run's
    record decides: other settings or sizes are refused with nothing written; the same config resumes."""
    from train.run.run_data import resumed_run

    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").rename(tmp_path / "config.json")
    before = contents(run)
    with pytest.raises(InputError, match=r"train.warmup_steps \(4 -> 8\)"):
        quiet_fit(run, "train.max_steps=12", "train.warmup_steps=8")
    with pytest.raises(InputError, match=r"model.d_model \(16 -> 32\)"):
        quiet_fit(run, "train.max_steps=12", "model.d_model=32")
    assert contents(run) == before
    assert resumed_run(run, [], None)[0].to_dict() == saved  # `fit --resume RUN`: the config from the record
    result = quiet_fit(run, "train.max_steps=12")
    assert result.progress.step == 12 and [r["checkpoint"] for r in read_metrics(run / "metrics.jsonl", "resume")]
    assert json.loads((run / "config.json").read_text())["train"]["warmup_steps"] == saved["train"]["warmup_steps"]


def test_a_failed_resume_writes_nothing_and_its_change_is_logged_once_when_it_takes_effect(run):
    """A resume that failed (no optimizer state) still wrote its --set train.lr_factor into config.json, so the
    next resume applied it without logging it in metrics.jsonl."""
    (run / "ckpt_00000010.optimizer.safetensors").unlink()
    before = contents(run)
    with pytest.raises(InputError, match="no optimizer state"):
        quiet_fit(run, "train.max_steps=12", "train.lr_factor=2.0")
    assert contents(run) == before
    quiet_fit(run, "train.max_steps=12", "train.lr_factor=2.0", reset_optimizer=True)
    quiet_fit(run, "train.max_steps=14", "train.lr_factor=2.0")
    changed = [r.get("changed") for r in read_metrics(run / "metrics.jsonl", "resume")]
    assert [c["train.lr_factor"] for c in changed if c and "train.lr_factor" in c] == [[1.0, 2.0]]


def test_force_deletes_only_the_tools_files_and_says_which(run, capsys):
    """`fit --force` deleted the translations the user wrote into the run directory, and listed nothing."""
    _translate(run, run / "hyp.txt")
    _translate(run, run / "outputs" / "hyp.txt")
    mine = {p: p.read_bytes() for p in (run / "hyp.txt", run / "outputs" / "hyp.txt")}
    capsys.readouterr()
    quiet_fit(run, "train.max_steps=2", force=True)
    said = capsys.readouterr().out
    assert "deleted" in said and "ckpt_00000008.safetensors" in said and "best.safetensors" in said
    assert {p: p.read_bytes() for p in mine} == mine
    assert Manifest.load(run).owns("hyp.txt")  # still the run's listed output: translate --force may replace it


def test_the_refusals_are_one_line_errors_on_the_command_line(run, tmp_path):
    """What a user sees: `error: ...` on one line, exit status 2, no traceback, the run untouched."""
    from tests.cli_helpers import assert_one_line_error, run_cli

    source = tmp_path / "src.txt"
    source.write_text("one two\n")
    before = contents(run)
    result = run_cli("translate", "--ckpt", str(run / "best.safetensors"), "--input", str(source), "--backend",
                     "numpy", "--output", str(run / "config.json"), "--force")
    assert_one_line_error(result, "config.json is a file `fit` writes", f"{run / 'outputs'}/")
    assert contents(run) == before
    for checkpoint in run.glob("ckpt_*.safetensors"):
        checkpoint.unlink()
    before = contents(run)
    assert_one_line_error(run_cli("fit", "--resume", str(run), "--no-progress"), "no checkpoint left",
                          "best.safetensors")
    assert contents(run) == before
