"""The composite transforms and bucket DoFns of pipelines/ on Beam's TestPipeline.

Each runs on a tiny input and its output is checked with ``assert_that`` and
``equal_to`` against elements computed without the code under test: the count,
the held-out events and the text totals by the paper's definitions in plain Python
(tests/support/paper.py), bucket sizes and model values from the tables read with
pyarrow.  Then the files the transform wrote are checked the same way, through the
features' words rather than their keys.
"""

import collections
import gzip
import itertools
import json
import os

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
import xxhash
from apache_beam.testing import test_pipeline as beam_testing
from apache_beam.testing.util import assert_that, equal_to
from support import paper

from pipelines import count_links
from pipelines import count_directory, running
from pipelines.apply import AdjustBucket
from pipelines.count_reference import ReferenceLinkPartials
from pipelines.join import JoinHeldout
from pipelines.prune import PruneBucket, RankHistogram, Source
from pipelines.reading import FIRST_INVALID, TextShard
from pipelines.shuffle import ArrayShuffle
from pipelines.vocab import WordCounts
from snm.commands import count as count_cmd
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.io import tables
from snm_core.prune import criteria as prune_lib
from snm_core.text import synthetic
from snm_core.text.config import load_config, parse_config
from snm_core.text.vocab import Vocabulary

#: n-grams, a tied skip-gram with two remote words, an untied one.
CONFIG = ("ngram_extractor { min_n: 0 max_n: 2 }\n"
          "skip_ngram_extractor { max_context_words: 3 max_remote_words: 2 max_skip_length: 3 "
          "tie_skip_length: true }\n"
          "skip_ngram_extractor { max_context_words: 2 max_skip_length: 1 }\n")
TAGS = ("man", "web")
NUM_BUCKETS = 4
#: Small enough that every file is read in several batches.
BATCH_BYTES = 1500


def pipeline():
    """A TestPipeline on the in-process runner the stages default to (no Prism download)."""
    return beam_testing.TestPipeline(options=running.pipeline_options([]))


def add_up(elements):
    """Dicts summed key by key: numbers added, lists joined (and sorted)."""
    total = {}
    for element in elements:
        for name, value in element.items():
            if isinstance(value, list):
                total[name] = sorted(total.get(name, []) + value)
            else:
                total[name] = total.get(name, 0) + value
    return total


def shard_names(shards):
    return sorted(shard.name for shard in shards)


