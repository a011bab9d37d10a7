"""glibc's heap settings of a build (``memory.kept_heap``), seen through mallinfo2."""

import ctypes

import numpy as np
import pytest

from snm_core.io import memory

BLOCK = 64 << 20  # above any mmap threshold glibc would pick by itself


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mapped_bytes():
    """Bytes glibc holds in blocks mapped on their own (``hblkhd``)."""
    mallinfo2 = getattr(memory.LIBC, "mallinfo2", None) if memory.LIBC else None
    if mallinfo2 is None:
        pytest.skip("needs glibc 2.33 or later (mallinfo2)")
    mallinfo2.restype = _MallInfo2
    return mallinfo2().hblkhd


def _maps_a_large_block():
    before = _mapped_bytes()
    block = np.ones(BLOCK, np.uint8)
    mapped = _mapped_bytes() - before >= BLOCK
    del block
    return mapped


def test_a_build_takes_large_blocks_from_the_heap_and_then_maps_them_again(monkeypatch):
    for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    assert _maps_a_large_block()
    with memory.kept_heap("single"):
        assert not _maps_a_large_block()  # reused from the heap, not zeroed afresh
    assert _maps_a_large_block()


def test_the_environment_keeps_glibc_as_it_is(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")
    with memory.kept_heap("single"):
        assert _maps_a_large_block()
