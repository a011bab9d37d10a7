"""snm count and snm vocab: the counts against the paper's definitions, the fast path against
``--reference`` and Beam's shuffle byte for byte, runners, bad input, ``--add_to``."""

import filecmp
import gzip
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import paper
from support.counts import read_counts, write_lines

from snm.commands import count as count_cmd
from snm.commands import vocab as vocab_cmd
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests
from snm_core.text import synthetic
from snm_core.text.vocab import Vocabulary

SKIP_CONFIG = """
ngram_extractor { min_n: 0 max_n: 2 }
skip_ngram_extractor { max_context_words: 3 max_remote_words: 1 min_skip_length: 1
                       max_skip_length: 4 tie_skip_length: true }
skip_ngram_extractor { max_context_words: 2 max_skip_length: 2 }
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two small sources; the second gzipped and with edge cases (empty lines, markers)."""
    root = tmp_path_factory.mktemp("corpus")
    sentences = synthetic.generate(300, seed=7)
    a = write_lines(str(root / "a" / "part-0.txt"), sentences[:150])
    b_lines = sentences[150:] + ["", "   ", "begin0 <S> odd </S> words unseen", "x"]
    b = str(root / "b" / "part-0.txt.gz")
    os.makedirs(os.path.dirname(b))
    with gzip.open(b, "wt", encoding="utf-8") as f:
        f.write("\n".join(b_lines))  # no final newline
    vocab_path = str(root / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})[:60]).save(vocab_path)
    config_path = str(root / "skip.cfg")
    with open(config_path, "w") as f:
        f.write(SKIP_CONFIG)
    return {"root": root, "a": a, "b": b, "vocab": vocab_path, "skip": config_path}


def run_count(corpus, out, config, sources, *extra):
    argv = ["--config", config, "--vocab", corpus["vocab"], "--out", str(out),
            "--num_buckets", "4"]
    for spec in sources:
        argv += ["--train", spec]
    assert count_cmd.main(argv + list(extra)) == 0
    return manifests.Count.read(str(out))


def sources_and_path(corpus, tagged, path):
    """``(--train specs, the paper count's sources, flags)`` of the two sources, tagged
    or pooled, counted by the fast path (flushing often) or ``--reference``."""
    root = str(corpus["root"])
    if tagged:
        specs = [f"man={root}/a/*.txt", f"web={root}/b/*"]
        sources = [("man", [corpus["a"]]), ("web", [corpus["b"]])]
    else:
        specs = [f"{root}/*/part-0*"]
        sources = [("", [corpus["a"], corpus["b"]])]
    return specs, sources, ["--flush_links", "500"] if path == "fast" else ["--reference"]


@pytest.mark.parametrize("config_name, tagged, path", [
    ("5gram", False, "fast"), ("5gram", True, "fast"), ("skip", False, "fast"),
    ("skip", True, "fast"), ("skip", True, "reference")])
def test_counts_are_the_paper_definitions(corpus, tmp_path, config_name, tagged, path):
    """C(f,w), C(f,*), the diversity, N1+(. f w) and the totals are those of every
    feature of every event counted by its words in plain Python (tests/support/paper.py),
    compared through the features' words, not their keys; the fast path flushes several
    times, ``--reference`` counts one element per occurrence."""
    config = corpus["skip"] if config_name == "skip" else "5gram"
    config_text = SKIP_CONFIG if config_name == "skip" else paper.APPENDIX_A
    specs, sources, extra = sources_and_path(corpus, tagged, path)
    run_count(corpus, tmp_path / "counts", config, specs, *extra)
    features, links, totals = paper.read_count_directory(tmp_path / "counts")
    expected_features, expected_links, expected_totals = paper.brute_force_count(
        config_text, sources, paper.vocabulary_words(corpus["vocab"]))
    assert features == expected_features
    assert links == expected_links
    assert {name: totals[name] for name in expected_totals} == expected_totals
    assert (totals["sentences"], totals["empty_lines"], totals["marker_tokens"]) == (302, 2, 2)


def test_feature_table_sums_and_diversity(corpus, tmp_path):
    run_count(corpus, tmp_path / "c", "5gram", [corpus["a"]])
    links, features, manifest = read_counts(tmp_path / "c")
    by_feature = {}
    for row in links.to_pylist():
        total, n = by_feature.get(row["feature"], (0, 0))
        by_feature[row["feature"]] = (total + row["count"], n + 1)
    assert {r["feature"]: (r["count"], r["diversity"]) for r in features.to_pylist()} == by_feature
    # Files in bucket order form one table sorted by (feature, word).
    keys = links["feature"].to_numpy()
    assert np.all(keys[1:] >= keys[:-1])
    empty = features.filter(features["type"].to_numpy() == 0)
    assert empty.num_rows == 1 and empty["count"][0].as_py() == manifest["totals"]["events"]


