"""User-facing errors of the training pipeline.

`InputError` is for problems with what the user gave us (a missing file, a
non-UTF-8 line, a batch size too small for a sentence). The CLI prints
`error: <message>` and exits with status 2, without a traceback, so every
message must be one line that says what is wrong and where, e.g.
`data/train.de:17: not valid UTF-8`.
"""


class InputError(Exception):
    """A problem with the user's input, reported as one line (`path:line: what`)."""
