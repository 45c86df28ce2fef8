"""The run config: TOML loading, --set overrides, key and type checking, shipped configs."""

from pathlib import Path

import pytest

from train import config as config_lib
from train.config import RunConfig
from train.errors import InputError
from transformer import TransformerConfig

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_papers():
    c = RunConfig()
    assert (c.model.N, c.model.d_model, c.model.d_ff, c.model.h) == (6, 512, 2048, 8)  # Table 3 base
    assert (c.model.p_drop, c.model.eps_ls) == (0.1, 0.1)  # §5.4
    assert (c.train.adam_beta1, c.train.adam_beta2, c.train.adam_eps) == (0.9, 0.98, 1e-9)  # §5.3
    assert c.train.warmup_steps == 4000
    assert (c.decode.beam, c.decode.alpha, c.decode.max_len_b) == (4, 0.6, 50)  # §6.1


def test_load_toml_and_overrides(tmp_path):
    path = write(tmp_path, 'name = "x"\n[model]\nd_model = 128\nh = 4\n[train]\nmax_tokens = 1000\n')
    c = config_lib.load(path, ["model.d_model=256", "train.backend=numba", "train.lr_factor=2",
                               'task.train_src="a b.txt"'])
    assert c.name == "x" and c.model.d_model == 256 and c.model.h == 4
    assert c.train.max_tokens == 1000 and c.train.backend == "numba"
    assert c.train.lr_factor == 2.0 and isinstance(c.train.lr_factor, float)  # int accepted for float
    assert c.task.train_src == "a b.txt"


def test_unknown_key_in_file_names_line_and_suggestion(tmp_path):
    path = write(tmp_path, "[model]\nd_model = 128\n\n[train]\nmax_tokns = 10\n")
    with pytest.raises(InputError) as err:
        config_lib.load(path)
    message = str(err.value)
    assert f"{path}:5" in message and "train.max_tokns" in message and "train.max_tokens" in message
    assert "\n" not in message


def test_unknown_section_and_override_keys():
    with pytest.raises(InputError, match="did you mean 'model.d_model'"):
        config_lib.apply_overrides(RunConfig(), ["modle.d_model=3"])
    with pytest.raises(InputError, match="did you mean 'model.d_model'"):
        config_lib.apply_overrides(RunConfig(), ["d_model=3"])  # bare field name
    with pytest.raises(InputError, match="unknown config key 'model'"):
        config_lib.apply_overrides(RunConfig(), ["model=3"])  # a section is not a value
    with pytest.raises(InputError, match="KEY=VALUE"):
        config_lib.apply_overrides(RunConfig(), ["model.d_model"])


@pytest.mark.parametrize("item, expected", [
    ("train.max_tokens=abc", "must be int"),
    ("train.max_tokens=1.5", "must be int"),
    ("model.tie_embeddings=1", "must be bool"),
    ("model.p_drop=true", "must be float"),
    ("name=3", "must be str"),
    ("model.norm=sideways", "model.norm must be one of"),
    ("train.max_tokens=0", "must be positive"),
    ("model.p_drop=1.5", r"model.p_drop must be in \[0, 1\)"),
    ("train.precision=fp8", "train.precision must be one of"),
])
def test_values_are_type_checked(item, expected):
    with pytest.raises(InputError, match=expected):
        config_lib.apply_overrides(RunConfig(), [item])


def test_type_error_in_file_names_line(tmp_path):
    path = write(tmp_path, "[train]\nwarmup_steps = \"many\"\n")
    with pytest.raises(InputError, match=f"{path}:2: train.warmup_steps must be int"):
        config_lib.load(path)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="not valid TOML"):
        config_lib.load(write(tmp_path, "[model\n"))
    with pytest.raises(InputError, match="config file not found"):
        config_lib.load(tmp_path / "nope.toml")


def test_round_trip_through_dict_and_diff():
    c = config_lib.apply_overrides(RunConfig(), ["model.d_model=256", "train.max_steps=7"])
    again = config_lib.from_dict(c.to_dict())
    assert again == c
    assert config_lib.diff(RunConfig().to_dict(), c.to_dict()) == [
        "model.d_k", "model.d_model", "model.d_v", "train.max_steps"]  # d_k = d_v = d_model/h follow d_model


def test_model_section_is_the_transformer_config_and_derives_head_size():
    c = config_lib.apply_overrides(RunConfig(), ["model.d_model=256", "model.h=4", "tokenizer.vocab_size=1000"])
    assert isinstance(c.model, TransformerConfig)
    assert (c.model.vocab_size, c.model.d_model, c.model.d_k, c.model.d_v) == (1000, 256, 64, 64)
    assert config_lib.apply_overrides(c, ["model.d_k=32"]).model.d_v == 64             # given: kept as given
    with pytest.raises(InputError, match="divisible"):
        config_lib.apply_overrides(RunConfig(), ["model.d_model=100", "model.h=3"])
    for key in ("model.vocab_size=5", "model.pad_id=4"):
        with pytest.raises(InputError, match="decided by the tokenizer"):
            config_lib.apply_overrides(RunConfig(), [key])


@pytest.mark.parametrize("name", ["demo", "multi30k", "multi30k_cpu", "wmt14_en_de_base", "wmt14_en_de_big", "wmt14_en_fr_big"])
def test_shipped_configs_load(name):
    c = config_lib.load(ROOT / "configs" / f"{name}.toml")
    assert c.name == name
    if name.startswith("wmt14"):
        assert c.train.warmup_steps == 4000 and c.decode.beam == 4 and c.decode.alpha == 0.6  # §5.3, §6.1
        assert c.train.tokens_per_update == 25_000  # §5.1: ~25000 tokens per side per update, on any number of GPUs
        big = "big" in name
        assert c.train.max_steps == (300_000 if big else 100_000)  # §5.2
        assert c.train.average_last == (20 if big else 5)  # §6.1
        assert c.model.d_model == (1024 if big else 512)
        assert c.model.p_drop == (0.1 if name == "wmt14_en_fr_big" else 0.3 if big else 0.1)  # §6.1


def test_keep_last_full_and_patience_are_checked_and_resumable():
    from train.config import RESUMABLE_KEYS

    with pytest.raises(InputError, match=r"train.keep_last_full \(6\) cannot exceed train.keep_last \(5\)"):
        config_lib.apply_overrides(RunConfig(), ["train.keep_last_full=6"])
    with pytest.raises(InputError, match="train.patience must be 0"):
        config_lib.apply_overrides(RunConfig(), ["train.patience=-1"])
    assert {"train.keep_last_full", "train.patience"} <= RESUMABLE_KEYS  # changing them does not change the math