def test_fast_path_equals_combine_per_key_reference(corpus, tmp_path):
    specs = [f"man={corpus['a']}", f"web={corpus['b']}"]
    run_count(corpus, tmp_path / "fast", corpus["skip"], specs, "--flush_links", "300")
    run_count(corpus, tmp_path / "ref", corpus["skip"], specs, "--reference")
    run_count(corpus, tmp_path / "beam", corpus["skip"], specs, "--shuffle", "beam")
    for other in ("ref", "beam"):
        assert_same_files(tmp_path / "fast", tmp_path / other)


def assert_same_files(a, b):
    names = sorted(n for n in os.listdir(a) if n.endswith((".parquet", ".json", ".txt")))
    assert names == sorted(n for n in os.listdir(b) if n.endswith((".parquet", ".json", ".txt")))
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert not mismatch and not errors, f"differ: {mismatch} {errors}"


def test_in_memory_and_two_process_runs_are_byte_identical(corpus, tmp_path):
    specs = [f"man={corpus['a']}", f"web={corpus['b']}"]
    run_count(corpus, tmp_path / "one", "5gram", specs)
    run_count(corpus, tmp_path / "two", "5gram", specs, "--direct_running_mode=multi_processing",
              "--direct_num_workers=2")
    assert_same_files(tmp_path / "one", tmp_path / "two")
    assert not os.path.exists(tmp_path / "two" / "_scratch")


def test_bad_input(corpus, tmp_path):
    bad = str(tmp_path / "bad.txt")
    with open(bad, "wb") as f:
        f.write(b"begin0 the noun0\n\xff\xfe broken line\n\nthe noun1 verb0\n")
    empty = str(tmp_path / "empty.txt")
    open(empty, "w").close()
    # 1 line of 4 that does not decode: skipped and counted with --skip_invalid only.
    manifest = run_count(corpus, tmp_path / "c", "5gram", [str(tmp_path / "*.txt")],
                         "--skip_invalid")
    totals = manifest["totals"]
    assert (totals["sentences"], totals["invalid_lines"], totals["empty_lines"]) == (2, 1, 1)
    with pytest.raises(SnmInputError, match=f"^{bad}, line 2: not valid UTF-8"):
        run_count(corpus, tmp_path / "c2", "5gram", [str(tmp_path / "*.txt")])
    assert not (tmp_path / "c2" / "manifest.json").exists()
    with pytest.raises(SnmInputError, match="matches no file"):
        run_count(corpus, tmp_path / "d", "5gram", [str(tmp_path / "nothing-*.txt")])
    with pytest.raises(SnmInputError, match="give every --train source a tag"):
        run_count(corpus, tmp_path / "d", "5gram", [corpus["a"], f"web={corpus['b']}"])
    with pytest.raises(SnmInputError, match="matched by two --train patterns"):
        run_count(corpus, tmp_path / "d", "5gram", [corpus["a"], str(corpus["root"] / "a/*")])
    # Only empty text: refused before anything is counted or written.
    with pytest.raises(SnmInputError, match="no words"):
        run_count(corpus, tmp_path / "e", "5gram", [empty])
    assert not (tmp_path / "e" / "manifest.json").exists()


def test_vocab_stage_counts_words(corpus, tmp_path):
    assert vocab_cmd.main(["--train", f"{corpus['root']}/*/part-0*",
                           "--out", str(tmp_path / "v"), "--min_count", "3"]) == 0
    manifest = manifests.Vocab.read(str(tmp_path / "v"))
    counts = pq.read_table(tmp_path / "v" / "word_counts.parquet").to_pylist()
    expected = {}
    for path, opener in ((corpus["a"], open), (corpus["b"], gzip.open)):
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                for w in line.split():
                    expected[w] = expected.get(w, 0) + 1
    assert {r["word"]: r["count"] for r in counts} == expected
    assert [r["count"] for r in counts] == sorted((r["count"] for r in counts), reverse=True)
    vocab = Vocabulary.load(tmp_path / "v" / "vocab.txt")
    assert set(vocab.words[3:]) == {w for w, c in expected.items() if c >= 3} - {"<S>", "</S>"}
    assert manifest["vocabulary_size"] == len(vocab)
    assert manifests.Vocab.read(str(tmp_path / "v"))["min_count"] == 3