def first_invalid(path, file=0):
    """The totals entry of ``path``'s first line that Python's UTF-8 decoder refuses, read
    line by line: ``[file, line number, path, problem]``; None if every line decodes."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f.read().split(b"\n"), 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return [file, number, path, f"not valid UTF-8 ({e.reason} at byte {e.start})"]
    return None


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """Two training sources (one gzipped, no final newline, both with edge cases), held-out
    text, a vocabulary of some of their words, and the count of the sources (``snm count``,
    tagged man and web)."""
    root = tmp_path_factory.mktemp("transforms")
    sentences = synthetic.generate(160, seed=31)
    a = root / "a.txt"
    a.write_bytes("".join(s + "\n" for s in sentences[:80]).encode()
                  + b"\xff\xfe not utf-8\n\n   \nbegin0 <S> odd </S> <UNK> words\n")
    b = str(root / "b.txt.gz")
    with gzip.open(b, "wt", encoding="utf-8") as f:
        f.write("\n".join(sentences[80:]))
    dev = root / "dev.txt"
    dev.write_text("".join(s + "\n" for s in synthetic.generate(30, seed=32))
                   + "\nbegin1 zebra unknown words\n")
    vocab = str(root / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})[:45]).save(vocab)
    config = root / "config.cfg"
    config.write_text(CONFIG)
    count = str(root / "count")
    assert count_cmd.main(["--config", str(config), "--vocab", vocab, "--train", f"man={a}",
                           "--train", f"web={b}", "--num_buckets", str(NUM_BUCKETS),
                           "--out", count, "--skip_invalid"]) == 0  # 1 bad line of 164
    return {"a": str(a), "b": b, "dev": str(dev), "vocab": vocab, "count": count,
            "vocabulary": paper.vocabulary_words(vocab)}


def training_shards(text):
    """Both sources, the second read by two readers."""
    return [TextShard(0, text["a"]), TextShard(1, text["b"], 0, 2), TextShard(1, text["b"], 1, 2)]


# --- running.CallOnce ----------------------------------------------------------------------

def gathered(elements, label):
    return label, sorted(elements)


def test_bundles_sample_their_state_every_few_milliseconds():
    """A worker's bundle ends by joining Beam's state sampler, which sleeps its period
    first: the stages' processes sample every STATE_SAMPLING_MS, not Beam's 200 ms."""
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory
    sampler = statesampler.StateSampler("stage", CounterFactory())
    assert sampler.sampling_period_ms == running.STATE_SAMPLING_MS < 200
    sampler.start()
    sampler.stop()  # still a working sampler


def test_call_once_calls_once_with_every_element_even_with_none():
    with pipeline() as p:
        many = p | "Many" >> beam.Create(range(100)) | "OnMany" >> running.CallOnce(gathered, "a")
        none = (p | "None" >> beam.Create([]).with_output_types(int)
                | "OnNone" >> running.CallOnce(gathered, "b"))
        assert_that(many, equal_to([("a", list(range(100)))]), label="CheckMany")
        assert_that(none, equal_to([("b", [])]), label="CheckNone")


# --- vocab.WordCounts ----------------------------------------------------------------------

def plain_word_counts(result):
    """WordCounts' ``(table, totals)`` as plain values: the sorted (word, count) pairs and the
    totals split_lines keeps."""
    table, totals = result
    kept = ("sentences", "tokens", "empty_lines", "invalid_lines", "shards")
    return (sorted(zip(table["word"].to_pylist(), table["count"].to_pylist())),
            {name: sorted(value) if name == "shards" else value
             for name, value in totals.items() if name in kept})


def test_word_counts_are_every_word_of_every_valid_line(text):
    shards = training_shards(text)
    stats = paper.text_stats()
    sentences = [words for path in (text["a"], text["b"])
                 for _, words in paper.read_sentences(path, stats)]
    words = collections.Counter(w for sentence in sentences for w in sentence)
    expected = (sorted(words.items()),
                {"sentences": len(sentences), "tokens": sum(words.values()),
                 "empty_lines": stats["empty_lines"], "invalid_lines": stats["invalid_lines"],
                 "shards": shard_names(shards)})
    with pipeline() as p:
        counted = (p | beam.Create(shards) | WordCounts(BATCH_BYTES)
                   | beam.Map(plain_word_counts))
        assert_that(counted, equal_to([expected]))


# --- count.CountLinks and count_reference.ReferenceLinkPartials ----------------------------

def count_settings(text, out):
    """CountLinks' settings, its vocabulary written to ``out`` as ``snm count`` does."""
    os.makedirs(out, exist_ok=True)
    vocab = Vocabulary.load(text["vocab"])
    path = os.path.join(out, "vocab.txt")
    vocab.save(path)
    return count_links._Extractor(CONFIG, TAGS, path, vocab.fingerprint())


def manifest_names():
    """What a count manifest says its tag and type numbers are."""
    return {"tags": list(TAGS),
            "feature_types": [t.name for t in parse_config(CONFIG).feature_types()]}


def totals_of(written):
    return written["totals"]


def test_count_links_writes_the_counts_of_the_paper_definitions(text, tmp_path):
    """The totals CountLinks reports add up to the text's, and the bucket files it wrote
    hold every link with C(f,w) and N1+(. f w), every feature with C(f,*) and diversity.
    (Its ``reference`` form: ReferenceLinkPartials below, and tests/count.)"""
    out = str(tmp_path / "count")
    settings = count_settings(text, out)
    shards = training_shards(text)
    features, links, totals = paper.brute_force_count(
        CONFIG, [("man", [text["a"]]), ("web", [text["b"]])], text["vocabulary"])
    with pipeline() as p:
        written = (p | beam.Create(shards)
                   | count_links.CountLinks(settings, out, NUM_BUCKETS, 300, BATCH_BYTES,
                                            ArrayShuffle("files", str(tmp_path / "scratch")))
                   | beam.Map(totals_of) | beam.combiners.ToList() | beam.Map(add_up))
        # Each shard that met a line that does not decode names its first (a.txt, line 81).
        assert_that(written, equal_to([{**totals, "shards": shard_names(shards),
                                        FIRST_INVALID: [first_invalid(text["a"])]}]))
    got_features, got_links, _ = paper.read_count_directory(out, manifest_names())
    assert got_features == features
    assert got_links == links


