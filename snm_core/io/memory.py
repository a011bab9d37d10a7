"""Memory: the one budget every stage plans within, and the allocators' behaviour.

* :class:`MemoryBudget` (``--memory``, lmplz's ``-S``): each stage checks its fixed
  parts against it before any work and sizes what scales with the data from the rest.
* Giving freed memory back to the system (glibc; elsewhere the allocator keeps what it
  keeps), and the allocator settings of a stage's process (:func:`configure_process`).
"""

import contextlib
import ctypes
import os

import pyarrow as pa

from snm_core.io.errors import SnmInputError


def _load_libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


#: The C library when it is glibc (``malloc_trim``, ``mallopt``), else None.
LIBC = _load_libc()


def release_memory():
    """Give the memory that freed arrays leave behind back to the system.

    The allocators keep freed memory for reuse (glibc in one arena per
    thread): what a step leaves behind would otherwise count in the process's
    resident memory through the next one.  Memory given back is faulted in
    again, a page at a time, by the next allocation: call it between steps,
    not in inner loops.
    """
    pa.default_memory_pool().release_unused()
    if LIBC is not None:
        LIBC.malloc_trim(0)


#: glibc's mallopt parameters (malloc.h), and its default of M_MMAP_MAX.
M_TRIM_THRESHOLD, M_MMAP_MAX, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -4, -3, -8
DEFAULT_MMAP_MAX = 65536
#: glibc's heaps (arenas) a process at most: with its default, 8 a core, the ~55 threads
#: of a Beam process spread their arrays over 25-32 heaps, each keeping what was freed
#: in it, so a count's resident memory grew with its length, not with what it held.
ARENAS = 2
#: glibc's (mmap, trim) thresholds by the kind of process (:func:`configure_process`): a
#: Beam worker keeps blocks up to 32 MiB in its heaps for reuse (a count's per-batch
#: arrays of 1-5 MB would otherwise be faulted in afresh a page at a time) and gives the top
#: of a heap back above 64 MiB; a single-worker stage whose large arrays live long (the fit,
#: building compact/) gives back each block above 256 KiB when it is freed (glibc's own
#: mmap threshold rises to the largest block freed, so reading and compiling small M left
#: its temporaries in the heap, scattered, long after they were freed).
THRESHOLDS = {"worker": (32 << 20, 64 << 20), "single": (256 << 10, 1 << 20)}


def configure_process(kind, override_environment=False):
    """The allocators of a stage's process (``kind``: ``"worker"`` or ``"single"``).

    * Arrow allocates with malloc (the system pool), as numpy does, so that one
      :func:`release_memory` gives back what both freed: Arrow's default pool
      (mimalloc) keeps freed pages it does not all give back.  Importing
      :mod:`snm_core` before pyarrow does it for all of Arrow (``snm_core/__init__.py``
      sets ``ARROW_DEFAULT_MEMORY_POOL``); a process that imported pyarrow first (Beam's
      worker start-up) gets it here.
    * glibc's thresholds (:data:`THRESHOLDS`); ``MALLOC_MMAP_THRESHOLD_`` and
      ``MALLOC_TRIM_THRESHOLD_`` in the environment win unless ``override_environment``.
    """
    pa.set_memory_pool(pa.system_memory_pool())
    set_thresholds(*THRESHOLDS[kind], override_environment=override_environment)
    limit_arenas(override_environment)


def limit_arenas(override_environment=False):
    """At most :data:`ARENAS` glibc heaps in this process from now on (threads that have
    one keep it); ``MALLOC_ARENA_MAX`` in the environment wins unless
    ``override_environment``."""
    if _may_set(("MALLOC_ARENA_MAX",), override_environment):
        LIBC.mallopt(M_ARENA_MAX, ARENAS)


def set_thresholds(mmap_threshold, trim_threshold, override_environment=False):
    """Fix glibc's thresholds (process-wide): blocks above ``mmap_threshold`` are
    mapped from the system and unmapped when freed; the top of a heap above
    ``trim_threshold`` is given back.  ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` in the environment win, unless
    ``override_environment``."""
    if _may_set(("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"), override_environment):
        LIBC.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        LIBC.mallopt(M_TRIM_THRESHOLD, trim_threshold)


@contextlib.contextmanager
def kept_heap(kind):
    """Within the block, every block from glibc's heaps and freed blocks kept there for
    reuse; then the thresholds of ``kind`` (:func:`configure_process`) again, and what
    was kept given back.

    For a build that makes and frees arrays of tens of MB a partition: each one mapped
    afresh is zeroed a page at a time by the kernel on first touch (a fifth of the
    hashed compile's time), where a kept block is reused as it is.  The heap then holds
    about the largest partition's arrays, which the budget plans for anyway.
    ``MALLOC_MMAP_MAX_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment leave glibc
    as it is."""
    variables = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")
    if not _may_set(variables, False):
        yield
        return
    LIBC.mallopt(M_MMAP_MAX, 0)
    LIBC.mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)
    try:
        yield
    finally:
        LIBC.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        set_thresholds(*THRESHOLDS[kind])
        release_memory()


