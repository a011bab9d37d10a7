"""The count's feature sketch: never below a key's count, whatever its size, cells and
merges; and a thresholded count is the same bytes whatever the sketch's size."""

import collections
import filecmp
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.count import sketch
from snm_core.count.sketch import FeatureSketch
from snm_core.count.thresholds import collapse_links


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(1, 20), min_size=1, max_size=400),
       log2_cells=st.integers(1, 14), bits=st.sampled_from([2, 4, 8]),
       minimum=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), split=st.integers(0, 400))
def test_estimates_never_fall_below_counts(tmp_path_factory, counts, log2_cells, bits,
                                           minimum, seed, split):
    """Every key seen at least ``minimum`` times reaches it (a count-min sketch only
    overestimates), in one sketch and in the merge of two workers' halves; the cells
    saturate rather than wrap."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64, len(counts), dtype=np.uint64, endpoint=False)
    occurrences = np.repeat(keys, counts)
    rng.shuffle(occurrences)
    whole = FeatureSketch(log2_cells, bits)
    whole.add(occurrences)
    truth = collections.Counter(occurrences.tolist())
    reaching = np.array([truth[k] >= minimum for k in keys.tolist()])
    assert whole.reaches(keys, minimum)[reaching].all()

    folder = tmp_path_factory.mktemp("parts")
    parts = []
    for i, half in enumerate((occurrences[:split], occurrences[split:])):
        part = FeatureSketch(log2_cells, bits)
        part.add(half)
        parts.append(str(folder / f"{i}.sketch"))
        part.save(parts[-1])
    sketch.merge_files(parts, str(folder / "merged"), log2_cells, bits, chunk_bytes=3)
    merged = FeatureSketch.load(str(folder / "merged"), log2_cells, bits)
    assert merged.reaches(keys, minimum)[reaching].all()
    top = (1 << bits) - 1
    assert merged.reaches(keys, min(top, max(counts)))[np.array(counts) >= top].all()


def _cells(packed, bits):
    """The counters of packed sketch bytes, one per column, lowest bits first."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return (packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)


@settings(max_examples=40, deadline=None)
@given(log2_cells=st.integers(1, 12), bits=st.sampled_from([2, 4, 8]),
       workers=st.integers(1, 4), chunk_bytes=st.integers(1, 80), seed=st.integers(0, 2**32 - 1))
def test_a_merge_sums_every_cell_saturating(tmp_path_factory, log2_cells, bits, workers,
                                            chunk_bytes, seed):
    """Merged sketches hold, cell by cell, the workers' sum capped at the largest
    counter, whatever the cells' width and the chunks the files are read in."""
    rng = np.random.default_rng(seed)
    size = sketch.sketch_bytes(log2_cells, bits)
    # Mostly small counters, some full: every carry and saturation case of a cell.
    parts = [rng.choice(np.array([0, 1, 0x55, 0xAA, 0xFF, 0x0F, 0xF0], np.uint8), size)
             if i % 2 else rng.integers(0, 256, size, dtype=np.uint8) for i in range(workers)]
    folder = tmp_path_factory.mktemp("merge")
    paths = []
    for i, cells in enumerate(parts):
        paths.append(str(folder / f"{i}.sketch"))
        FeatureSketch(log2_cells, bits, cells).save(paths[-1])
    sketch.merge_files(paths, str(folder / "merged"), log2_cells, bits, chunk_bytes=chunk_bytes)
    merged = np.fromfile(folder / "merged", np.uint8)
    expected = np.minimum(sum(_cells(p, bits).astype(np.int64) for p in parts), (1 << bits) - 1)
    assert np.array_equal(_cells(merged, bits), expected)


def test_a_large_sketch_leaves_out_most_keys_seen_once():
    """What the sketch is for: sized for the text's occurrences, where frequent keys
    repeat, most keys seen once are known to be seen once (the count drops them before
    its scratch)."""
    rng = np.random.default_rng(5)
    once = rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False)
    twice = rng.integers(0, 2**64, 50_000, dtype=np.uint64, endpoint=False)
    frequent = rng.integers(0, 2**64, 2_000, dtype=np.uint64, endpoint=False)
    occurrences = np.concatenate([once, twice, twice, np.repeat(frequent, 200)])
    s = FeatureSketch(sketch.plan_cells(len(occurrences), 2, 1 << 30), 2)
    s.add(occurrences)
    assert s.reaches(twice, 2).all()
    assert s.reaches(once, 2).mean() < 0.2


