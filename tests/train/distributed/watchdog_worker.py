"""`mpiexec -n 2 python tests/train/distributed/watchdog_worker.py busy|computing`: rank 0 is slow, rank 1 waits.

Rank 0 takes 4 s before a barrier, with a 1 s collective timeout; `busy` announces it
(comm.busy, as rank 0's validation does), `computing` does not. Rank 1 waits in the barrier.
"""
import sys
import time

from train.distributed.communicators import Mpi

mode = sys.argv[1]
comm = Mpi(timeout_s=1.0)
if comm.rank == 0:
    if mode == "busy":
        with comm.busy("validation"):
            time.sleep(4.0)
    else:
        time.sleep(4.0)
comm.barrier()
print(f"rank {comm.rank} passed the barrier", flush=True)
