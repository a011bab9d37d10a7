"""snm's errors: bad input (:class:`SnmInputError`, exit 2) and a stage that could not
finish (:class:`SnmStageError`, exit 1)."""

import errno

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
