"""Giving freed memory back to the system (glibc; elsewhere the allocator keeps what it keeps)."""

import ctypes

import pyarrow as pa


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


#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: The fit's thresholds (:func:`limit_heap_retention`).
FIT_MMAP_THRESHOLD = 256 << 10
FIT_TRIM_THRESHOLD = 1 << 20


def set_thresholds(mmap_threshold, trim_threshold, override_environment=False):
    """Fix glibc's thresholds (process-wide): blocks above ``mmap_threshold`` are
    mapped from the system and unmapped when freed; the top of a heap above
    ``trim_threshold`` is given back.  ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` in the environment win, unless
    ``override_environment``."""
    import os

    if LIBC is not None and hasattr(LIBC, "mallopt") and (override_environment or not any(
            name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"))):
        LIBC.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
        LIBC.mallopt(M_TRIM_THRESHOLD, trim_threshold)


def limit_heap_retention():
    """Thresholds for a single-worker stage whose large arrays live long (the fit).

    glibc's own mmap threshold rises to the largest block freed (up to 32 MiB),
    so the temporaries of reading and compiling small M stay in the heap,
    scattered, long after they are freed: 12 MiB more peak on the kernel
    5-gram fit.  A 256 KiB threshold gives each large block back when it is
    freed; the fit allocates few of them once it trains.
    """
    set_thresholds(FIT_MMAP_THRESHOLD, FIT_TRIM_THRESHOLD)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text):
    """Bytes of a size such as ``512M``, ``4G``, ``1.5G`` or ``1000000`` (K, M, G, T are
    powers of 1024; a trailing ``B`` or ``iB`` is allowed)."""
    import argparse
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(I?B)?\s*", str(text).upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 4G)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])
