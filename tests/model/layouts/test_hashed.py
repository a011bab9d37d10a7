"""The hashed layout of ``compact/`` (``snm_core.model.layouts.hashed`` and its builder
and numba lookups): every key found and nothing else, the compiled twins of the numpy
definitions, arrays independent of the external sort's partitions."""

import shutil

import numpy as np
import pytest
from support.compiled import speedups

from snm_core.model.compact import compile_model
from snm_core.model.layouts import hashed, hashed_kernels
from snm_core.model.layouts.hashed import EntryTable, EntryTableWriter, KeyIndex, table_bits
from snm_core.text.hashing import link_key


def test_key_index_finds_every_key_and_nothing_else():
    rng = np.random.default_rng(4)
    for n in (0, 1, 7, 1000, 50000):
        keys = np.unique(rng.integers(0, 2 ** 64, size=n, dtype=np.uint64))
        index = KeyIndex(keys)
        assert np.array_equal(index.find(keys), np.arange(len(keys)))
        others = rng.integers(0, 2 ** 64, size=1000, dtype=np.uint64)
        others = others[~np.isin(others, keys)]
        assert np.all(index.find(others) == -1)


@pytest.mark.parametrize("chunks", [1, 7])
def test_entry_table_finds_every_key_and_its_value_also_where_stored_bits_coincide(chunks):
    """compact/'s tables store 32 bits of a key below its slot's; keys that agree in all
    of those (built here by flipping bits below them) are settled by whole keys."""
    rng = np.random.default_rng(6)
    for n in (0, 1, 7, 1000, 50000):
        keys = rng.integers(0, 2 ** 64, size=n, dtype=np.uint64)
        below = 64 - table_bits(2 * n) - 32  # how many key bits lie below the stored ones
        twins = keys[: n // 10] ^ (np.uint64(1) << rng.integers(0, below, n // 10).astype(
            np.uint64))
        keys = np.unique(np.concatenate([keys, twins]))
        values = rng.random(len(keys)).astype(np.float32)
        truth = dict(zip(keys.tolist(), values.tolist()))
        writer = EntryTableWriter(len(keys))
        for part in np.array_split(np.arange(len(keys)), chunks):
            writer.add(keys[part], values[part])
        table = EntryTable(*writer.finish())
        rows = table.find(keys)
        assert [truth[k] for k in keys.tolist()] == table.values[rows].tolist()
        others = rng.integers(0, 2 ** 64, size=1000, dtype=np.uint64)
        assert np.all(table.find(others[~np.isin(others, keys)]) == -1)


def test_compiled_lookups_use_the_slot_blocks_the_compact_arrays_are_written_with():
    assert hashed_kernels._BLOCK_BITS == hashed.SLOT_BLOCK_BITS


def test_compiled_link_key_equals_the_numpy_one():
    """Scoring's compiled loop names links exactly as counting and the compact arrays do."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2 ** 64, size=200, dtype=np.uint64)
    words = rng.integers(0, 2 ** 31, size=200).astype(np.int32)
    with speedups(False):  # hashing's numpy path, as counting computes it
        expected = link_key(keys, words)
    assert [int(hashed_kernels._link_key(k, w)) for k, w in zip(keys, words)] == expected.tolist()


def test_compact_arrays_do_not_depend_on_the_sort_partitions(ngram_model, tmp_path):
    """The external sort of link keys gives the same arrays with many partitions as with one."""
    model_dir, _ = ngram_model
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    compile_model(str(copy), partition_links=64)
    names = sorted(p.name for p in (model_dir / "compact").iterdir())
    assert names == sorted(p.name for p in (copy / "compact").iterdir())
    for name in names:
        assert (model_dir / "compact" / name).read_bytes() == (copy / "compact" / name).read_bytes()
