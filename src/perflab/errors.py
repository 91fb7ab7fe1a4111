"""Errors that the CLI turns into one line and exit code 2."""


class PerflabError(Exception):
    """A problem the user can fix: bad input, missing GPU, unknown puzzle. One line, no traceback."""

    exit_code = 2


class UnreadableInput(PerflabError):
    """A file that cannot be read as what it claims to be."""


class NeedsGPU(PerflabError):
    """The command needs a CUDA GPU and none is present."""