def test_a_count_is_the_same_bytes_whatever_the_sketch(tmp_path, monkeypatch):
    """Sketches of a few cells drop almost nothing before the merge, the default ones
    most of the features seen once and collapse most links seen once: the exact filter
    after the merge makes both counts the same files."""
    from support.counts import write_lines

    from snm.commands import count as count_cmd
    from snm_core.text import synthetic
    from snm_core.text.vocab import Vocabulary
    sentences = synthetic.generate(400, seed=11)
    text = write_lines(str(tmp_path / "train.txt"), sentences)
    vocab = str(tmp_path / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})).save(vocab)
    argv = ["--config", "skip5gram", "--vocab", vocab, "--train", text, "--num_buckets", "4",
            "--min_feature_count", "skip=2", "--min_feature_count", "ngram=3",
            "--min_link_count", "skip=2"]
    assert count_cmd.main(argv + ["--out", str(tmp_path / "default")]) == 0
    monkeypatch.setattr(sketch, "plan_cells", lambda occurrences, bits, memory: 4)
    assert count_cmd.main(argv + ["--out", str(tmp_path / "tiny")]) == 0
    names = sorted(n for n in os.listdir(tmp_path / "default") if n.endswith(".parquet"))
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "default", tmp_path / "tiny", names,
                                               shallow=False)
    assert len(match) == 8 and not mismatch and not errors


def test_a_worker_keeps_one_sketch_file_over_its_shards(tmp_path):
    """The first pass saves one sketch a worker and kind, whatever the number of shards it
    reads (at 100M words a sketch is 1 GiB: one a shard filled the disk), and that file
    holds the sum of its shards' sketches, which the merge adds once."""
    from support.counts import write_lines

    from pipelines import count_directory
    from pipelines.count_links import _Extractor
    from pipelines.count_sketch import SketchFile, SketchShard, merge_sketches
    from pipelines.reading import TextShard
    from snm_core.count import continuation, thresholds
    from snm_core.text import synthetic
    from snm_core.text.config import load_config
    from snm_core.text.vocab import Vocabulary
    sentences = synthetic.generate(300, seed=3)
    texts = [write_lines(str(tmp_path / f"train{i}.txt"), sentences[i::3]) for i in range(3)]
    vocab = Vocabulary(sorted({w for s in sentences for w in s.split()}))
    vocab_path = str(tmp_path / "vocab.txt")
    vocab.save(vocab_path)
    config = load_config("skip5gram")
    settings = _Extractor(config.to_text(), [""], vocab_path,
                          count_directory.share_vocabulary(vocab_path, vocab))
    skip = thresholds.parse(["skip=2"], config.feature_types(), continuation.parent_types(config))
    files = [SketchFile(kind, str(tmp_path / f"{kind}.sketch"), 12, 2, skip)
             for kind in ("features", "links")]
    shards = [TextShard(0, path, file=i) for i, path in enumerate(texts)]

    def sketched(shards, name):
        parts = tmp_path / name
        parts.mkdir()
        worker = SketchShard(settings, files, str(parts), 1 << 12)
        worker.setup()
        yielded = [out for shard in shards for out in worker.process(shard)]
        return yielded, sorted(os.listdir(parts))

    yielded, on_disk = sketched(shards, "one-worker")
    assert len(yielded) == 6 and len(on_disk) == 2 and len({p for _, p in yielded}) == 2
    separately = [sketched([shard], f"shard{i}") for i, shard in enumerate(shards)]
    for file in files:
        merge_sketches(yielded, [file])
        once = np.fromfile(file.path, np.uint8)
        merge_sketches([part for parts, _ in separately for part in parts], [file])
        assert np.array_equal(once, np.fromfile(file.path, np.uint8)) and once.any()


def test_a_count_in_passes_is_the_count_in_one(tmp_path):
    """A count whose scratch would not fit the disk reads the text once per share of the
    buckets (--passes), its scratch compressed: the files are those of one pass of raw
    scratch, continuation counts included (a bucket's come from the buckets of every
    pass), thresholded or not."""
    from support.counts import write_lines

    from snm.commands import count as count_cmd
    from snm_core.text import synthetic
    from snm_core.text.vocab import Vocabulary
    sentences = synthetic.generate(400, seed=12)
    text = write_lines(str(tmp_path / "train.txt"), sentences)
    vocab = str(tmp_path / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})).save(vocab)
    for thresholds in ([], ["--min_feature_count", "skip=2", "--min_link_count", "skip=2"]):
        argv = ["--config", "skip5gram", "--vocab", vocab, "--train", text,
                "--num_buckets", "8", *thresholds]
        outs = [tmp_path / f"{bool(thresholds)}-{n}" for n in (1, 3)]
        for out, passes, compress in zip(outs, (1, 3), ("never", "always")):
            assert count_cmd.main(argv + ["--out", str(out), "--passes", str(passes),
                                          "--compress_scratch", compress]) == 0
        names = sorted(os.listdir(outs[0]))
        assert names == sorted(os.listdir(outs[1])) and len(names) == 18
        match, mismatch, errors = filecmp.cmpfiles(*outs, names, shallow=False)
        assert not mismatch and not errors


