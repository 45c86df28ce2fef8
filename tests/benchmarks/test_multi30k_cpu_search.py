"""benchmarks/multi30k_cpu_search.py: the time-budgeted search around configs/multi30k_cpu.toml."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from train import config as config_lib
from train.data.files import shared_data_dir
from train.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import multi30k_cpu_search as search  # noqa: E402

CONFIG = ROOT / "configs" / "multi30k_cpu.toml"


def _flat(config) -> dict:
    return {f"{section}.{key}": value for section, values in config.to_dict().items() if isinstance(values, dict)
            for key, value in values.items()}


def test_every_trial_changes_only_what_it_names():
    base = config_lib.load(CONFIG)
    variants = search.trials(base, None)
    assert [v.id for v in variants] == [name for name, _ in search.SEARCH] and variants[0].change == "the config"
    for variant, (_, changes) in zip(variants, search.SEARCH):
        before, after = _flat(base), _flat(variant.config)
        changed = {k for k in before if before[k] != after[k]}
        follows = {"model.vocab_size", "model.d_k", "model.d_v"}          # the tokenizer's, and d_model/h (§3.2.2)
        assert changed - follows == {c.split("=")[0] for c in changes}, variant.id   # none a no-op, nothing else


def test_budget_keeps_the_configs_checkpoint_spacing():
    base = config_lib.load(CONFIG)
    assert (base.train.max_steps, base.train.ckpt_every) == (9000, 300)
    trained = search.budget_config(base, 4500).train               # half the updates: half the spacing
    assert (trained.max_steps, trained.ckpt_every, trained.valid_every) == (4500, 150, 4500)
    assert trained.keep_last == max(search.AVERAGES) >= trained.average_last == base.train.average_last
    assert search.budget_config(base, 2).train.ckpt_every == 1


def test_unknown_trial_is_one_line():
    with pytest.raises(InputError, match="unknown trial 'd512'"):
        search.trials(config_lib.load(CONFIG), ["base", "d512"])
    done = subprocess.run([sys.executable, "benchmarks/multi30k_cpu_search.py", "--only", "d512", "--out", "/nonexistent"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: --only: unknown trial") and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(shared_data_dir() is None or not (shared_data_dir() / "multi30k").is_dir(),
                    reason="../shared/data/multi30k is not here")
def test_tiny_search_trains_to_its_budget_and_scores(tmp_path):
    args = [sys.executable, "benchmarks/multi30k_cpu_search.py", "--minutes", "0.1", "--eval-sentences", "5",
            "--only", "base", "--set", "tokenizer.vocab_size=300", "--set", "model.d_model=32", "--set", "model.d_ff=64",
            "--out", str(tmp_path / "s"), "--json"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])["base"]
    assert record["steps"] >= search.PROBE_STEPS and record["train_minutes"] > 0
    assert set(record["val_bleu"]) == {"1", "3", "5"} and record["best_average"] in (1, 3, 5)
    assert f"--set train.max_steps={record['steps']}" in record["command"]
    assert (tmp_path / "s" / "search.md").read_text().startswith("| trial")
    again = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)   # finished: skipped
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["base"] == record
