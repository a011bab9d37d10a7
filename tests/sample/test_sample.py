"""``snm sample``: text drawn from a model has the model's probabilities (chi-square against
the scoring path's ``distribution``), for n-gram, skip-gram and tagged models, and the
same seed gives the same shards on any number of threads.  The C loops are the Python
definitions of ``reference_sample`` exactly: the random numbers, the alias tables, the
keys, the draws and the text."""

import collections
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import reference_sample
import scipy.stats
from support.models import SKIP, build_model

from snm.cli import main
from snm_core.io import local_copies, storage
from snm_core.io.arrays import string_buffers
from snm_core.sample import draw as sample_module
from snm_core.sample import sample_loops
from snm_core.scoring.compact import load_model
from snm_core.sample.draw import SampleOptions, Sampler, kernel_tables, sample
from snm_core.sample.rows import ROWS
from snm_core.text.config import parse_config, preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.hashing import SEQUENCE_SEED
from snm_core.text.tokenize import SentenceBatch
from snm_core.text.vocab import BOS_ID, EOS_ID

UNIGRAM = "ngram_extractor { min_n: 0 max_n: 0 }"
UNTIED = ("ngram_extractor { min_n: 0 max_n: 2 }\n"
          "skip_ngram_extractor { max_context_words: 3 max_remote_words: 2 max_skip_length: 3 }")
#: A chi-square p-value below this fails the test (the seeds are fixed: pass or fail
#: is the same on every run).
ALPHA = 1e-3


@pytest.fixture
def ngram_model(ngram_model):
    """The session's pooled 5-gram model (tests/conftest.py): its directory."""
    return ngram_model[0]


@pytest.fixture
def tagged_skip_model(tagged_skip_model):
    """The session's tagged skip-gram model (tests/conftest.py): its directory."""
    return tagged_skip_model[0]


@pytest.fixture(scope="module")
def unigram_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("unigram"), UNIGRAM, tagged=False)[0]


def draw(model_dir, out, words, **options):
    """``(lines of every shard, manifest)`` of a sample."""
    manifest = sample(SampleOptions(model=str(model_dir), words=words, out=str(out), **options))
    lines = []
    for name in manifest["files"]:
        path = os.path.join(out, name)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines += f.read().splitlines()
    return lines, manifest


def next_words(lines, context, empty_sentences):
    """Counts of the word after ``context`` (a sentence prefix), ``</S>`` included."""
    counts = collections.Counter()
    k = len(context)
    for line in lines:
        words = line.split()
        if words[:k] == context:
            counts[words[k] if len(words) > k else "</S>"] += 1
    if k == 0:
        counts["</S>"] += empty_sentences  # not written: empty lines
    return counts


def p_value(counts, model, context, unadjusted=False):
    """Chi-square p-value of ``counts`` against the model's P(. | context); categories
    expected fewer than 5 times are pooled."""
    probs = model.distribution(context, unadjusted=unadjusted)
    words = [model.vocab.word(int(w)) for w in model.scored_words]
    assert set(counts) <= {w for w, p in zip(words, probs) if p > 0}, \
        "sampled a word the model gives no probability"
    observed = np.array([counts.get(w, 0) for w in words], float)
    expected = probs * observed.sum()
    rare = expected < 5
    observed = np.r_[observed[~rare], observed[rare].sum()]
    expected = np.r_[expected[~rare], expected[rare].sum()]
    if expected[-1] < 5:  # pooled still rare: fold it into the smallest other category
        smallest = int(np.argmin(expected[:-1]))
        observed[smallest] += observed[-1]
        expected[smallest] += expected[-1]
        observed, expected = observed[:-1], expected[:-1]
    expected *= observed.sum() / expected.sum()
    return scipy.stats.chisquare(observed, expected).pvalue


