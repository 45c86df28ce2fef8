"""Experiments on top of training: Table 3's ablations (§6.2), the benchmarks, the multi-GPU projection.

ablate.py runs a grid of variants (ablate_grid.py) and sets the results beside the paper
(ablate_report.py); bench.py times one training step (built by step_setup.py) beside a PyTorch
peer measured in the same run, host_time.py the host's share of it, decode_bench.py translation
beside CTranslate2; scale.py models a measured step on 1-8 devices (straggler from batch_work.py's
per-batch work, ring all-reduce, measured overlap), scale_validation.py checks it against a
published 8-GPU run, scale_report.py is the `scale` command.
Imports: everything but the CLI.
"""
