"""Running code with or without the numba twins of ``snm_core.text.compiled``."""

import contextlib
import sys
from unittest import mock


@contextlib.contextmanager
def speedups(compiled):
    """Run with the numba speed-ups of ``snm_core.text.compiled`` (True) or hidden (False).

    ``hashing`` and ``Vocabulary.ids`` use them when the module is in
    ``sys.modules``; a None entry there reads as absent.
    """
    import snm_core.text.compiled  # noqa: F401  (load it, so that True means loaded)
    with mock.patch.dict(sys.modules, {} if compiled else {"snm_core.text.compiled": None}):
        yield
