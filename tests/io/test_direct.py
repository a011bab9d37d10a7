"""Files written around the page cache (``io/direct.py``): the bytes a reader sees
are the bytes written, whatever the sizes, and a failed write leaves nothing under
its name."""

import os

import numpy as np
import pytest

from snm_core.io import direct, storage

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
