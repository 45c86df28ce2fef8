"""A run whose config names its corpus by relative paths resumes from any working directory."""

import json

from tests.cli_helpers import run_cli
from tests.train.data.test_prepare import ROOT, TINY, number_files, write  # noqa: F401 (a fixture)


def test_fit_resume_works_from_another_working_directory(tmp_path, number_files):
    paths, _ = number_files
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    sets = ["task.kind=files", *TINY, "train.max_steps=1"]
    for split, side, path in ((s, i, p) for s in ("train", "valid") for i, p in enumerate(paths[s])):
        name = f"{split}.{'en' if side == 0 else 'de'}"
        (project / "data" / name).write_bytes(path.read_bytes())
        sets.append(f"task.{split}_{'src' if side == 0 else 'tgt'}=data/{name}")  # relative to the project
    args = [arg for item in sets for arg in ("--set", item)]
    first = run_cli("fit", "--config", str(ROOT / "configs" / "demo.toml"), "--run-dir", "runs/r", "--no-progress",
                    *args, cwd=project)
    assert first.returncode == 0, first.stderr.decode()
    run_dir = project / "runs" / "r"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["task"]["train_src"] == str(project / "data" / "train.en")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = run_cli("fit", "--resume", str(run_dir), "--set", "train.max_steps=2", "--no-progress", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert "done: step 2" in resumed.stdout.decode()
