"""The hashed layout of ``compact/`` (``snm_core.scoring.layouts.hashed`` and its builder
and C lookups): every key found and nothing else, the compiled twins of the numpy
definitions, arrays independent of the external sort's partitions, scatter levels and
memory, open files bounded, links sharing a whole link key kept and found."""

import json
import os
import shutil

import numpy as np
import pytest

from support.models import brute_force_perplexity

import snm
from snm.cli import main
from snm_core.io.progress import Progress
from snm_core.scoring.compact import compile_model, load_model, read_model_tables
from snm_core.scoring.layouts import hashed_build, hashed_build_kernels, hashed_kernels, hashed_tables
from snm_core.scoring.layouts.hashed_tables import EntryTable, EntryTableWriter, KeyIndex, table_bits
from snm_core.text.hashing import GOLDEN, fmix64_steps, link_key
from snm_core.text.tokenize import tokenize


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
        assert [truth[k] for k in keys.tolist()] == table.value_of(rows).tolist()
        others = rng.integers(0, 2 ** 64, size=1000, dtype=np.uint64)
        assert np.all(table.find(others[~np.isin(others, keys)]) == -1)


def test_an_entry_table_written_to_files_holds_only_its_block_starts(tmp_path):
    """Written a chunk at a time to its files, a table keeps in memory only the int64
    start of each block of slots (1/256 of the slots): not every slot's start, which at
    379M links was 2 GiB of the compile's peak."""
    import tracemalloc

    n, chunk = 1 << 21, 1 << 16
    keys = np.sort(np.random.default_rng(2).integers(0, 2 ** 64, n, dtype=np.uint64))
    values = np.ones(n, np.float32)
    writer = EntryTableWriter(n, str(tmp_path), "link")
    tracemalloc.start()
    try:
        for start in range(0, n, chunk):
            writer.add(keys[start:start + chunk], values[start:start + chunk])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    slot_starts = (1 << table_bits(n)) * 8
    assert held < slot_starts / 8
    writer.finish()
    table = EntryTable(*[np.load(tmp_path / f"link_{part}.npy")
                         for part in ("entries", "index", "blocks", "overflow")])
    assert np.array_equal(table.find(keys[::1000]), np.arange(0, n, 1000))


def test_compiled_lookups_use_the_slot_blocks_the_compact_arrays_are_written_with():
    assert hashed_kernels.SLOT_BLOCK_BITS == hashed_tables.SLOT_BLOCK_BITS


def test_build_records_equal_the_numpy_definitions():
    """The scatter's records: the link key (numpy's hashing), M, and count / the
    feature's count rounded as numpy's true division and cast to float32 round it."""
    rng = np.random.default_rng(6)
    feature_keys = rng.integers(0, 2 ** 64, size=50, dtype=np.uint64)
    feature_counts = rng.integers(1, 10 ** 12, size=50)
    rows = np.sort(rng.integers(0, 50, size=1000)).astype(np.int32)
    words = rng.integers(0, 2 ** 31, size=1000).astype(np.int32)
    m = rng.random(1000).astype(np.float32)
    counts = rng.integers(1, 10 ** 6, size=1000)
    mask = np.uint64(2 ** 40 - 1)
    records = hashed_build_kernels.fill_records(feature_keys, feature_counts, rows, words, m,
                                                counts, mask)
    # The link key's numpy definition: fmix64(feature key ^ (word + 1) * golden).
    folded = feature_keys[rows] ^ (words.astype(np.uint64) + np.uint64(1)) * GOLDEN
    expected_keys = fmix64_steps(folded) & mask
    assert records["key"].tolist() == expected_keys.tolist()
    assert records["m"].tobytes() == m.tobytes()
    assert records["c"].tobytes() == (counts / feature_counts[rows]).astype(np.float32).tobytes()


@pytest.mark.parametrize("shift, bits", [(56, 8), (0, 3), (60, 4), (10, 0)])
def test_records_grouped_by_key_bits_keep_their_order_in_each_group(shift, bits):
    rng = np.random.default_rng(bits)
    rows = rng.integers(0, 2 ** 64, size=(5000, 2), dtype=np.uint64)
    rows[::7, 0] = rows[0, 0]  # repeats of one key, whose order must be kept
    grouped = np.empty_like(rows)
    bounds = hashed_build_kernels.group_by_bits(rows, np.uint64(shift), bits, grouped)
    group = (rows[:, 0] >> np.uint64(shift)) & np.uint64((1 << bits) - 1)
    order = np.argsort(group, kind="stable")
    assert grouped.tolist() == rows[order].tolist()
    assert bounds.tolist() == np.searchsorted(group[order], np.arange((1 << bits) + 1)).tolist()


