"""``snm sample``: text drawn from a model has the model's probabilities (chi-square against
the scoring path's ``distribution``), for n-gram, skip-gram and tagged models, and the
same seed gives the same shards on any number of threads."""

import collections
import gzip
import json
import os
import shutil

import numpy as np
import pytest
import scipy.stats
from support.models import SKIP, build_model

from snm.cli import main
from snm_core.io import storage
from snm_core.sample import draw as sample_module
from snm_core.sample import kernels as sample_kernels
from snm_core.scoring.compact import load_model
from snm_core.sample.draw import SampleOptions, Sampler, kernel_tables, sample
from snm_core.sample.rows import ROWS
from snm_core.text.config import parse_config, preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import SentenceBatch

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
    remote words: the compiled keys are the extractor's keys for the last event."""
    extractor = FeatureExtractor(preset(config) if "{" not in config else parse_config(config),
                                 tags)
    windows, salts, max_run = kernel_tables(extractor)
    rng = np.random.default_rng(5)
    for _ in range(300):
        words = rng.integers(3, 7, size=rng.integers(0, 16)).astype(np.int32)
        events = extractor.extract(SentenceBatch.from_lists([words]))
        expected = np.sort(events.key[events.event == events.num_events - 1])
        got = sample_kernels.history_keys(np.r_[np.int32(0), words].astype(np.int32),
                                          windows, salts, max_run)
        np.testing.assert_array_equal(np.sort(got), expected)


def test_alias_tables_give_each_word_its_share_of_the_row():
    rng = np.random.default_rng(2)
    diversity = np.array([1, 5, 3, 200, 2, 1, 7], np.int64)
    m = rng.random(diversity.sum()) ** 4  # some tiny masses
    m[3] = 0.0  # a link without mass
    words = rng.permutation(diversity.sum()).astype(np.int32)
    links, total = sample_kernels.alias_rows(m, diversity, words)
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
        assert share <= words < share + sample_kernels.LANES * 40
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
        return sample_kernels.render(ids, self.word_offsets, self.word_data)

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
    storage.upload_tree(str(ngram_model), remote)
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
