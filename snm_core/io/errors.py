"""snm's errors: bad input (:class:`SnmInputError`, exit 2) and a stage that could not
finish (:class:`SnmStageError`, exit 1)."""

import contextlib
import errno
import re

#: errno -> what ran out: a write that fails so is a fault (SnmStageError), not a bug.
RESOURCE_ERRNOS = {errno.ENOSPC: "no space left on the device",
                   errno.EFBIG: "the file size limit was reached (ulimit -f)",
                   errno.EDQUOT: "the disk quota was exceeded"}


class SnmInputError(ValueError):
    """Input that cannot be used (file, option, configuration); the message says what to change."""


class SnmStageError(RuntimeError):
    """A stage that could not finish through no fault of its input: its output does not
    add up (a runner lost or repeated work) or a resource ran out.  The CLI prints the
    one-line message and exits 1; the stage wrote no manifest."""


#: What a stage that ran out of memory reports (an :class:`SnmStageError`'s message).
OUT_OF_MEMORY = ("out of memory: an allocation failed (a memory limit or RLIMIT_AS); DESIGN.md "
                 "7.3 says what bounds each stage's memory")


#: numpy's ``tofile`` reports a short write without its errno.
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")


def resource_error_message(error, path=None):
    """``"writing PATH: what ran out"`` for an OSError that means a full disk, a file
    size limit or a quota (or a short write, which is one of them); None for any other
    error."""
    if not isinstance(error, OSError):
        return None
    if error.errno in RESOURCE_ERRNOS:
        what = RESOURCE_ERRNOS[error.errno]
    elif error.errno is None and _SHORT_WRITE.match(str(error)):
        what = "a write stopped short (the disk is full or a file size limit was reached)"
    else:
        return None
    where = path or error.filename
    return (f"writing {where}: " if where else "") + what


@contextlib.contextmanager
def resource_errors(path):
    """Turn a full disk (or file size limit, or quota) while writing ``path`` into an
    :class:`SnmStageError` naming the path: a fault, not a bug."""
    try:
        yield
    except OSError as e:
        message = resource_error_message(e, path)
        if message is None:
            raise
        raise SnmStageError(message) from None
