"""train/run/tensorboard.py: the live log of a short `fit`, and an export, read back by TensorBoard's own reader."""

import warnings

import pytest

from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from train.run.loop import fit
from train.run.manifest import Manifest
from train.run.metrics import MetricsWriter, read_metrics
from train.run.tensorboard import LIVE_DIR, TensorBoardLog, export_run, scalars_of

TINY = [
    "task.n_train=60", "task.n_valid=6", "task.n_test=6", "tokenizer.vocab_size=70",
    "model.N=1", "model.d_model=16", "model.d_ff=32", "model.h=2", "model.max_len=64",
    "train.max_tokens=256", "train.warmup_steps=4", "train.backend=numpy", "train.log_every=1",
    "train.valid_every=3", "train.valid_bleu_sentences=4", "train.valid_beam=1", "train.ckpt_every=3",
    "train.threads=1",
]


def tensorboard_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} as TensorBoard shows them (steps redone after a resume purged)."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    reader = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def metrics_scalars(metrics_file) -> dict[str, list[tuple[int, float]]]:
    """The same view computed from metrics.jsonl."""
    out: dict[str, list[tuple[int, float]]] = {}
    for record in read_metrics(metrics_file):
        if record["kind"] != "resume":
            for tag, value in scalars_of(record).items():
                out.setdefault(tag, []).append((record["step"], value))
    return out


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        assert [s for s, _ in got[tag]] == [s for s, _ in want[tag]], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in want[tag]], rel=1e-6), tag  # float32 in the file


