"""The training pipeline, laid out by stage: data → one update → a run → evaluation.

    train/
      errors.py config.py threads.py   the foundation: user-facing errors, the run config, CPU threads
      parsing/        trees and EVALB for §6.3 parsing; the treebank task's files
      data/           text files → tokenizer → token ids (prepared once, by content) → batches
      evaluate/       translation (§6.1 decoding), its scores (sacreBLEU, chrF, paper BLEU), export to CTranslate2
      distributed/    data parallelism (§5.2): communicators, NCCL, gradients summed while backward runs
      run/            one update (step.py, §5.3-§5.4) and a run around it (loop.py): checkpoints,
                      the run directory, loss scaling, faults, metrics, plots, TensorBoard
      experiments/    Table 3's ablations (§6.2), the step and decoding benchmarks, the multi-GPU projection
      __main__.py commands.py doctor.py   the CLI: `python -m train --help`

The rule: a package imports the foundation and the packages listed above it, never one
below it; the CLI imports anything and nothing imports the CLI
(tests/train/test_layout.py checks every import).
"""
