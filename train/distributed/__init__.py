"""Data parallelism (§5.2: 8 GPUs): one process per device, the gradients of every update summed across them.

communicators.py is the interface (one process, MPI on host arrays, NCCL on GPU arrays) and
the launcher's failure handling; nccl.py is NCCL through CuPy; grad_sync.py all-reduces the
flat gradient bucket by bucket while backward still runs.
Imports: the foundation only.
"""
