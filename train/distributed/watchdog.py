"""The collective watchdog: no rank waits for ever, and the job says which rank it waited for (§5.2: 8 GPUs).

Every rank issues the same collectives in the same order (train/run/step.py), so each one has a
number, the same on every rank. The communicator tells the watchdog when a collective starts and
when it finishes, host (MPI) and device (NCCL) alike. A thread checks once a second: when this
rank's oldest unfinished collective has waited `timeout_s` (`train.collective_timeout_s`), it asks
every other rank, over a communicator of its own, how far it got; each rank's watchdog thread
answers, whatever its main thread is doing. Then:

  - a rank that does not answer within PROBE_GRACE_S is stopped (SIGSTOP), dead or wedged;
  - a rank that answers but has not issued that collective is stuck elsewhere, unless it said it
    is busy with a long phase it runs alone (rank 0's validation, data preparation, a checkpoint:
    `busy(what)`), which restarts the wait;
  - when every rank has issued it and it still has not finished, the collective itself is stuck.

Except for the busy case, the rank prints `error: rank R of K: collective #n (what) has waited T s
for rank(s) ...; ending the job` and calls the abort it was given (MPI_Abort: the launcher ends
every process, a stopped one too). So a stalled rank ends the job in about timeout_s + PROBE_GRACE_S.

The questions and answers need MPI_THREAD_MULTIPLE (mpi4py asks for it; MPICH and Open MPI give it);
without it the watchdog still ends the job after timeout_s, without naming the rank.
"""
from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import time

PROBE, ANSWER = 1, 2
TICK_S = 0.2                   # how often the thread answers questions
PROBE_GRACE_S = 10.0           # how long a question waits for the answers


class Watchdog:
    """Times this rank's collectives over `comm` (an mpi4py communicator); `abort(code)` ends the job."""

    def __init__(self, comm, timeout_s: float, abort):
        from mpi4py import MPI

        self.control = comm.Dup()                   # its own messages never meet the training's
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()
        self.can_ask = MPI.Query_thread() == MPI.THREAD_MULTIPLE   # else this thread must not call MPI
        self.sent = []                              # questions and answers in flight (their buffers must live)
        self.timeout_s, self.abort = timeout_s, abort
        self.issued = 0                             # collectives this rank has started
        self.pending: dict[int, list] = {}          # number -> [started, what, done() or None]
        self.busy_with: tuple[str, float] | None = None
        self.before_abort = []                      # e.g. NCCL's communicator abort
        self.checks = []                            # e.g. NCCL's asynchronous error check, each second
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="collective-watchdog", daemon=True)
        self.thread.start()
        atexit.register(self.stop)                  # before mpi4py's MPI_Finalize (atexit runs last-in first-out)

    # ---------------------------------------------------------------- what the communicator calls
    def start(self, what: str, done=None) -> int:
        """A collective starts; `done()` (device collectives) says when it has finished. Returns its number."""
        with self.lock:
            number = self.issued
            self.issued += 1
            self.pending[number] = [time.monotonic(), what, done]
        return number

    def finish(self, number: int) -> None:
        with self.lock:
            self.pending.pop(number, None)

    @contextlib.contextmanager
    def busy(self, what: str):
        """This rank runs a long phase alone (the others wait for it): its peers wait without a limit."""
        self.busy_with = (what, time.monotonic())
        try:
            yield
        finally:
            self.busy_with = None

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)

    # ---------------------------------------------------------------- the thread
    def _run(self) -> None:
        next_check = time.monotonic() + 1.0
        while not self.stopped.wait(TICK_S):
            if self.can_ask:
                self._answer_questions()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 1.0
                self._check()

    def _state(self) -> dict:
        now = time.monotonic()
        with self.lock:
            oldest = min(self.pending, default=None)
            waiting = None if oldest is None else (oldest, self.pending[oldest][1], now - self.pending[oldest][0])
            busy = None if self.busy_with is None else (self.busy_with[0], now - self.busy_with[1])
            return {"issued": self.issued, "waiting": waiting, "busy": busy}

    def _answer_questions(self) -> None:
        self.sent = [request for request in self.sent if not request.Test()]
        while self.control.iprobe(tag=PROBE):
            status = _status()
            self.control.recv(tag=PROBE, status=status)
            self.sent.append(self.control.isend(self._state(), dest=status.Get_source(), tag=ANSWER))

    def _check(self) -> None:
        for check in self.checks:
            try:
                check()
            except Exception as err:  # noqa: BLE001 - any asynchronous communication error ends the job
                self._end(f"the communicator reported an error: {err}")
        now = time.monotonic()
        with self.lock:
            for number, (_, _, done) in list(self.pending.items()):
                if done is not None and done():
                    del self.pending[number]
            oldest = min(self.pending, default=None)
            if oldest is None or now - self.pending[oldest][0] < self.timeout_s:
                return
            started, what, _ = self.pending[oldest]
        verdict = self._ask_everyone(oldest)
        if verdict is None:                          # a peer is busy with a long phase: wait another timeout_s
            with self.lock:
                if oldest in self.pending:
                    self.pending[oldest][0] = time.monotonic()
            return
        self._end(f"collective #{oldest} ({what}) has waited {now - started:.0f} s "
                  f"(train.collective_timeout_s = {self.timeout_s:g}); {verdict}")

    def _ask_everyone(self, number: int) -> str | None:
        """Why collective `number` has not finished, in words; None when a rank is busy with a long phase."""
        if not self.can_ask:
            return "the other ranks cannot be asked why (this MPI does not provide MPI_THREAD_MULTIPLE)"
        peers = [r for r in range(self.world_size) if r != self.rank]
        for peer in peers:
            self.sent.append(self.control.isend(number, dest=peer, tag=PROBE))
        answers, deadline = {}, time.monotonic() + PROBE_GRACE_S
        while len(answers) < len(peers) and time.monotonic() < deadline:
            self._answer_questions()                 # a peer may be asking at the same time
            while self.control.iprobe(tag=ANSWER):
                status = _status()
                answer = self.control.recv(tag=ANSWER, status=status)
                answers[status.Get_source()] = answer
            time.sleep(0.05)
        silent = [peer for peer in peers if peer not in answers]
        behind = {peer: a for peer, a in answers.items() if a["issued"] <= number}
        if not silent and behind and all(a["busy"] for a in behind.values()):
            return None
        if not silent and not behind:
            return "every rank has reached it, so the collective itself is stuck (a network or driver problem)"
        parts = []
        if silent:
            parts.append(f"rank(s) {', '.join(map(str, silent))} did not answer within {PROBE_GRACE_S:.0f} s "
                         f"(stopped, dead or hung)")
        for peer, a in sorted(behind.items()):
            where = (f"waits in collective #{a['waiting'][0]} ({a['waiting'][1]})" if a["waiting"]
                     else f"is computing, {a['issued']} collectives issued")
            parts.append(f"rank {peer} has not reached it: it {where}")
        return "; ".join(parts)

    def _end(self, why: str) -> None:
        print(f"error: rank {self.rank} of {self.world_size}: {why}; ending the job", file=sys.stderr, flush=True)
        for step in self.before_abort:
            with contextlib.suppress(Exception):
                step()
        time.sleep(1.0)                              # the launcher forwards output asynchronously
        self.abort(1)


def _status():
    from mpi4py import MPI

    return MPI.Status()