def test_count_links_adds_to_an_existing_count(text, tmp_path):
    """``add_to``: the old buckets (``snm count`` of the first source) merged with the
    second source's are the count of both."""
    old = str(tmp_path / "old")
    assert count_cmd.main(["--config", "5gram", "--vocab", text["vocab"], "--train", text["a"],
                           "--num_buckets", str(NUM_BUCKETS), "--out", old,
                           "--skip_invalid"]) == 0
    out = str(tmp_path / "new")
    os.makedirs(out)
    vocab = Vocabulary.load(text["vocab"])
    vocab.save(os.path.join(out, "vocab.txt"))
    settings = count_links._Extractor(load_config("5gram").to_text(), ("",),
                                      os.path.join(out, "vocab.txt"), vocab.fingerprint())
    shards = [TextShard(0, text["b"])]
    features, links, totals = paper.brute_force_count(
        paper.APPENDIX_A, [("", [text["a"], text["b"]])], text["vocabulary"])
    _, _, new_text = paper.brute_force_count(paper.APPENDIX_A, [("", [text["b"]])],
                                             text["vocabulary"])
    expected = {**{name: new_text[name] for name in paper.STATS}, "shards": shard_names(shards),
                **{name: totals[name] for name in ("links", "features", "link_count_sum",
                                                    "key_collisions")}}
    with pipeline() as p:
        written = (p | beam.Create(shards)
                   | count_links.CountLinks(settings, out, NUM_BUCKETS, 300, BATCH_BYTES,
                                            ArrayShuffle("files", str(tmp_path / "scratch")),
                                            add_to=old)
                   | beam.Map(totals_of) | beam.combiners.ToList() | beam.Map(add_up))
        assert_that(written, equal_to([expected]))
    names = {"tags": [""], "feature_types": [f"{n}-gram" for n in range(5)]}
    got_features, got_links, _ = paper.read_count_directory(out, names)
    assert got_features == features
    assert got_links == links


def reference_rows(element, words, type_names):
    """A ReferenceLinkPartials element as plain rows: ``("link", identity, word, count)`` for
    each link of a feature's part, ``("stats", totals)`` for a shard's totals."""
    _, (kind, value) = element
    if kind == "stats":
        return [("stats", tuple(sorted((k, json.dumps(v)) for k, v in value.items()
                                       if k != "shards")))]
    feature = value["features"]  # the scratch's columns: its words in a group of their own
    identity = (TAGS[0], type_names[int(feature["type"][0])],
                tuple(words[i] for i in value["feature_words"]["word"]))
    return [("link", identity, words[w], int(c))
            for w, c in zip(value["links"]["word"], value["links"]["count"])]


def test_reference_partials_are_one_part_per_feature_with_its_summed_links(text, tmp_path):
    settings = count_settings(text, str(tmp_path / "count"))
    vocab_words = Vocabulary.load(text["vocab"]).words
    type_names = manifest_names()["feature_types"]
    shards = [TextShard(0, text["a"])]
    _, links, totals = paper.brute_force_count(CONFIG, [(TAGS[0], [text["a"]])],
                                               text["vocabulary"])
    stats = tuple(sorted([(name, json.dumps(totals[name])) for name in paper.STATS]
                         + [(FIRST_INVALID, json.dumps([first_invalid(text["a"])]))]))
    expected = [("link", identity, word, count) for (identity, word), (count, _) in links.items()]
    with pipeline() as p:
        rows = (p | beam.Create(shards)
                | ReferenceLinkPartials(settings, NUM_BUCKETS, BATCH_BYTES)
                | beam.FlatMap(reference_rows, vocab_words, type_names))
        assert_that(rows, equal_to(expected + [("stats", stats)]))


# --- join.JoinHeldout ---------------------------------------------------------------------

def without_event_files(totals):
    return {name: value for name, value in totals.items() if name != "event_files"}


