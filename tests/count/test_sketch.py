"""The count's feature sketch: never below a key's count, whatever its size, cells and
merges; and a thresholded count is the same bytes whatever the sketch's size."""

import collections
import filecmp
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.count import sketch
from snm_core.count.sketch import FeatureSketch


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


def test_a_large_sketch_leaves_out_most_keys_seen_once():
    """What the sketch is for: with four cells an occurrence, most keys seen once are
    known to be seen once (the count drops them before its scratch)."""
    rng = np.random.default_rng(5)
    once = rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False)
    twice = rng.integers(0, 2**64, 50_000, dtype=np.uint64, endpoint=False)
    occurrences = np.concatenate([once, twice, twice])
    s = FeatureSketch(sketch.plan_cells(len(occurrences), 2, 1 << 30), 2)
    s.add(occurrences)
    assert s.reaches(twice, 2).all()
    assert s.reaches(once, 2).mean() < 0.12


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
    buckets (--passes): the files are those of one pass, continuation counts included
    (a bucket's come from the buckets of every pass), thresholded or not."""
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
        for out, passes in zip(outs, (1, 3)):
            assert count_cmd.main(argv + ["--out", str(out), "--passes", str(passes)]) == 0
        names = sorted(os.listdir(outs[0]))
        assert names == sorted(os.listdir(outs[1])) and len(names) == 18
        match, mismatch, errors = filecmp.cmpfiles(*outs, names, shallow=False)
        assert not mismatch and not errors
