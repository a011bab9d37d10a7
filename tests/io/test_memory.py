"""glibc's heap settings of a build (``memory.kept_heap``), seen through mallinfo2, and
numpy's huge pages (``memory.small_pages``), seen through /proc/self/smaps.

Each check runs in a fresh interpreter: in a process with a history, glibc may serve a
large block from free heap memory left by earlier work, mapped or not."""

import os
import subprocess
import sys

import pytest

from snm_core.io import memory

CHECK = """
import ctypes
import numpy as np
from snm_core.io import memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

memory.LIBC.mallinfo2.restype = MallInfo2

def maps_a_large_block():  # 64 MiB: above any mmap threshold glibc picks by itself
    before = memory.LIBC.mallinfo2().hblkhd
    block = np.ones(64 << 20, np.uint8)
    mapped = memory.LIBC.mallinfo2().hblkhd - before >= 64 << 20
    del block
    return mapped

outside = maps_a_large_block()
with memory.kept_heap("single"):
    inside = maps_a_large_block()
print(outside, inside, maps_a_large_block())
"""


def _mapped(environment):
    if memory.LIBC is None or not hasattr(memory.LIBC, "mallinfo2"):
        pytest.skip("needs glibc 2.33 or later (mallinfo2)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")}
    result = subprocess.run([sys.executable, "-c", CHECK], env={**env, **environment},
                            capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_a_build_takes_large_blocks_from_the_heap_and_then_maps_them_again():
    # before, inside (reused from the heap, not zeroed afresh), after
    assert _mapped({}) == ["True", "False", "True"]


def test_the_environment_keeps_glibc_as_it_is():
    assert _mapped({"MALLOC_MMAP_MAX_": "65536"}) == ["True", "True", "True"]


PAGES = """
import numpy as np
from snm_core.io import memory

def advised_huge(array):  # the VmFlags of the mapping that holds the array's middle: hg
    address = array.__array_interface__["data"][0] + array.nbytes // 2
    holds = False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                lo, hi = (int(x, 16) for x in first.split("-"))
                holds = lo <= address < hi
            elif holds and line.startswith("VmFlags:"):
                return "hg" in line.split()
    return None

before = advised_huge(np.ones(64 << 20, np.uint8))
with memory.small_pages():
    inside = advised_huge(np.ones(64 << 20, np.uint8))
print(before, inside, advised_huge(np.ones(64 << 20, np.uint8)))
"""


def _advised(environment):
    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("needs Linux's /proc/self/smaps")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    result = subprocess.run([sys.executable, "-c", PAGES], env={**env, **environment},
                            capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_a_hashed_build_asks_for_small_pages_and_then_numpy_asks_for_huge_ones_again():
    advised = _advised({})
    if advised[0] != "True":
        pytest.skip("numpy asks for no huge pages here")
    assert advised == ["True", "False", "True"]


def test_the_environment_keeps_numpy_as_it_is():
    assert _advised({"NUMPY_MADVISE_HUGEPAGE": "1"}) == ["True", "True", "True"]