@contextlib.contextmanager
def small_pages():
    """numpy's arrays made within the block ask for no transparent huge pages.

    numpy asks for them (``madvise``) for every array of 4 MiB or more.  A huge page
    is zeroed whole by the kernel on first touch, and on a virtual machine that
    costs far more than the small pages the touched bytes need; the TLB reach it
    buys pays only where large arrays are probed at random long enough.
    ``NUMPY_MADVISE_HUGEPAGE`` in the environment leaves numpy as it is."""
    import numpy as np

    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    # numpy 2 keeps it in np._core; numpy 1.26 in np.core, beside an np._core stub
    # that has no multiarray.
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or np.core.multiarray
    previous = multiarray._set_madvise_hugepage(False)
    try:
        yield
    finally:
        multiarray._set_madvise_hugepage(previous)


def _may_set(variables, override_environment):
    """Whether a glibc setting is ours to make: glibc is there, and none of its
    environment ``variables`` is set (or ``override_environment``)."""
    return LIBC is not None and hasattr(LIBC, "mallopt") and (
        override_environment or not any(name in os.environ for name in variables))


# --- one budget ---------------------------------------------------------------------------

#: The default budget: this share of the machine's physical memory (lmplz's -S default is
#: 80%; a stage here may run beside the page cache its outputs go through, and beside the
#: Beam workers of another process).
DEFAULT_SHARE = 0.5
#: What a stage's process holds before any work: the interpreter, numpy, pyarrow and, in
#: a Beam stage, Beam (an ``snm count`` of two lines peaked at 196 MB).
PROCESS_BYTES = 200 << 20
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def physical_memory():
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_bytes(n):
    """``1536 << 20`` -> ``"1.5 GiB"``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _size_parts(text):
    """``(value, unit)`` of a size such as ``200M``, ``1.5GB``, ``4096`` or ``50%`` (the
    unit one of :data:`_UNITS`' keys or ``%``), or None."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([%KMGTB]?)B?\s*", str(text).upper())
    return (float(match.group(1)), match.group(2)) if match else None


def parse_size(text, option):
    """The bytes of a size such as ``200M``, ``2G``, ``1.5GB`` or ``4096`` (suffixes K, M,
    G, T in powers of 1024; B optional); one line naming ``option`` otherwise."""
    parts = _size_parts(text)
    if parts is None or parts[1] == "%":
        raise SnmInputError(f"{option} {text}: expected a size such as 200M or 2G")
    return int(parts[0] * _UNITS[parts[1]])


def round_up(n):
    """A size to give as ``--memory`` that is at least ``n``: ``"1.3G"``, ``"700M"``."""
    if n >= 1 << 30:
        return f"{-(-n * 10 // (1 << 30)) / 10:g}G"
    return f"{-(-n // (1 << 20))}M"


class MemoryBudget:
    """One memory budget for a stage's process (lmplz's ``-S``), shared by its consumers.

    ``--memory`` takes a size (``8G``, ``512M``; suffixes K, M, G, T in powers of 1024)
    or a share of the machine's physical memory (``50%``); the default is
    :data:`DEFAULT_SHARE` of it.  A stage checks before any work that its fixed parts fit
    (:meth:`require`), and sizes what scales with the data from what is left.

    >>> budget = MemoryBudget.parse("1G")
    >>> budget.bytes == 1 << 30, budget.left({"a": 256 << 20}) == 768 << 20
    (True, True)
    """

    def __init__(self, total, given=None):
        self.bytes = int(total)
        self.given = given  # the --memory text, or None for the default

    @classmethod
    def of(cls, value=None):
        """The budget an option holds: a :class:`MemoryBudget` as it is, a ``--memory`` text
        parsed (:meth:`parse`), None the default.  The command line parses ``--memory`` once
        (``CommandParser``); a stage's options take either, for callers from Python."""
        return value if isinstance(value, cls) else cls.parse(value)

    @classmethod
    def parse(cls, text=None):
        """The budget of ``--memory TEXT`` (None: the default)."""
        if text is None:
            return cls(physical_memory() * DEFAULT_SHARE)
        parts = _size_parts(text)
        if parts is None:
            raise SnmInputError(f"--memory {text}: expected a size such as 8G, 512M or 50%")
        value, unit = parts
        total = value / 100 * physical_memory() if unit == "%" else value * _UNITS[unit]
        if total < 1 << 20:
            raise SnmInputError(f"--memory {text}: less than a megabyte")
        return cls(total, text)

    def __str__(self):
        return (f"--memory {self.given} ({format_bytes(self.bytes)})" if self.given
                else f"{format_bytes(self.bytes)} (the default: {DEFAULT_SHARE:.0%} of this "
                     "machine's memory; --memory sets it)")

    def left(self, parts):
        """What is left of the budget for the parts that scale with the data, once the
        fixed ``parts`` (``{what: bytes}``) are held."""
        return self.bytes - sum(parts.values())

    def working(self):
        """What a stage's data may use: the budget less the process's own
        (:data:`PROCESS_BYTES`: the interpreter, numpy, pyarrow)."""
        return self.left({"the process": PROCESS_BYTES})

    def require(self, stage, parts):
        """Raise :class:`SnmInputError` unless the fixed ``parts`` fit: one line saying what
        they are and what to give."""
        need = sum(parts.values())
        if need > self.bytes:
            what = ", ".join(f"{name} {format_bytes(n)}" for name, n in parts.items())
            raise SnmInputError(f"{stage}: the memory budget {self} is less than the "
                                f"{format_bytes(need)} it needs at least ({what}); give "
                                f"--memory {round_up(need)} or more")
