"""Progress of long data work (hashing, the tokenizer, encoding): a bar on a terminal, a line every 30 s in a log.

A WMT-size `prepare` spends minutes in each phase. On a terminal tqdm redraws one bar; in a
log file (a batch job's stdout/stderr) the redraws would pile up as carriage returns on one
line, so there the bar is written as a plain line every LOG_EVERY_S seconds and once at the
end of a phase that took longer than that (a short one says nothing).
"""

import sys

from tqdm import tqdm

LOG_EVERY_S = 30.0


class _Lines:
    """The file tqdm writes to in a log: each redraw ('\\r' + the bar) becomes a line of its own."""

    def __init__(self, file):
        self.file, self.last = file, ""

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text and text != self.last:  # tqdm redraws the final state once more when it closes
            self.file.write(text + "\n")
            self.file.flush()
            self.last = text

    def flush(self) -> None:
        self.file.flush()


class _LogBar(tqdm):
    """tqdm in a log: nothing in the first `delay` seconds of a phase, not even when a phase starts (reset)."""

    def refresh(self, *args, **kwargs):
        if self._time() >= getattr(self, "start_t", 0.0) + self.delay:
            return super().refresh(*args, **kwargs)
        return False


def progress_bar(enabled: bool, file=None, **kwargs) -> tqdm:
    """A tqdm bar on `file` (default stderr): drawn on a terminal, logged as lines otherwise, off if not `enabled`."""
    file = sys.stderr if file is None else file
    if not enabled:
        return tqdm(disable=True, **kwargs)
    if file.isatty():
        return tqdm(file=file, dynamic_ncols=True, **kwargs)
    return _LogBar(file=_Lines(file), delay=LOG_EVERY_S, mininterval=LOG_EVERY_S, ncols=100, ascii=True, **kwargs)
