"""`average` while `fit` prunes the checkpoints it reads: a one-line error, nothing written."""

import pytest

from train.__main__ import main
from train.run import checkpointing
from train.run.loop import fit

from tests.train.data.test_prepare import files_config, number_files, quiet  # noqa: F401 (a fixture)


@pytest.mark.parametrize("when", ["before the hashes", "while reading"])
def test_a_checkpoint_pruned_under_average_is_a_one_line_error(tmp_path, number_files, monkeypatch, capsys, when):
    paths, _ = number_files
    run_dir = tmp_path / "run"
    quiet(fit, files_config(paths, "train.max_steps=4", "train.ckpt_every=1"), run_dir, progress=False)
    oldest = checkpointing.run_checkpoints(run_dir)[-3]
    step = "_refuse_changed" if when == "before the hashes" else "average_checkpoints"
    original = getattr(checkpointing, step)

    def pruned_meanwhile(checkpoints, *args, **kwargs):
        oldest.unlink(missing_ok=True)  # as fit's keep_last pruning would, between listing and reading
        return original(checkpoints, *args, **kwargs)
    monkeypatch.setattr(checkpointing, step, pruned_meanwhile)
    capsys.readouterr()
    assert main(["average", str(run_dir), "--last", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {oldest}: deleted while it was being averaged"), err
    assert not (run_dir / "averaged_last3.safetensors").exists()
