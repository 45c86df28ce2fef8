"""Data parallelism (§5.2: 8 GPUs): one process per device, the gradients of every update summed across them.

communicators.py is the interface (one process, MPI on host arrays, NCCL on GPU arrays) and
the launcher's failure handling; launch.py finds the launcher, whether MPI and NCCL load, and
each rank's GPU; nccl.py is NCCL through CuPy; watchdog.py ends a job whose collective waits
too long and names the rank it waited for; grad_sync.py all-reduces the flat gradient bucket by
bucket while backward still runs; global_batch.py splits one update over the ranks (§5.1);
agreement.py has every rank show the others what it starts from.
Imports: the foundation only.
"""