def common_prefixes(lines, lengths):
    """The most frequent sentence prefix of each length (chosen from the first words only,
    so the word after it is still an unbiased draw)."""
    chosen = []
    for k in lengths:
        counts = collections.Counter(tuple(line.split()[:k]) for line in lines
                                     if len(line.split()) >= k)
        chosen.append(list(counts.most_common(1)[0][0]))
    return chosen


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_next_word_frequencies_are_the_models_probabilities(which, request, tmp_path):
    model_dir = request.getfixturevalue(which)
    lines, manifest = draw(model_dir, tmp_path / "out", 400_000, seed=7, shards=2)
    model = load_model(str(model_dir))
    for context in common_prefixes(lines, (0, 1, 2, 3)):
        counts = next_words(lines, context, manifest["totals"]["empty_sentences"])
        assert sum(counts.values()) > 400, context
        assert p_value(counts, model, context) > ALPHA, context
        # and it tells the adjusted model from the unadjusted one
        assert p_value(counts, model, context, unadjusted=True) < 1e-6, context


def test_word_frequencies_of_a_unigram_model_are_its_probabilities(unigram_model, tmp_path):
    lines, manifest = draw(unigram_model, tmp_path / "out", 300_000, seed=3, shards=3)
    counts = collections.Counter(w for line in lines for w in line.split())
    totals = manifest["totals"]
    counts["</S>"] = totals["sentences"] + totals["empty_sentences"]
    assert sum(counts.values()) - counts["</S>"] == totals["words"] >= 300_000
    assert p_value(counts, load_model(str(unigram_model)), []) > ALPHA


@pytest.mark.parametrize("config, tags", [
    ("5gram", ("",)), ("skip10gram", ("",)), (SKIP, ("a", "b")), (UNTIED, ("x", "y", "z"))])
def test_history_keys_are_the_feature_extractors(config, tags):
    """Random histories over few words, so that tied skip windows often see the same
    remote words: the C keys are the extractor's keys for the last event, in the order
    of the Python definition (which the draws' choice of a feature depends on)."""
    extractor = FeatureExtractor(preset(config) if "{" not in config else parse_config(config),
                                 tags)
    windows, salts, max_run = kernel_tables(extractor)
    rng = np.random.default_rng(5)
    for _ in range(300):
        words = rng.integers(3, 7, size=rng.integers(0, 16)).astype(np.int32)
        events = extractor.extract(SentenceBatch.from_lists([words]))
        expected = np.sort(events.key[events.event == events.num_events - 1])
        history = np.r_[np.int32(BOS_ID), words].astype(np.int32)
        got = sample_loops.history_keys(history, windows, salts, max_run)
        np.testing.assert_array_equal(np.sort(got), expected)
        assert got.tolist() == reference_sample.event_keys(
            history.tolist(), len(history), windows.tolist(), salts.tolist(),
            int(SEQUENCE_SEED))


