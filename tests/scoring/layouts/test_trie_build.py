"""Building the trie and small layouts by external sort (``trie_build``, ``sorted_runs``):
byte for byte the arrays of the in-memory builders (``reference_tries``) at any memory
budget, one that cuts the model into many runs and partitions included."""

import io
import json
import os

import numpy as np
import pytest
import xxhash
from reference_tries import small_arrays, trie_arrays

from snm_core.io.errors import SnmInputError
from snm_core.io.progress import Progress
from snm_core.scoring.compact import write_scoring_directory
from snm_core.scoring.layouts import small, trie, trie_build
from snm_core.scoring.layouts.npy import NpyWriter, known_checksums
from snm_core.scoring.layouts.sorted_runs import SortedRuns
from snm_core.stages import manifests

BUILDERS = {"trie": (trie.build_trie, trie_arrays, trie.TRIE_FILES),
            "small": (small.build_small, small_arrays, small.SMALL_FILES)}


def saved(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def check_build(model_dir, layout, directory, memory):
    """Build ``layout`` within ``memory`` and compare every file with the reference."""
    build, reference, names = BUILDERS[layout]
    manifest = manifests.Model.read(str(model_dir))
    directory.mkdir()
    compact = build(str(model_dir), manifest, str(directory), memory=memory).write(
        str(directory))
    arrays, extra = reference(str(model_dir), manifest)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [n + ".npy" for n in names] + ["manifest.json"])  # no scratch left
    for name in names:
        assert (directory / f"{name}.npy").read_bytes() == saved(arrays[name]), name
    stored = json.loads((directory / "manifest.json").read_text())
    assert {key: stored[key] for key in extra} == extra
    assert stored["files"] == [n + ".npy" for n in names]
    assert stored["bytes"] == sum(a.nbytes for a in arrays.values())
    return compact


def tiny_memory(model_dir, monkeypatch, records):
    """A budget of runs, partitions and chunks of ``records``: many of each."""
    monkeypatch.setattr(trie_build, "MIN_RECORDS", records)
    manifest = manifests.Model.read(str(model_dir))
    radix = manifest["vocabulary_size"]
    memory = trie_build.VOCABULARY_BYTES * radix + records * trie_build.ENTRY_BYTES
    width = trie_build.key_shape(radix, 5, len(manifest["tags"]))[2]
    sizes = trie_build.plan(memory, radix, width, "model", "trie")
    assert sizes.partition_records * 4 < manifest["totals"]["links"]
    assert sizes.chunk_entries == records
    return memory


@pytest.mark.parametrize("layout", ["trie", "small"])
def test_external_build_is_the_in_memory_build_at_any_budget(tagged_ngram_model, layout,
                                                             tmp_path, monkeypatch):
    model_dir, _ = tagged_ngram_model
    check_build(model_dir, layout, tmp_path / "default", None)
    check_build(model_dir, layout, tmp_path / "large", 64 << 20)
    check_build(model_dir, layout, tmp_path / "small",
                tiny_memory(model_dir, monkeypatch, 1024))
    check_build(model_dir, layout, tmp_path / "tiny", tiny_memory(model_dir, monkeypatch, 256))


@pytest.mark.parametrize("layout", ["trie", "small"])
def test_a_large_budget_builds_in_capped_runs(ngram_model, layout, tmp_path, monkeypatch):
    """Runs, partitions and chunks stop growing at MAX_RECORDS whatever the budget, so the
    build's memory stops growing with the model; the arrays are the same."""
    model_dir, _ = ngram_model
    manifest = manifests.Model.read(str(model_dir))
    monkeypatch.setattr(trie_build, "MAX_RECORDS", 2048)
    sizes = trie_build.model_plan(str(model_dir), manifest, layout, 64 << 30)
    assert sizes.run_records == sizes.chunk_entries == sizes.records(2) == 2048
    assert sizes.run_records * 4 < manifest["totals"]["links"]
    check_build(model_dir, layout, tmp_path / "capped", 64 << 30)


def test_small_blocks_and_escapes_across_chunks(ngram_model, tmp_path, monkeypatch):
    """Blocks of 4 entries and escapes for every step and gap of 2 or more, in chunks of
    64 entries (a chunk ends inside a context's run, a code's escapes in every chunk)."""
    model_dir, _ = ngram_model
    monkeypatch.setattr(small, "BLOCK_ENTRIES", 4)
    monkeypatch.setattr(small, "ESCAPE", 2)
    check_build(model_dir, "small", tmp_path / "tiny", tiny_memory(model_dir, monkeypatch, 64))


