"""`mpiexec -n 2 python tests/train/distributed/fit_with_fault.py kill|raise STEP STAMP fit ARGS...`: `python -m train fit`
with a fault on rank 1 at its STEP-th update: SIGKILL (the process vanishes) or an exception. The time of the
fault goes to STAMP, so the test can check how long the job takes to end after it."""
import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

import train.run.loop
from train.__main__ import main

mode, at_update, stamp = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
rank = MPI.COMM_WORLD.Get_rank()
train_step = train.run.loop.train_step
updates = 0


def faulty_train_step(*args, **kwargs):
    global updates
    updates += 1
    if rank == 1 and updates == at_update:
        stamp.write_text(repr(time.time()))
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("injected fault")
    return train_step(*args, **kwargs)


train.run.loop.train_step = faulty_train_step
sys.exit(main(sys.argv[4:]))