@pytest.mark.parametrize("tagged", [False, True])
def test_adding_shards_equals_counting_everything_at_once(corpus, tmp_path, tagged):
    root = corpus["root"]
    extra = write_lines(str(root / "c" / f"more-{tagged}.txt"),
                        synthetic.generate(80, seed=8) + ["begin3 new words"])
    old = [f"man={corpus['a']}"] if tagged else [corpus["a"]]
    new = [f"web={corpus['b']}", f"man={extra}"] if tagged else [corpus["b"], extra]
    run_count(corpus, tmp_path / "all", corpus["skip"], old + new)
    run_count(corpus, tmp_path / "old", corpus["skip"], old)
    assert count_cmd.main(["--config", corpus["skip"], "--add_to", str(tmp_path / "old"),
                           "--out", str(tmp_path / "added")]
                          + sum((["--train", spec] for spec in new), [])) == 0
    added = manifests.Count.read(str(tmp_path / "added"))
    names = [n for n in os.listdir(tmp_path / "all") if n.endswith((".parquet", ".txt"))]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "all", tmp_path / "added", names,
                                               shallow=False)
    assert not mismatch and not errors
    everything = manifests.Count.read(str(tmp_path / "all"))
    assert added["totals"] == everything["totals"]
    assert added["tags"] == everything["tags"]
    with pytest.raises(SnmInputError, match="--config differs"):
        count_cmd.main(["--config", "5gram", "--add_to", str(tmp_path / "old"),
                        "--out", str(tmp_path / "x"), "--train", corpus["b"]])
    # Workers read the vocabulary from the count directory, so an edited one is refused.
    with open(tmp_path / "old" / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("an-added-word\n")
    with pytest.raises(SnmInputError, match="vocab.txt does not match its manifest"):
        count_cmd.main(["--config", corpus["skip"], "--add_to", str(tmp_path / "old"),
                        "--out", str(tmp_path / "y"), "--train", corpus["b"]])


THRESHOLDS = ["--min_feature_count", "2", "--min_feature_count", "skip=3"]
#: What THRESHOLDS mean for SKIP_CONFIG's types: every type with words 2, skip-grams 3.
THRESHOLD_TYPES = {"1-gram": 2, "2-gram": 2, "skip(r=1,s=*,a=0)": 3, "skip(r=1,s=*,a=1)": 3,
                   "skip(r=1,s=*,a=2)": 3, "skip(r=1,s=1,a=0)": 3, "skip(r=1,s=1,a=1)": 3,
                   "skip(r=1,s=2,a=0)": 3, "skip(r=1,s=2,a=1)": 3, "skip(r=2,s=1,a=0)": 3,
                   "skip(r=2,s=2,a=0)": 3}


@pytest.mark.parametrize("tagged, path", [(False, "fast"), (True, "fast"), (True, "reference")])
def test_feature_thresholds_are_the_paper_definitions(corpus, tmp_path, tagged, path):
    """With --min_feature_count, the features seen fewer times than their type's threshold
    are gone with their links, every kept count is the whole text's, and continuation
    counts count the kept extensions: the plain-Python count with the same rule."""
    specs, sources, extra = sources_and_path(corpus, tagged, path)
    manifest = run_count(corpus, tmp_path / "counts", corpus["skip"], specs, *extra, *THRESHOLDS)
    assert manifest.min_feature_count == THRESHOLD_TYPES
    features, links, totals = paper.read_count_directory(tmp_path / "counts")
    expected_features, expected_links, expected_totals = paper.brute_force_count(
        SKIP_CONFIG, sources, paper.vocabulary_words(corpus["vocab"]), THRESHOLD_TYPES)
    assert expected_totals["below_threshold_occurrences"] > 0  # the test leaves some out
    assert features == expected_features
    assert links == expected_links
    assert {name: totals[name] for name in expected_totals} == expected_totals


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_link_thresholds_are_the_paper_definitions(corpus, tmp_path, path):
    """With --min_link_count too, the links seen fewer times than their type's threshold
    are gone, a kept feature keeps its C(f,*) and counts its kept links as its diversity,
    and a feature left without links goes."""
    specs = [f"man={corpus['a']}", f"web={corpus['b']}"]
    sources = [("man", [corpus["a"]]), ("web", [corpus["b"]])]
    link_types = {name: 2 for name in THRESHOLD_TYPES}
    extra = ["--flush_links", "500"] if path == "fast" else ["--reference"]
    manifest = run_count(corpus, tmp_path / "counts", corpus["skip"], specs, *extra,
                         "--min_feature_count", "skip=3", "--min_link_count", "2")
    assert manifest.min_link_count == link_types
    features, links, totals = paper.read_count_directory(tmp_path / "counts")
    expected_features, expected_links, expected_totals = paper.brute_force_count(
        SKIP_CONFIG, sources, paper.vocabulary_words(corpus["vocab"]),
        {name: 3 for name in THRESHOLD_TYPES if name.startswith("skip")}, link_types)
    assert any(count > diversity_sum for count, diversity_sum in (
        (c, sum(n for (f, _), (n, _) in expected_links.items() if f == identity))
        for identity, (c, _) in expected_features.items()))  # some C(f,*) kept whole
    assert features == expected_features
    assert links == expected_links
    assert {name: totals[name] for name in expected_totals} == expected_totals


def test_feature_thresholds_refused(corpus, tmp_path):
    """Thresholds a count cannot keep are refused before counting, in one line each; a
    count that left features out is not added to."""
    def count(*flags, config=corpus["skip"], out="x"):
        return run_count(corpus, tmp_path / out, config, [corpus["a"]], *flags)

    for flags, message in [
            (["0"], "at least 1"), (["skip=two"], "at least 1"),
            (["0-gram=2"], "always kept"), (["7-gram=2"], "no feature type '7-gram'"),
            (["1-gram=3"], "2-gram has threshold 1, below the 3 of 1-gram")]:
        with pytest.raises(SnmInputError, match=message):
            count(*sum((["--min_feature_count", f] for f in flags), []))
    assert not os.path.exists(tmp_path / "x" / "manifest.json")
    count("--min_feature_count", "ngram=2", config="5gram", out="old")
    with pytest.raises(SnmInputError, match="cannot be added to"):
        count_cmd.main(["--config", "5gram", "--add_to", str(tmp_path / "old"),
                        "--out", str(tmp_path / "y"), "--train", corpus["b"]])


def test_thresholds_on_added_text_equal_thresholds_on_all_text(corpus, tmp_path):
    """--add_to onto a count that kept everything, with thresholds: the thresholds apply to
    the sums, as if all the text had been counted at once."""
    run_count(corpus, tmp_path / "all", corpus["skip"], [corpus["a"], corpus["b"]],
              *THRESHOLDS)
    run_count(corpus, tmp_path / "old", corpus["skip"], [corpus["a"]])
    assert count_cmd.main(["--config", corpus["skip"], "--add_to", str(tmp_path / "old"),
                           "--out", str(tmp_path / "added"), "--train", corpus["b"],
                           *THRESHOLDS]) == 0
    names = [n for n in os.listdir(tmp_path / "all") if n.endswith(".parquet")]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "all", tmp_path / "added", names,
                                               shallow=False)
    assert not mismatch and not errors