def test_alias_tables_give_each_word_its_share_of_the_row():
    rng = np.random.default_rng(2)
    diversity = np.array([1, 5, 3, 200, 2, 1, 7], np.int64)
    m = rng.random(diversity.sum()) ** 4  # some tiny masses
    m[3] = 0.0  # a link without mass
    words = rng.permutation(diversity.sum()).astype(np.int32)
    links, total = sample_loops.alias_rows(m, diversity, words)
    threshold = links.view(np.float64)[0::2]
    own = (links[1::2] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    alias = (links[1::2] >> np.uint64(32)).astype(np.int64)
    start = 0
    for d in diversity:
        row = slice(start, start + d)
        share = collections.defaultdict(float)  # P(word) = sum over buckets / d
        for t, o, a in zip(threshold[row], own[row], alias[row]):
            share[o] += t / d
            share[a] += (1 - t) / d
        for w, mass in zip(words[row], m[row]):
            assert share[w] == pytest.approx(mass / m[row].sum(), abs=1e-12)
        start += d
    np.testing.assert_allclose(total, np.add.reduceat(m, np.r_[0, np.cumsum(diversity)[:-1]]))


def test_random_streams_are_the_reference_generators():
    """xoshiro256** seeded per (seed, stream): the C's words are the definition's."""
    for seed, stream in [(0, 0), (1, 7), (11, 8 * 3 + 5), (2 ** 63 - 1, 2 ** 40 + 3)]:
        state = sample_loops.seed_state(seed, stream)
        expected = reference_sample.seed_state(seed, stream, int(SEQUENCE_SEED))
        assert state.tolist() == expected
        got = sample_loops.uniforms(state, 1000)
        assert got.tolist() == [reference_sample.uniform(expected) for _ in range(1000)]
        assert state.tolist() == expected  # the state after the draws
        assert 0 <= got.min() and got.max() < 1


def test_alias_tables_are_the_reference_construction():
    """Bit for bit: thresholds, words, alias words and totals, rows of one link, of ties,
    without mass, with tiny masses and a long one."""
    rng = np.random.default_rng(8)
    diversity = np.array([1, 5, 3, 200, 2, 4, 1, 7, 0, 6, 1000], np.int64)
    m = rng.random(diversity.sum()) ** 6
    m[3] = 0.0
    m[211:213] = 0.0  # a row without mass
    m[213:217] = 0.25  # ties
    words = rng.permutation(diversity.sum()).astype(np.int32)
    links, total = sample_loops.alias_rows(m, diversity, words)
    thresholds, own, alias, totals = reference_sample.alias_rows(
        m.tolist(), diversity.tolist(), words.tolist())
    assert links[0::2].tolist() == np.array(thresholds, np.float64).view(np.uint64).tolist()
    assert links[1::2].tolist() == [o | a << 32 for o, a in zip(own, alias)]
    assert total.view(np.uint64).tolist() == np.array(totals).view(np.uint64).tolist()


def reference_rows_test(sampler, rows, seed, quota, max_length, chunk):
    """Draw a stream of ``quota`` words by the C loop in calls of ``chunk`` words and by
    the Python definition: the same ids, statistics and states after each call; returns
    the statistics summed."""
    stream = sampler.stream(seed, 1, quota, max_length)
    state = {"rng": stream.rng.tolist(), "history": stream.history.tolist(),
             "position": stream.position.tolist(), "words": stream.words.tolist()}
    reference_rows = reference_sample.Rows(rows.arrays[0], rows.arrays[2])
    totals = np.zeros(len(sample_loops.STATS), np.int64)
    calls = 0
    while not stream.finished:
        out = np.empty(sample_loops.out_length(chunk, max_length), np.int32)
        used, stats, stream.finished = sample_loops.sample_sentences(
            sampler.tables, rows, stream.state, chunk, out)
        expected, expected_stats, finished = reference_sample.sample_sentences(
            state, chunk, quota, max_length, sampler.windows.tolist(), sampler.salts.tolist(),
            int(SEQUENCE_SEED), reference_rows, BOS_ID, EOS_ID)
        assert out[:used].tolist() == expected
        assert stats.tolist() == expected_stats and stream.finished == finished
        assert stream.rng.tolist() == state["rng"] and stream.words.tolist() == state["words"]
        assert stream.position.tolist() == state["position"]
        totals += stats
        calls += 1
    assert calls > 2 and totals[0] >= quota
    return totals


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_draws_are_the_reference_draws(which, request):
    """The C draws, cut into calls, are the Python definition's: with the model's rows,
    with a 64-bit KeyIndex, and with rows some of whose features have no mass (among them
    the empty feature), which skips them and ends some sentences at a dead end; sentences
    cut at max_length, too."""
    sampler = Sampler(str(request.getfixturevalue(which)))
    records, index, shift, links = sampler.rows.parts
    totals = reference_rows_test(sampler, sampler.row_tables, 3, 3000, 1000, 700)
    assert totals[1] > 100 and totals[3] == 0
    wide = sample_loops.Rows.of(records, index.astype(np.int64), shift, links)
    assert reference_rows_test(sampler, wide, 3, 3000, 1000, 700).tolist() == totals.tolist()
    assert reference_rows_test(sampler, wide, 4, 2000, 6, 500)[3] > 50

    windows, salts = sampler.windows.tolist(), sampler.salts.tolist()
    empty = reference_sample.event_keys([], 0, windows, salts, int(SEQUENCE_SEED))
    start = set(reference_sample.event_keys([BOS_ID], 1, windows, salts, int(SEQUENCE_SEED)))
    keys = records[0:-3:3]
    massless = np.random.default_rng(1).random(len(keys)) < 0.85
    massless &= ~np.isin(keys, np.array(sorted(start - set(empty)), np.uint64))
    massless |= np.isin(keys, np.array(empty, np.uint64))
    thinned = records.copy()
    thinned.view(np.float64)[2:-3:3][massless] = 0.0
    rows = sample_loops.Rows.of(thinned, index, shift, links)
    assert reference_rows_test(sampler, rows, 5, 2000, 1000, 300)[4] > 20


def test_text_is_the_reference_text():
    """Words joined by spaces, a line a sentence, multi-byte words and one-word sentences
    among them."""
    vocabulary = ["<S>", "</S>", "<UNK>", "a", "naïve", "日本語", "x" * 300, "b"]
    assert (BOS_ID, EOS_ID) == (0, 1)
    offsets, data = string_buffers(pa.array(vocabulary, pa.large_string()))
    rng = np.random.default_rng(4)
    ids = []
    for _ in range(200):
        ids += rng.integers(2, len(vocabulary), rng.integers(1, 6)).tolist() + [EOS_ID]
    text = sample_loops.render(np.array(ids, np.int32), offsets, data)
    assert text.tobytes() == reference_sample.render(ids, vocabulary, EOS_ID)
    assert sample_loops.render(np.zeros(0, np.int32), offsets, data).tobytes() == b""


def test_sampling_imports_no_numba(ngram_model, tmp_path):
    """``snm sample`` runs in C: a process that only samples pays no numba start (nearly
    a second) or memory."""
    script = ("import sys; from snm.cli import main; "
              "code = main(['sample', '--model', sys.argv[1], '--words', '2000', '--out', "
              "sys.argv[2], '--shards', '2']); print(code, 'numba' in sys.modules)")
    printed = subprocess.run([sys.executable, "-c", script, str(ngram_model),
                              str(tmp_path / "out")], capture_output=True, text=True,
                             check=True).stdout.split()
    assert printed[-2:] == ["0", "False"]
    assert (tmp_path / "out" / "sample-00001-of-00002.txt").stat().st_size > 0


def test_same_seed_same_shards_on_any_thread_count(ngram_model, tmp_path, monkeypatch):
    one, manifest = draw(ngram_model, tmp_path / "one", 30_000, seed=11, shards=3, threads=1)
    two, _ = draw(ngram_model, tmp_path / "two", 30_000, seed=11, shards=3, threads=2)
    monkeypatch.setattr(sample_module, "CHUNK_WORDS", 500)  # cut into many calls
    cut, _ = draw(ngram_model, tmp_path / "cut", 30_000, seed=11, shards=3, threads=2)
    other, _ = draw(ngram_model, tmp_path / "other", 30_000, seed=12, shards=3)
    assert one == two == cut
    assert one != other
    for name in manifest["files"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "cut" / name).read_bytes()


def test_shards_hold_their_share_and_a_rerun_replaces_them(ngram_model, tmp_path):
    out = tmp_path / "out"
    lines, manifest = draw(ngram_model, out, 10_001, seed=1, shards=4)
    assert manifest["files"] == [f"sample-{k:05d}-of-00004.txt" for k in range(4)]
    shares = [2501, 2500, 2500, 2500]
    for name, share, words in zip(manifest["files"], shares, manifest["shard_words"]):
        text = (out / name).read_text(encoding="utf-8")
        assert text.endswith("\n") and "\n\n" not in text and "  " not in text
        assert len(text.split()) == words
        # the share, plus the sentences under way when it was reached (one a lane)
        assert share <= words < share + sample_loops.LANES * 40
    totals = manifest["totals"]
    assert len(lines) == totals["sentences"] and sum(manifest["shard_words"]) == totals["words"]
    zipped, _ = draw(ngram_model, out, 10_001, seed=1, shards=2, gzip=True)
    assert sorted(os.listdir(out)) == ["manifest.json", "sample-00000-of-00002.txt.gz",
                                       "sample-00001-of-00002.txt.gz"]
    plain, _ = draw(ngram_model, tmp_path / "plain", 10_001, seed=1, shards=2)
    assert zipped == plain


def test_tagged_model_samples_its_vocabulary_with_every_tag(tagged_skip_model, tmp_path):
    """A tagged model's event has every feature once per tag, as held-out text does."""
    sampler = Sampler(str(tagged_skip_model))
    assert sampler.salts.shape[0] == 2
    lines, manifest = draw(tagged_skip_model, tmp_path / "out", 5_000, seed=2)
    vocab = set(load_model(str(tagged_skip_model)).vocab.words)
    assert {w for line in lines for w in line.split()} <= vocab - {"<S>", "</S>"}
    assert manifest["tags"] == ["a", "b"] and manifest["totals"]["dead_ends"] == 0


def test_rows_are_built_once_and_again_when_the_model_changes(ngram_model, tmp_path):
    model = tmp_path / "model"  # a copy: the session's model is not edited
    shutil.copytree(ngram_model, model, ignore=shutil.ignore_patterns(ROWS))
    said = []
    Sampler(str(model), said.append)
    Sampler(str(model), said.append)
    assert len(said) == 1 and "building the rows" in said[0]
    manifest_path = model / "manifest.json"
    changed = json.loads(manifest_path.read_bytes())
    changed["note"] = "edited"
    manifest_path.write_text(json.dumps(changed))
    said.clear()
    Sampler(str(model), said.append)
    assert len(said) == 1 and "building the rows" in said[0]


def test_bad_requests_and_ctrl_c_are_one_line(ngram_model, tmp_path, capsys, monkeypatch):
    assert main(["sample", "--model", str(ngram_model), "--words", "-5",
                 "--out", str(tmp_path / "x")]) == 2
    assert main(["sample", "--model", str(tmp_path), "--words", "10",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("snm sample: error: ") for line in err)

    calls = []

    def interrupted(self, ids):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return sample_loops.render(ids, self.word_offsets, self.word_data)

    monkeypatch.setattr(Sampler, "text", interrupted)
    monkeypatch.setattr(sample_module, "CHUNK_WORDS", 100)
    out = tmp_path / "out"
    assert main(["sample", "--model", str(ngram_model), "--words", "100k", "--out", str(out),
                 "--shards", "2"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("snm sample: interrupted; ")
    assert "Traceback" not in err
    assert not [n for n in os.listdir(out) if n.endswith(".tmp") or n == "manifest.json"]


def test_a_model_in_object_storage_samples_into_object_storage(ngram_model, s3, tmp_path,
                                                                monkeypatch):
    """The rows of a remote model are built in the local cache; the shards are written
    to the bucket; the text is the local model's."""
    monkeypatch.setenv("SNM_CACHE", str(tmp_path / "cache"))
    remote = f"{s3}/sample/model"
    local_copies.upload_tree(str(ngram_model), remote)
    manifest = sample(SampleOptions(model=remote, words=5_000, out=f"{s3}/sample/out",
                                    seed=4, shards=2, gzip=True))
    assert os.listdir(tmp_path / "cache")  # the rows
    local, _ = draw(ngram_model, tmp_path / "local", 5_000, seed=4, shards=2)
    remote_lines = []
    for name in manifest["files"]:
        remote_lines += gzip.decompress(
            storage.read_bytes(f"{s3}/sample/out/{name}")).decode("utf-8").splitlines()
    assert remote_lines == local
    assert storage.read_json(f"{s3}/sample/out/manifest.json")["totals"] == manifest["totals"]