def test_a_budget_below_the_fixed_parts_is_one_line(ngram_model, tmp_path):
    model_dir, _ = ngram_model
    manifest = manifests.Model.read(str(model_dir))
    with pytest.raises(SnmInputError, match=r"needs at least .* give --memory \d+M or more"):
        trie.build_trie(str(model_dir), manifest, str(tmp_path), memory=10_000)


def test_snm_compact_shows_the_builds_progress_to_its_total(ngram_model, tmp_path):
    """What ``snm compact`` hands the trie builders: a Progress that reaches its total
    (every link scanned, then streamed into the trie), within the budget it was given."""
    model_dir, _ = ngram_model
    shown = []

    def progress(what, total=None, unit="link"):
        shown.append(Progress(what, total=total, unit=unit, bar=False))
        return shown[-1]

    write_scoring_directory(str(model_dir), "trie", str(tmp_path / "out"), memory="210M",
                            progress=progress)
    links = manifests.Model.read(str(model_dir)).totals["links"]
    assert [(p.total, p.done) for p in shown] == [(2 * links, 2 * links)]


@pytest.mark.parametrize("width", [1, 3])
def test_sorted_runs_give_every_record_once_in_order(tmp_path, width):
    rng = np.random.default_rng(width)
    n = 5000
    keys = np.zeros((n, width), np.uint64)
    keys[:, 0] = rng.integers(0, 3, n)  # few values in the leading words: long ties
    keys[:, -1] = rng.permutation(n)  # distinct keys
    if width == 3:
        keys[:, 1] = rng.integers(0, 1 << 64, n, dtype=np.uint64) >> np.uint64(rng.integers(
            0, 64))
    value = np.arange(n, dtype=np.int32)
    runs = SortedRuns(str(tmp_path / f"w{width}"), width, {"value": np.int32}, 700, 300, n)
    for piece in np.array_split(np.arange(n), 13):
        runs.add(keys[piece], {"value": value[piece]})
    runs.finish()
    parts = list(runs.partitions())
    assert len(parts) > 10 and max(len(p["keys"]) for p in parts) <= 300
    order = np.lexsort(keys.T[::-1])
    np.testing.assert_array_equal(np.concatenate([p["keys"] for p in parts]), keys[order])
    np.testing.assert_array_equal(np.concatenate([p["value"] for p in parts]), value[order])
    for part in parts:  # a partition is its runs' slices concatenated, in ``order``
        pieces = [runs.read_run(r, "value")[lo:hi] for r, lo, hi in part["slices"]]
        np.testing.assert_array_equal(np.concatenate(pieces)[part["order"]], part["value"])
    runs.remove()


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("size", [0, 1234])
def test_npy_writer_is_np_save_and_takes_its_checksum_as_it_writes(tmp_path, known, size):
    """Of a known or unknown length: the file is np.save's, and the checksum it took as it
    wrote (known lengths only) is the one read from the file."""
    dtype = trie.ENTRY_TYPES[0]
    array = np.zeros(size, dtype)
    array["word"] = np.arange(size)
    writer = NpyWriter(str(tmp_path / "a.npy"), dtype, size if known else None)
    for piece in np.array_split(array, 5):
        writer.append(piece)
    assert writer.close() == array.nbytes
    assert (tmp_path / "a.npy").read_bytes() == saved(array)
    assert os.listdir(tmp_path) == ["a.npy"]
    taken = known_checksums([writer])["files"]
    assert taken == ({"a.npy": xxhash.xxh3_64_hexdigest(saved(array))} if known else {})


def test_keys_of_several_words(tagged_ngram_model, tmp_path, monkeypatch):
    """Sort keys of three uint64 words (30 bits a word's field, fields across words, the
    tag's bit in front): the same arrays."""
    model_dir, _ = tagged_ngram_model
    shape = trie_build.key_shape

    def wide(radix, slots, tags):
        tag_bits = shape(radix, slots, tags)[0]
        return tag_bits, 30, -(-(tag_bits + 30 * slots) // 64)

    monkeypatch.setattr(trie_build, "key_shape", wide)
    assert wide(100, 5, 2) == (1, 30, 3)
    check_build(model_dir, "trie", tmp_path / "trie", tiny_memory(model_dir, monkeypatch, 256))
    check_build(model_dir, "small", tmp_path / "small", None)
