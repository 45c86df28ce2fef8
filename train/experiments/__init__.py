"""Experiments on top of training: Table 3's ablations (§6.2), the benchmarks, the multi-GPU projection.

ablate.py runs a grid of variants (ablate_grid.py) and sets the results beside the paper
(ablate_report.py); bench.py times one training step (built by step_setup.py) beside a PyTorch
peer measured in the same run, host_time.py the host's share of it, decode_bench.py translation
beside CTranslate2; scale.py models a measured step on 1-8 devices or nodes of them (straggler from
batch_work.py's per-batch work, ring all-reduce, overlap), scale_validation.py sets it beside the
published multi-GPU runs, scale_report.py is the `scale` command; tune_decoding.py chooses beam
size and length penalty on a dev set (§6.1) and stores the choice with the run.
Imports: everything but the CLI.
"""
