"""Files written around the page cache (``io/direct.py``) and scratch files written
over (``io/file_pool.py``): the bytes a reader sees are the bytes written, whatever
the sizes, and a failed write leaves nothing under its name."""

import concurrent.futures
import os

import numpy as np
import pytest

from snm_core.io import direct, storage
from snm_core.io.file_pool import POOL_NAME, FilePool

SIZES = [0, 1, direct.BLOCK - 1, direct.BLOCK, direct.BLOCK + 1,
         direct.STAGING_BYTES - 1, direct.STAGING_BYTES, 3 * direct.STAGING_BYTES + 5]


def pieces(size, seed):
    """Random bytes of ``size`` cut into writes of random lengths, as a writer makes."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    cuts = np.sort(rng.integers(0, size + 1, 5))
    return data, [data[a:b] for a, b in zip([0, *cuts], [*cuts, size])]


@pytest.mark.parametrize("size", SIZES)
def test_a_direct_write_reads_back_exactly(tmp_path, size):
    data, writes = pieces(size, size)
    with storage.atomic_output(str(tmp_path / "f"), direct=True) as f:
        assert isinstance(f, direct.DirectWriter)  # ext4 under pytest's tmp_path
        for piece in writes:
            f.write(piece)
    assert (tmp_path / "f").read_bytes() == data
    assert os.listdir(tmp_path) == ["f"]


def test_a_direct_write_that_fails_leaves_no_file(tmp_path):
    with pytest.raises(RuntimeError):
        with storage.atomic_output(str(tmp_path / "f"), direct=True) as f:
            f.write(b"x" * (direct.STAGING_BYTES + 7))
            raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []


def test_a_file_system_without_direct_io_gets_buffered_files(tmp_path, monkeypatch):
    monkeypatch.setattr(direct, "set_direct", lambda fd: False)
    with storage.atomic_output(str(tmp_path / "f"), direct=True) as f:
        assert not isinstance(f, direct.DirectWriter)
        f.write(b"abc")
    assert (tmp_path / "f").read_bytes() == b"abc"


def write_table(pool, directory, files):
    """A table: a directory of files (name -> bytes) written through ``pool``."""
    for name, data in files.items():
        with pool.atomic_output(str(directory / name)) as f:
            f.write(data)


@pytest.mark.parametrize("sizes", [(5000, 100), (100, 5000), (0, 3), (3, 0)])
def test_a_pooled_file_written_over_holds_just_the_new_bytes(tmp_path, sizes):
    pool = FilePool(str(tmp_path))
    old, new = (pieces(size, i)[0] for i, size in enumerate(sizes))
    write_table(pool, tmp_path / "a", {"00000.arrow": old})
    pool.release(str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()
    assert len(os.listdir(tmp_path / POOL_NAME)) == 1
    write_table(pool, tmp_path / "b", {"00000.arrow": new})
    assert (tmp_path / "b" / "00000.arrow").read_bytes() == new
    assert os.listdir(tmp_path / POOL_NAME) == []  # the pooled file was taken


def test_the_largest_pooled_file_is_taken_first(tmp_path):
    pool = FilePool(str(tmp_path))
    write_table(pool, tmp_path / "a", {"small": b"s" * 10, "large": b"l" * 9000})
    pool.release(str(tmp_path / "a"))
    write_table(pool, tmp_path / "b", {"x": b"new"})
    left = [os.path.getsize(tmp_path / POOL_NAME / name)
            for name in os.listdir(tmp_path / POOL_NAME)]
    assert left == [10]


def test_threads_writing_at_once_never_share_a_pooled_file(tmp_path):
    pool = FilePool(str(tmp_path))
    write_table(pool, tmp_path / "a", {f"{i}": bytes([i]) * (1000 + i) for i in range(8)})
    pool.release(str(tmp_path / "a"))
    contents = {f"{i}": bytes([100 + i]) * (10 + 3 * i) for i in range(16)}
    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        list(threads.map(lambda name: write_table(pool, tmp_path / "b",
                                                  {name: contents[name]}), contents))
    assert {name: (tmp_path / "b" / name).read_bytes() for name in contents} == contents
    assert os.listdir(tmp_path / POOL_NAME) == []


def test_a_pooled_write_that_fails_leaves_no_file(tmp_path):
    pool = FilePool(str(tmp_path))
    write_table(pool, tmp_path / "a", {"f": b"old" * 100})
    pool.release(str(tmp_path / "a"))
    with pytest.raises(RuntimeError):
        with pool.atomic_output(str(tmp_path / "b" / "f")) as f:
            f.write(b"new")
            raise RuntimeError("stop")
    assert os.listdir(tmp_path / "b") == []


def test_releasing_a_table_never_written_is_nothing(tmp_path):
    FilePool(str(tmp_path)).release(str(tmp_path / "missing"))
    assert os.listdir(tmp_path) == []


def test_clearing_the_pool_deletes_what_was_not_written_over(tmp_path):
    pool = FilePool(str(tmp_path))
    write_table(pool, tmp_path / "a", {"x": b"1" * 50, "y": b"2" * 60})
    pool.release(str(tmp_path / "a"))
    write_table(pool, tmp_path / "b", {"z": b"3"})
    pool.clear()
    assert os.listdir(tmp_path / POOL_NAME) == []
    assert (tmp_path / "b" / "z").read_bytes() == b"3"
    FilePool(str(tmp_path / "never")).clear()
