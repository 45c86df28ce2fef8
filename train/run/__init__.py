"""Stage 2, training: one update (step.py, §5.3-§5.4) and the run around it (loop.py, §5, §6.1).

step.py is the algorithm of one update; loop.py the bookkeeping of a run: data order, validation,
checkpoints (checkpointing.py), the run directory and its lock (run_dir.py), fp16 loss scaling
(loss_scaler.py), signals and divergence (faults.py), metrics.jsonl (metrics.py), the ranks'
start (ranks.py: the update plan, the agreement), and what a run is looked at with afterwards
(plots.py, norm_plots.py, both writing through figures.py; tensorboard.py).
Imports: the foundation, train.parsing, train.data, train.evaluate (validation decodes) and
train.distributed.
"""