def test_join_heldout_keeps_the_training_links_of_the_heldout_features(text, tmp_path):
    """The totals add up to the held-out text's; small_m holds every training link of every
    feature the held-out events have (each once per training tag), with its feature's
    counts beside it; the events files hold every event, in order, with all its features."""
    settings = count_directory.CountDirectory.load(text["count"])
    out = str(tmp_path / "join")
    os.makedirs(out)
    shards = [TextShard(0, text["dev"], 0, 2), TextShard(0, text["dev"], 1, 2)]
    train_features, train_links, _ = paper.brute_force_count(
        CONFIG, [("man", [text["a"]]), ("web", [text["b"]])], text["vocabulary"])
    events, stats = paper.heldout_events(CONFIG, [text["dev"]], text["vocabulary"], TAGS)
    heldout = set().union(*(found for *_, found in events))
    hit = heldout & set(train_features)
    expected = {**stats, "event_rows": stats["events"], "shards": shard_names(shards),
                "heldout_features": len(heldout), "small_m_features": len(hit),
                "small_m_links": sum(train_features[f][1] for f in hit),
                "buckets": list(range(NUM_BUCKETS))}
    with pipeline() as p:
        reported = (p | beam.Create(shards) | JoinHeldout(settings, out, BATCH_BYTES)
                    | beam.combiners.ToList() | beam.Map(add_up) | beam.Map(without_event_files))
        assert_that(reported, equal_to([expected]))

    names = manifest_names()
    identity, words = paper.feature_identities(text["count"], names["tags"],
                                               names["feature_types"])
    small_m = {}
    for row in paper.read_table(out, "small_m"):
        feature = identity[row["feature"]]
        assert (names["tags"][row["tag"]], names["feature_types"][row["type"]]) == feature[:2]
        small_m[(feature, words[row["word"]])] = (row["count"], row["continuation"],
                                                  row["feature_count"], row["diversity"])
    assert small_m == {(f, w): (count, continuation, *train_features[f])
                       for (f, w), (count, continuation) in train_links.items() if f in hit}
    rows = paper.read_table(out, "events")
    assert [(r["file"], r["line"], words[r["target"]], len(r["features"])) for r in rows] == \
        [(file, line, target, len(found)) for file, line, target, found in events]


# --- apply.AdjustBucket -------------------------------------------------------------------

def test_adjust_bucket_with_theta_zero_writes_the_relative_frequencies(text, tmp_path):
    """A(f, w) = 0: M_fw is c(w|f) = C(f,w) / C(f,*) and M_f* is 1, in every bucket; each
    bucket's values files come with the checksums of their bytes (for the manifest)."""
    settings = count_directory.CountDirectory.load(text["count"])
    theta = tmp_path / "theta.npy"
    np.save(theta, np.zeros(1 << 12, np.float32))
    out = tmp_path / "model"
    out.mkdir()

    def rows(prefix, bucket):
        return pq.read_metadata(os.path.join(text["count"], tables.bucket_file(
            prefix, bucket, NUM_BUCKETS))).num_rows
    buckets = list(range(NUM_BUCKETS))
    expected = [{"bucket": b, "links": rows("links", b), "features": rows("features", b)}
                for b in buckets]

    def as_expected(written):
        assert sorted(({k: v for k, v in w.items() if k != "checksums"} for w in written),
                      key=lambda w: w["bucket"]) == expected
        for w in written:
            assert sorted(w["checksums"]) == [tables.bucket_file(prefix, w["bucket"], NUM_BUCKETS)
                                              for prefix in ("m", "m_star")]
            for name, taken in w["checksums"].items():
                assert xxhash.xxh3_64((out / name).read_bytes()).hexdigest() == taken

    with pipeline() as p:
        written = (p | beam.Create(buckets)
                   | beam.ParDo(AdjustBucket(settings, str(theta),
                                             MetaFeatureSpec("unlexicalized", 1 << 12), str(out))))
        assert_that(written, as_expected)
    feature_count = {r["feature"]: r["count"] for r in paper.read_table(text["count"], "features")}
    matrix = paper.read_model_table(out, "matrix")
    assert len(matrix) == sum(e["links"] for e in expected)
    m = np.array([r["m"] for r in matrix])
    frequency = np.array([r["count"] / feature_count[r["feature"]] for r in matrix])
    np.testing.assert_allclose(m, frequency, rtol=1e-6)
    m_star = np.array([r["m_star"] for r in paper.read_model_table(out, "features")])
    np.testing.assert_allclose(m_star, 1.0, rtol=1e-6)
    # The model's rows are the count's files, not written again.
    for prefix, bucket in itertools.product(("links", "features"), buckets):
        name = tables.bucket_file(prefix, bucket, NUM_BUCKETS)
        assert os.path.samefile(os.path.join(text["count"], name), out / name)