def copied(model_dir, tmp_path, name="model"):
    copy = tmp_path / name
    shutil.copytree(model_dir, copy)
    return copy


def assert_same_compact(one, other):
    names = sorted(p.name for p in (one / "compact").iterdir())
    assert names == sorted(p.name for p in (other / "compact").iterdir())
    for name in names:
        assert (one / "compact" / name).read_bytes() == (other / "compact" / name).read_bytes(), \
            name


def test_compact_arrays_do_not_depend_on_the_sort_partitions(ngram_model, tmp_path):
    """The external sort of link keys gives the same arrays with many partitions as with one,
    and with several scatter levels (fan-out 4: 64-link partitions are three levels here)."""
    model_dir, _ = ngram_model
    for name, options in (("many", {"partition": 64}),
                          ("levels", {"partition": 64, "fan_out_bits": 2})):
        copy = copied(model_dir, tmp_path, name)
        compile_model(str(copy), **options)
        assert_same_compact(model_dir, copy)


def test_scatter_keeps_open_files_bounded_at_any_size(ngram_model, tmp_path, monkeypatch):
    """A scatter pass holds at most 2**fan_out_bits files open (counted in /proc), however
    many partitions the sort needs: here 2**k partitions for k well past the fan-out."""
    model_dir, _ = ngram_model
    copy = copied(model_dir, tmp_path)
    links = json.loads((model_dir / "manifest.json").read_text())["totals"]["links"]
    levels = hashed_build.scatter_levels(links, 8, fan_out_bits=3)
    assert len(levels) >= 3 and sum(levels) > 3 * 2  # about 2**sum(levels) partitions
    before = len(os.listdir("/proc/self/fd"))
    most = []
    add = hashed_build.Scatter.add

    def counted(self, records):
        most.append(len(os.listdir("/proc/self/fd")) - before)
        return add(self, records)

    monkeypatch.setattr(hashed_build.Scatter, "add", counted)
    compile_model(str(copy), partition=8, fan_out_bits=3)
    # The scatter's 8 files, the file it reads, the feature table's two outputs, and
    # Arrow's of the bucket being read.
    assert most and max(most) <= 2 ** 3 + 6
    assert_same_compact(model_dir, copy)


def event_probabilities(model, lines):
    batch, _, _ = tokenize(lines, model.vocab)
    scores = model.score_batch(batch)
    return scores.prob, scores.prob_unadjusted


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_links_sharing_a_link_key_are_kept_and_found(which, request, tmp_path):
    """With the link keys cut to their top 14 bits (build and lookups both), thousands of
    real links share a key: every scoring path gives exactly the full keys' scores, and
    perplexity is the brute force's over the Parquet rows."""
    model_dir, test = request.getfixturevalue(which)
    copy = copied(model_dir, tmp_path)
    compile_model(str(copy), link_key_bits=14, partition=256)
    compact = json.loads((copy / "compact" / "manifest.json").read_text())
    # The links sharing a short key, counted from the Parquet rows.
    _, matrix, _ = read_model_tables(str(model_dir))
    short = link_key(matrix["feature"].to_numpy(), matrix["word"].to_numpy()) >> np.uint64(50)
    _, inverse, counts = np.unique(short, return_inverse=True, return_counts=True)
    shared = int(np.count_nonzero(counts[inverse] > 1))
    assert compact["link_key_bits"] == 14 and compact["link_collisions"] == compact["links"]
    assert compact["shared_links"] == shared > compact["links"] // 4
    collided, full = load_model(str(copy)), load_model(str(model_dir))
    for got, want in zip(event_probabilities(collided, test), event_probabilities(full, test)):
        np.testing.assert_array_equal(got, want)
    for context in ([], test[0].split()[:3], test[1].split()[:1]):
        for unadjusted in (False, True):
            np.testing.assert_array_equal(
                collided.distribution(context, unadjusted=unadjusted),
                full.distribution(context, unadjusted=unadjusted))
    collided_api, full_api = snm.load(str(copy)), snm.load(str(model_dir))
    for line in test[:10]:
        np.testing.assert_array_equal([p for p, _, _ in collided_api.full_scores(line)],
                                      [p for p, _, _ in full_api.full_scores(line)])
    reports = collided.evaluate_lines(test)
    for name, adjusted in (("adjusted", True), ("unadjusted", False)):
        assert reports[name]["perplexity"] == pytest.approx(
            brute_force_perplexity(model_dir, test, adjusted), rel=1e-6)
    if which != "ngram_model":
        return
    # The same arrays whatever the partitions, collisions and all.
    again = copied(model_dir, tmp_path, "again")
    compile_model(str(again), link_key_bits=14, partition=16, fan_out_bits=2)
    assert_same_compact(copy, again)