def test_readers_per_file_do_not_change_the_count(corpus, tmp_path, monkeypatch):
    """Each file is read by as many readers as the runner has workers (2 here); one
    reader per file (a cluster runner without --num_workers) counts the same bytes."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import runners
    assert runners.parallelism(PipelineOptions(["--runner=FnApiRunner",
                                                "--direct_num_workers=2"])) == 2
    assert runners.parallelism(PipelineOptions(["--runner=DataflowRunner"])) == 1
    assert runners.parallelism(PipelineOptions(["--runner=DataflowRunner",
                                                "--max_num_workers=5"])) == 5
    specs = [f"man={corpus['a']}", f"web={corpus['b']}"]
    extra = ("--direct_running_mode=multi_threading", "--direct_num_workers=2", "--batch_bytes",
             "2000")
    run_count(corpus, tmp_path / "two", "5gram", specs, *extra)
    monkeypatch.setattr(runners, "parallelism", lambda options: 1)
    run_count(corpus, tmp_path / "one", "5gram", specs, *extra)
    assert_same_files(tmp_path / "two", tmp_path / "one")


def test_damaged_gzip_is_an_error_naming_the_file(corpus, tmp_path):
    whole = gzip.compress("".join(f"begin0 the noun{i % 7}\n" for i in range(20000)).encode())
    truncated = tmp_path / "cut.txt.gz"
    truncated.write_bytes(whole[:len(whole) // 2])
    not_gzip = tmp_path / "plain.txt.gz"
    not_gzip.write_bytes(b"the noun0\n")
    for path in (truncated, not_gzip):
        with pytest.raises(SnmInputError, match=f"{path.name}: cannot decompress it"):
            run_count(corpus, tmp_path / "c", "5gram", [str(path)])