def quiet_fit(config, run_dir, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny corpus lowers the vocabulary size (a warning)
        return fit(config, run_dir, progress=False, **kwargs)


def test_live_log_of_a_fit_and_its_resume_holds_the_scalars_of_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboardX")
    run_dir = tmp_path / "run"
    config = config_lib.apply_overrides(RunConfig(name="tb"), TINY + ["train.max_steps=4"])
    quiet_fit(config, run_dir, tensorboard=True)
    assert_same(tensorboard_scalars(run_dir / LIVE_DIR), metrics_scalars(run_dir / "metrics.jsonl"))
    resumed = config_lib.apply_overrides(RunConfig(name="tb"), TINY + ["train.max_steps=7"])
    quiet_fit(resumed, run_dir, tensorboard=True)  # resumes from step 3: step 4 is trained again
    want = metrics_scalars(run_dir / "metrics.jsonl")
    assert [s for s, _ in want["train/loss"]] == list(range(1, 8))
    assert_same(tensorboard_scalars(run_dir / LIVE_DIR), want)


def test_a_redone_step_shows_once_with_its_new_value(tmp_path):
    pytest.importorskip("tensorboardX")
    with MetricsWriter(tmp_path / "metrics.jsonl", mirror=TensorBoardLog(tmp_path / LIVE_DIR)) as metrics:
        for step in (1, 2, 3):
            metrics.write("train", step, loss=10.0 - step, epoch=0)
    with MetricsWriter(tmp_path / "metrics.jsonl", mirror=TensorBoardLog(tmp_path / LIVE_DIR, 2, ".from-step-2")) as m:
        m.write("resume", 1, checkpoint="ckpt_00000001.safetensors")
        m.write("train", 2, loss=99.0, epoch=1)
    got = tensorboard_scalars(tmp_path / LIVE_DIR)
    assert got["train/loss"] == [(1, 9.0), (2, 99.0)]
    assert_same(got, metrics_scalars(tmp_path / "metrics.jsonl"))


def test_export_writes_every_scalar_and_replaces_its_earlier_file(tmp_path):
    pytest.importorskip("tensorboardX")
    manifest = Manifest.create(tmp_path)  # a run: its earlier export is listed, so it may be replaced
    with MetricsWriter(manifest.claim("metrics.jsonl", append=True), manifest=manifest) as metrics:
        metrics.write("train", 1, loss=5.5, lr=1e-4, grad_norm=None, epoch=0)
        metrics.write("train", 2, loss=5.0, lr=2e-4, grad_norm=1.5, epoch=0)
        metrics.write("valid", 2, loss=4.0, bleu=12.25, best=True)
        metrics.write("train", 3, loss=99.0, lr=3e-4, epoch=0)  # redone after the resume below
        metrics.write("resume", 2, checkpoint="ckpt_00000002.safetensors")
        metrics.write("train", 3, loss=4.5, lr=3e-4, epoch=1)
    folder, count = export_run(tmp_path)
    folder_again, _ = export_run(tmp_path)
    assert folder == folder_again == tmp_path / "tensorboard-export"
    assert len(list(folder.iterdir())) == 1, "the second export replaced the first"
    got = tensorboard_scalars(folder)
    assert got["valid/bleu"] == [(2, 12.25)] and "valid/best" not in got  # booleans left out
    assert got["train/loss"] == [(1, 5.5), (2, 5.0), (3, 4.5)]  # the redone step, not the 99.0 before the resume
    assert count == sum(len(v) for v in got.values()) == 12
    assert_same(got, metrics_scalars(tmp_path / "metrics.jsonl"))


def test_export_needs_a_run(tmp_path):
    with pytest.raises(InputError, match="no metrics.jsonl"):
        export_run(tmp_path)


def test_a_file_where_the_event_folder_goes_is_one_line_and_kept(tmp_path):
    """A user's file named tensorboard-export (or tensorboard) in the run: a one-line error, the file kept
    (not a NotADirectoryError traceback from tensorboardX)."""
    pytest.importorskip("tensorboardX")
    manifest = Manifest.create(tmp_path)
    with MetricsWriter(manifest.claim("metrics.jsonl", append=True), manifest=manifest) as metrics:
        metrics.write("train", 1, loss=5.5, lr=1e-4, grad_norm=None, epoch=0)
    (tmp_path / "tensorboard-export").write_text("mine")
    with pytest.raises(InputError, match=r"tensorboard-export: a file, where the event files' folder goes"):
        export_run(tmp_path)
    with pytest.raises(InputError, match=r"tensorboard-export: a file, where the event files' folder goes"):
        TensorBoardLog(tmp_path / "tensorboard-export")
    assert (tmp_path / "tensorboard-export").read_text() == "mine"


def test_a_missing_extra_is_one_line_before_anything_is_written(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboardx(name, *args, **kwargs):
        if name == "tensorboardX":
            raise ImportError("No module named 'tensorboardX'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboardx)
    config = config_lib.apply_overrides(RunConfig(name="tb"), TINY + ["train.max_steps=1"])
    with pytest.raises(InputError, match=r'need tensorboardX: pip install -e "\.\[tb\]"'):
        quiet_fit(config, tmp_path / "run", tensorboard=True)
    assert not (tmp_path / "run").exists()


def test_a_kill_before_the_first_checkpoint_leaves_no_duplicated_step(tmp_path):
    """After a kill before the first checkpoint the rerun starts from step 0 again; step 1 must not show twice
    in the export (nor live): a rerun that finds earlier records writes a resume record at step 0."""
    import signal
    import subprocess
    import sys
    import time

    from cli_helpers import ENV, ROOT

    pytest.importorskip("tensorboardX")
    run_dir, log = tmp_path / "run", tmp_path / "log"
    sets = [arg for item in TINY + ["train.ckpt_every=1000", "train.valid_every=0"] for arg in ("--set", item)]
    command = [sys.executable, "-m", "train", "fit", "--config", str(ROOT / "configs" / "demo.toml"), "--run-dir",
               str(run_dir), "--no-progress", "--tensorboard", *sets]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*command, "--set", "train.max_steps=100000"], stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT, env=ENV)
        try:
            end = time.monotonic() + 120
            while b"step       2 |" not in log.read_bytes() and time.monotonic() < end and proc.poll() is None:
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    assert not list(run_dir.glob("ckpt_*")), "killed after the first checkpoint: not the case under test"
    done = subprocess.run([*command, "--set", "train.max_steps=3"], capture_output=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    want = metrics_scalars(run_dir / "metrics.jsonl")
    assert [s for s, _ in want["train/loss"]] == [1, 2, 3]
    folder, _ = export_run(run_dir)
    assert [s for s, _ in tensorboard_scalars(folder)["train/loss"]] == [1, 2, 3]
    assert_same(tensorboard_scalars(run_dir / LIVE_DIR), want)