def test_shared_keys_beside_unshared_ones_give_every_link_its_own_values(ngram_model,
                                                                         tmp_path):
    """Keys cut to 20 bits with only the shared ones settled (as a build with 64-bit keys
    does): every link of the Parquet tables, looked up, gives its own M and c(w|f)."""
    model_dir, _ = ngram_model
    copy = copied(model_dir, tmp_path)
    compile_model(str(copy), link_key_bits=20, settle_every_link=False, partition=512)
    compact = json.loads((copy / "compact" / "manifest.json").read_text())
    assert 0 < compact["link_collisions"] == compact["shared_links"] < compact["links"] // 2
    feats, matrix, _ = read_model_tables(str(model_dir))
    feature, word = matrix["feature"].to_numpy(), matrix["word"].to_numpy()
    counts = dict(zip(feats["feature"].to_pylist(), feats["count"].to_pylist()))
    expected_c = np.array([c / counts[f] for f, c in zip(feature.tolist(),
                                                         matrix["count"].to_pylist())])
    model = load_model(str(copy))
    m, c = model._scorer.link_values(feature, word)
    np.testing.assert_array_equal(m, matrix["m"].to_numpy().astype(np.float64))
    np.testing.assert_array_equal(c, expected_c.astype(np.float32))


def test_a_layout_3_compact_is_read_as_it_is(ngram_model, tmp_path):
    """compact/ of layout 3 (before link_collisions: built only without collisions) is
    scored as it is, not rebuilt."""
    model_dir, test = ngram_model
    copy = copied(model_dir, tmp_path)
    path = copy / "compact" / "manifest.json"
    compact = json.loads(path.read_text())
    compact["layout"] = 3
    compact["files"].remove("link_collisions.npy")
    del compact["link_collisions"]
    path.write_text(json.dumps(compact))
    (copy / "compact" / "link_collisions.npy").unlink()
    for got, want in zip(event_probabilities(load_model(str(copy)), test),
                         event_probabilities(load_model(str(model_dir)), test)):
        np.testing.assert_array_equal(got, want)
    assert json.loads(path.read_text()) == compact


def test_compact_memory_is_checked_before_work_and_changes_no_byte(ngram_model, tmp_path,
                                                                     capsys):
    model_dir, _ = ngram_model
    copy = copied(model_dir, tmp_path)
    before = (copy / "compact" / "manifest.json").read_text()
    assert main(["compact", "--model", str(copy), "--layout", "hashed", "--memory", "100M"]) == 2
    err = capsys.readouterr().err.strip()
    assert "compact (hashed): the memory budget --memory 100M" in err
    assert "give --memory" in err and len(err.splitlines()) == 1
    assert (copy / "compact" / "manifest.json").read_text() == before  # nothing removed
    assert main(["compact", "--model", str(copy), "--layout", "hashed", "--memory", "220M"]) == 0
    assert_same_compact(model_dir, copy)


def test_every_pass_of_the_build_shows_its_progress(ngram_model, tmp_path):
    """The builder reports each pass through the ``progress`` it is given, to its total."""
    model_dir, _ = ngram_model
    shown = []

    def progress(what, total=None, unit="link"):
        shown.append(Progress(what, total=total, unit=unit, bar=False))
        return shown[-1]

    compile_model(str(copied(model_dir, tmp_path)), progress=progress, partition=64,
                  fan_out_bits=2, link_key_bits=14)
    levels = len(hashed_build.scatter_levels(shown[0].total, 64, fan_out_bits=2))
    assert [p.stage for p in shown] == (
        ["scatter"] + [f"scatter, level {k}" for k in range(2, levels + 1)]
        + ["sort", "collisions"])
    assert all(p.done == p.total for p in shown)