# --- prune.RankHistogram and prune.PruneBucket -----------------------------------------------

def model_tables(model_dir):
    """The whole model's features and matrix, buckets in order, read with pyarrow."""
    return paper.model_table(model_dir, "features"), paper.model_table(model_dir, "matrix")


def mass_source(model_dir):
    with open(os.path.join(model_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    scoring = prune_lib.BucketScoring("mass", manifest["count_totals"]["events"],
                                      (manifest["feature_types"].index("0-gram"),))
    return Source(str(model_dir), manifest["num_buckets"], scoring), manifest


def nonzero(histogram):
    return {digit: int(count) for digit, count in enumerate(histogram) if count}


def test_rank_histograms_of_the_buckets_add_up_to_the_whole_models(ngram_model):
    """Oracle: the ranks of every link of the model at once (one table, not by bucket),
    their digits counted with a Counter."""
    model_dir = str(ngram_model[0])
    source, _ = mass_source(model_dir)
    ranks = source.scoring.ranks(*model_tables(model_dir))[0]
    top = collections.Counter(int(r) >> 48 for r in ranks)
    prefix = top.most_common(1)[0][0]
    second = collections.Counter((int(r) >> 32) & 0xFFFF for r in ranks if int(r) >> 48 == prefix)
    buckets = list(range(source.num_buckets))
    with pipeline() as p:
        for label, level, want, expected in (("Top", 0, 0, top), ("Second", 1, prefix, second)):
            summed = (p | f"{label}Buckets" >> beam.Create(buckets)
                      | f"{label}Histogram" >> beam.ParDo(RankHistogram(source, level, want))
                      | f"{label}Sum" >> beam.CombineGlobally(sum)
                      | f"{label}Plain" >> beam.Map(nonzero))
            assert_that(summed, equal_to([dict(expected)]), label=f"{label}Check")


def test_prune_bucket_keeps_the_links_ranked_at_least_the_threshold(ngram_model, tmp_path):
    """Each bucket keeps its links ranked at the median or above (and the empty feature's),
    its features with any link left, each M_f* the sum of its kept links' M_fw."""
    model_dir = str(ngram_model[0])
    source, manifest = mass_source(model_dir)
    features, matrix = model_tables(model_dir)
    ranks, protected = source.scoring.ranks(features, matrix)
    threshold = int(np.median(ranks))
    kept = (ranks >= np.uint64(threshold)) | protected
    link_keys = matrix["feature"].to_numpy()
    expected, kept_links, start = [], set(), 0
    for bucket in range(source.num_buckets):
        links = pq.read_metadata(os.path.join(model_dir, tables.bucket_file(
            "links", bucket, source.num_buckets))).num_rows
        feature_rows = pq.read_metadata(os.path.join(model_dir, tables.bucket_file(
            "features", bucket, source.num_buckets))).num_rows
        mine = slice(start, start + links)
        expected.append({"bucket": bucket, "links_read": links, "features_read": feature_rows,
                         "links": int(kept[mine].sum()),
                         "features": len(set(link_keys[mine][kept[mine]].tolist()))})
        kept_links.update(zip(link_keys[mine][kept[mine]].tolist(),
                              matrix["word"].to_numpy()[mine][kept[mine]].tolist()))
        start += links
    assert start == matrix.num_rows == manifest["totals"]["links"]
    out = tmp_path / "pruned"
    out.mkdir()
    with pipeline() as p:
        written = (p | beam.Create(list(range(source.num_buckets)))
                   | beam.ParDo(PruneBucket(source, threshold, str(out))))
        assert_that(written, equal_to(expected))
    pruned = paper.read_model_table(out, "matrix")
    assert {(r["feature"], r["word"]) for r in pruned} == kept_links
    mass = collections.defaultdict(float)
    for r in pruned:
        mass[r["feature"]] += r["m"]
    pruned_features = paper.read_model_table(out, "features")
    assert {r["feature"] for r in pruned_features} == set(mass)
    for r in pruned_features:
        assert r["m_star"] == pytest.approx(mass[r["feature"]], rel=1e-9)