@pytest.mark.parametrize("disk", ["plan too high", "disk filling"])
def test_the_passes_a_count_plans_follow_its_measured_scratch(tmp_path, monkeypatch, disk):
    """The passes the plan chose are planned again after each from the scratch it wrote:
    fewer where the plan's upper bound was high (the usual case), more where the free
    disk fell; the files are those of one pass."""
    from support.counts import write_lines

    from pipelines import count as count_pipeline
    from pipelines import running
    from snm.commands import count as count_cmd
    from snm_core.count.budget import SCRATCH_BYTES_PER_OCCURRENCE, SCRATCH_SHARE_OF_FREE_DISK
    from snm_core.text import synthetic
    from snm_core.text.config import load_config
    from snm_core.text.features import FeatureExtractor
    from snm_core.text.vocab import Vocabulary
    sentences = synthetic.generate(400, seed=12)
    text = write_lines(str(tmp_path / "train.txt"), sentences)
    vocab = str(tmp_path / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})).save(vocab)
    argv = ["--config", "skip5gram", "--vocab", vocab, "--train", text, "--num_buckets", "8",
            "--compress_scratch", "never"]
    assert count_cmd.main(argv + ["--out", str(tmp_path / "one"), "--passes", "1"]) == 0

    words = sum(len(s.split()) + 1 for s in sentences)
    per_event = FeatureExtractor(load_config("skip5gram")).occurrences_per_event
    planned = words * per_event * SCRATCH_BYTES_PER_OCCURRENCE
    # the plan: 4 passes of 2 buckets (the plan's words are an estimate: a little room)
    free = [int(planned / 3.5 / SCRATCH_SHARE_OF_FREE_DISK)]
    stages = []
    real_run = running.run_pipeline

    def run_pipeline(beam_args, build, stage, **kwargs):
        stages.append(stage)
        if disk == "disk filling":
            free[0] = 1  # after the first pass: one bucket a pass
        return real_run(beam_args, build, stage, **kwargs)

    monkeypatch.setattr(count_pipeline.storage, "free_bytes", lambda path: free[0])
    monkeypatch.setattr(running, "run_pipeline", run_pipeline)
    out = tmp_path / "passes"
    assert count_cmd.main(argv + ["--out", str(out)]) == 0
    passes = [stage for stage in stages if stage.startswith("count: pass")]
    assert passes[0] == "count: pass 1 of 4"
    if disk == "plan too high":
        assert 2 <= len(passes) < 4
    else:
        assert passes[1:] == [f"count: pass {k} of 7" for k in range(2, 8)]
    names = sorted(os.listdir(tmp_path / "one"))
    assert names == sorted(os.listdir(out))
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "one", out, names, shallow=False)
    assert not mismatch and not errors


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9), st.integers(1, 5),
                               st.booleans()), max_size=60))
def test_collapsed_links_keep_each_feature_total_in_order(rows):
    """A batch's links that the link sketch leaves out become one row a feature, after
    its kept links, carrying their counts: (feature, word) order and C(f,*) kept."""
    distinct = sorted({(f, w): (c, k) for f, w, c, k in rows}.items())
    links = {"feature": np.array([f for (f, _), _ in distinct], np.uint64),
             "word": np.array([w for (_, w), _ in distinct], np.int32),
             "count": np.array([c for _, (c, _) in distinct], np.int64)}
    keep = np.array([k for _, (_, k) in distinct], bool)
    expected = []
    for feature in sorted({f for (f, _), _ in distinct}):
        mine = [(w, c, k) for (f, w), (c, k) in distinct if f == feature]
        expected += [(feature, w, c) for w, c, k in mine if k]
        if not all(k for _, _, k in mine):
            expected.append((feature, 10, sum(c for _, c, k in mine if not k)))
    collapsed = collapse_links(links, keep, 10)
    assert list(zip(*(collapsed[name].tolist() for name in ("feature", "word", "count")))) \
        == expected
    assert collapsed["word"].dtype == np.int32 and collapsed["count"].dtype == np.int64
