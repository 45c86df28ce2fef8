"""One global batch whatever the world size (computed, no training), and the start-up agreement's verdicts."""
from pathlib import Path

import numpy as np
import pytest

from train import config as config_lib
from train.config import RunConfig
from train.distributed.agreement import check_agreement, disagreements
from train.distributed.communicators import SingleProcess
from train.distributed.global_batch import UpdateCounts, UpdatePlan, count_update, plan_update, resumed_plan
from train.errors import InputError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["wmt14_en_de_base", "wmt14_en_de_big", "wmt14_en_fr_big"])
def test_the_wmt_recipe_has_the_papers_update_on_1_to_8_gpus(name):
    """§5.1's ~25,000 tokens per update on 1 GPU and on 8, not 8 × 25,000."""
    train = config_lib.load(ROOT / "configs" / f"{name}.toml").train
    plans = {k: plan_update(train, k) for k in range(1, 9)}
    for k in (1, 2, 4, 5, 8):                                   # the shares divide 25,000 exactly
        assert plans[k].tokens_per_update == 25_000, (k, plans[k])
    for k, plan in plans.items():                               # otherwise within a token per micro-batch
        assert 25_000 - plan.batches < plan.tokens_per_update <= 25_000
        assert plan.batch_tokens <= train.max_tokens and plan.world_size == k
    assert (plans[1].accum, plans[1].batch_tokens) == (4, 6250)   # one GPU: 4 micro-batches of what it holds
    assert (plans[8].accum, plans[8].batch_tokens) == (1, 3125)   # eight: one each, half as large
    assert (plans[2].accum, plans[2].batch_tokens) == (2, 6250)


def test_the_default_update_is_one_batch_of_max_tokens_shared_by_the_ranks():
    train = RunConfig().train
    assert train.tokens_per_update == 0
    assert plan_update(train, 1) == UpdatePlan(1, 1, train.max_tokens)
    assert plan_update(train, 4) == UpdatePlan(4, 4, train.max_tokens // 4)
    with pytest.raises(InputError, match="train.tokens_per_update must be 0"):
        config_lib.apply_overrides(RunConfig(), ["train.tokens_per_update=-1"])


def test_a_resume_keeps_the_checkpoints_update_or_is_refused_naming_both_world_sizes():
    saved = UpdatePlan(2, 4, 256).record()
    assert saved == {"world_size": 2, "batches": 4, "batch_tokens": 256, "accum": 2, "tokens_per_rank": 512,
                     "tokens_per_update": 1024}
    for world in (1, 2, 3, 4):
        plan = resumed_plan(saved, world, "ckpt_00000003.safetensors")
        assert (plan.batches, plan.batch_tokens, plan.tokens_per_update) == (4, 256, 1024)
    assert resumed_plan(saved, 3, "x").accum == 2                # 2 + 2 + 0: one rank idle, the same update
    assert "2 empty micro-batch slots" in resumed_plan(saved, 3, "x").describe()
    with pytest.raises(InputError, match=r"ckpt_00000003.safetensors: written by 2 rank\(s\) with 4 micro-batches "
                                         r"of ≤ 256 tokens per update; 5 ranks cannot share them"):
        resumed_plan(saved, 5, "ckpt_00000003.safetensors")


def test_count_update_counts_every_ranks_tokens_and_places_this_share():
    """Rank 1 of 2 with a share of 3 slots, the last empty: its place and the sums come from the (faked) all-reduce."""
    def batch(n_src, n_tgt, length):  # ids 5, padded with 0 up to `length`
        row = lambda n: np.array([[5] * n + [0] * (length - n)])
        return row(n_src), row(n_tgt), row(n_tgt)

    class RankOneOfTwo(SingleProcess):
        rank, world_size = 1, 2

        def all_reduce_host(self, values, op="sum"):
            self.sent = values.copy()
            return values + np.array([10, 20, 30, 2, 0])         # rank 0: 10 target, 20 source, 30 padded, ends at 2

    comm = RankOneOfTwo()
    counts = count_update(comm, [batch(3, 2, 4), None, batch(1, 4, 4)], pad_id=0)
    assert list(comm.sent) == [6, 4, 16, 0, 6]                    # target, source, padded; its batches end at 3 + 2 + 1
    assert counts == UpdateCounts(first=3, used=6, target_tokens=16, source_tokens=24, padded_tokens=46)
    empty = count_update(RankOneOfTwo(), [None, None], pad_id=0)
    assert empty == UpdateCounts(first=2, used=2, target_tokens=10, source_tokens=20, padded_tokens=30)


def test_the_agreement_names_each_field_the_ranks_and_both_values():
    base = {"config": RunConfig().to_dict(), "step and data position": {"step": 6, "epoch": 0, "batch_pos": 12},
            "checkpoint": {"file": "ckpt_00000006.safetensors", "sha256": "ab" * 32}}
    other_config = {**base, "config": config_lib.apply_overrides(RunConfig(), ["train.seed=3"]).to_dict()}
    older = {**base, "step and data position": {"step": 3, "epoch": 0, "batch_pos": 6},
             "checkpoint": {"file": "ckpt_00000003.safetensors", "sha256": "cd" * 32}}
    assert disagreements([base, base, base]) == []
    lines = disagreements([base, other_config, older, older])
    assert lines[0] == "config of rank 1 differs from rank 0's (train.seed = 0 vs 3, rank 0 vs rank 1)"
    assert lines[1].startswith("step and data position of ranks 2, 3 differs from rank 0's (")
    assert '"step": 6' in lines[1] and '"step": 3' in lines[1]
    assert lines[2].startswith("checkpoint of ranks 2, 3 differs") and "ckpt_00000003.safetensors" in lines[2]
    check_agreement(SingleProcess(), base)                      # one process: nothing to compare


def test_agreement_raises_the_same_error_on_every_rank():
    class TwoRanks(SingleProcess):
        world_size = 2

        def all_gather_json(self, value):
            return [value, {**value, "RNG state": {"state": 2}}]

    with pytest.raises(InputError, match=r"the ranks disagree before the first update: RNG state of rank 1 differs"):
        check_agreement(TwoRanks(), {"RNG state": {"state": 1}})
