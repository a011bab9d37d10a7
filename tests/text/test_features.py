import collections
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import paper

from snm_core.text.config import parse_config, preset
from snm_core.text.features import FeatureExtractor, render_feature
from snm_core.text.tokenize import SentenceBatch, tokenize
from snm_core.text.vocab import BOS_ID, EOS_ID, Vocabulary

FOX = "The quick brown fox jumps over the lazy dog"


def features_by_target(config_text, sentence, tags=("",)):
    vocab = Vocabulary(sorted(set(sentence.split())))
    extractor = FeatureExtractor(parse_config(config_text), tags)
    batch, _, _ = tokenize([sentence], vocab)
    ev = extractor.extract(batch)
    words = ev.context_words()
    out = collections.defaultdict(list)
    for p in range(ev.num_pairs):
        target = vocab.word(ev.target[ev.event[p]])
        out[target].append(extractor.render(ev.type[p], words[p], vocab))
    return out


def test_paper_example_skip_gram():
    cfg = ("skip_ngram_extractor { max_context_words: 4 min_context_words: 4 "
           "min_remote_words: 1 max_remote_words: 1 min_skip_length: 2 max_skip_length: 2 }")
    # (r, s, a) = (1, 2, 3) is the only window these bounds allow.
    assert features_by_target(cfg, FOX)["dog"] == ["[brown skip-2 over the lazy]"]


def test_paper_example_tied_skip_gram():
    cfg = ("skip_ngram_extractor { max_context_words: 3 min_context_words: 3 "
           "max_remote_words: 1 min_skip_length: 1 max_skip_length: 5 tie_skip_length: true }")
    feats = features_by_target(cfg, "curiosity killed the cat")
    # For </S>: remote word 'curiosity'... only reachable with s = 1 and a = 2 ('the cat').
    assert "[curiosity skip-* the cat]" in feats["</S>"]
    assert all("skip-*" in f for fs in feats.values() for f in fs)


def test_ngram_features_of_the_paper_sentence():
    feats = features_by_target("ngram_extractor { min_n: 0 max_n: 4 }", FOX)
    assert feats["The"] == ["[]", "[<S>]"]
    assert feats["dog"] == ["[]", "[lazy]", "[the lazy]", "[over the lazy]",
                            "[jumps over the lazy]"]
    assert feats["</S>"][-1] == "[over the lazy dog]"


def test_tags_prefix_the_rendering_and_give_distinct_keys():
    vocab = Vocabulary(["a", "b"])
    ex = FeatureExtractor(preset("5gram"), tags=("web", "news"))
    batch = SentenceBatch.from_lists([[3, 4]])
    both = ex.extract(batch)
    web = ex.extract(batch, tags=[0])
    assert both.num_pairs == 2 * web.num_pairs
    assert len(set(both.key.tolist())) == 2 * len(set(web.key.tolist()))
    assert ex.render(both.type[-1], both.context_words([both.num_pairs - 1])[0], vocab) \
        == "news:[<S> a b]"
    assert np.array_equal(both.key[:web.num_pairs], web.key)


# --- brute force -------------------------------------------------------------------

def brute_force(config_text, sentences):
    """Per event, the set of (type name, words) the configuration defines, by the paper's
    definitions (tests/support/paper.py)."""
    shapes = paper.feature_shapes(config_text)
    return [(target, {(paper.type_name(kind), words)
                      for kind, words in paper.event_features(context, shapes)})
            for sentence in sentences
            for context, target in paper.sentence_events(sentence, BOS_ID, EOS_ID)]


def vectorised(config, sentences):
    ex = FeatureExtractor(config)
    ev = ex.extract(SentenceBatch.from_lists(sentences))
    words = ev.context_words()
    got = [(int(t), []) for t in ev.target]
    key_of = {}
    for p in range(ev.num_pairs):
        _, ftype = ex.type_of(ev.type[p])
        identity = (ftype.name, tuple(int(w) for w in words[p] if w >= 0))
        got[ev.event[p]][1].append(identity)
        # The key is a function of the identity, and distinct identities get distinct keys.
        assert key_of.setdefault(identity, int(ev.key[p])) == int(ev.key[p])
    assert len(set(key_of.values())) == len(key_of)
    return got


@st.composite
def configs(draw):
    blocks = []
    if draw(st.booleans()):
        lo = draw(st.integers(0, 3))
        blocks.append(f"ngram_extractor {{ min_n: {lo} max_n: {draw(st.integers(lo, 5))} }}")
    for _ in range(draw(st.integers(0 if blocks else 1, 2))):
        max_ctx = draw(st.integers(1, 4))
        min_r = draw(st.integers(1, max_ctx))
        max_r = draw(st.integers(min_r, max_ctx))
        max_a = draw(st.integers(0, max_ctx - min_r))
        min_s = draw(st.integers(1, 3))
        max_s = draw(st.integers(min_s, 5))
        tie = draw(st.booleans())
        blocks.append(
            f"skip_ngram_extractor {{ max_context_words: {max_ctx} min_remote_words: {min_r} "
            f"max_remote_words: {max_r} max_adjacent_words: {max_a} min_skip_length: {min_s} "
            f"max_skip_length: {max_s} tie_skip_length: {str(tie).lower()} }}")
    return "\n".join(blocks)


# A tiny vocabulary makes repeated words, hence tied skip-grams seen twice in one event.
sentences_strategy = st.lists(st.lists(st.integers(3, 6), max_size=12), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(configs(), sentences_strategy)
def test_vectorised_extraction_equals_brute_force(config, sentences):
    expected = brute_force(config, sentences)
    got = vectorised(parse_config(config), sentences)
    assert [t for t, _ in got] == [t for t, _ in expected]
    for (_, feats), (_, want) in zip(got, expected):
        assert len(feats) == len(set(feats)), "an event carries a feature twice"
        assert set(feats) == want


def test_no_feature_reaches_into_the_previous_sentence():
    # Sentence 2 is short: any window longer than its context would read sentence 1.
    sentences = [[3, 4, 5, 6, 7, 8], [9]]
    ex = FeatureExtractor(preset("skip10gram"))
    ev = ex.extract(SentenceBatch.from_lists(sentences))
    second = ev.sentence[ev.event] == 1
    words = ev.context_words(np.flatnonzero(second))
    assert set(words.ravel().tolist()) <= {-1, BOS_ID, 9}


def test_every_event_has_the_empty_feature():
    ex = FeatureExtractor(preset("skip5gram"))
    ev = ex.extract(SentenceBatch.from_lists([[3, 4, 5], [], [6]]))
    empty = ev.type == 0
    assert np.array_equal(np.sort(ev.event[empty]), np.arange(ev.num_events))
    assert len(set(ev.key[empty].tolist())) == 1


KEY_SCRIPT = """
import sys
from snm_core.text.config import preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import SentenceBatch
ev = FeatureExtractor(preset('skip10gram'), tags=('a', 'b')).extract(
    SentenceBatch.from_lists([[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]]))
print(','.join(str(k) for k in ev.key.tolist()))
"""


def test_keys_are_stable_across_processes():
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", KEY_SCRIPT], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
        runs.append(out)
    assert runs[0] == runs[1]
    ev = FeatureExtractor(preset("skip10gram"), tags=("a", "b")).extract(
        SentenceBatch.from_lists([list(range(3, 18))]))
    assert runs[0] == ",".join(str(k) for k in ev.key.tolist())


def test_keys_are_pinned():
    """Keys are stored in every count table: a change must be deliberate (and bump formats)."""
    for tags, expected in (
            (("",), ["0x5227699ec494c5e8", "0x565396bafe9b1b7d", "0xf46162b9808618a0",
                     "0xf080560e90148697"]),
            (("man",), ["0x458cc3576aafce9d", "0x10cf3f6157468762", "0x6f87f972c66bb056",
                        "0x270a681b077ee23f"])):
        ev = FeatureExtractor(preset("5gram"), tags).extract(SentenceBatch.from_lists([[3, 4]]))
        last = ev.event == 2  # </S> after <S> 3 4: features [], [4], [3 4], [<S> 3 4]
        assert ev.type[last].tolist() == [0, 1, 2, 3]
        assert [hex(k) for k in ev.key[last].tolist()] == expected


def test_render_feature_checks_word_count():
    from snm_core.text.config import FeatureType
    vocab = Vocabulary(["a"])
    with pytest.raises(ValueError, match="has 2 words"):
        render_feature(FeatureType("ngram", 0, 0, 2), [3], vocab)


def test_keys_for_words_equal_extracted_keys():
    ex = FeatureExtractor(preset("skip5gram"), tags=("a", "b"))
    ev = ex.extract(SentenceBatch.from_lists([[3, 4, 5, 6, 7, 3, 4], [8, 9]]))
    words = ev.context_words()
    for type_id in np.unique(ev.type):
        pairs = np.flatnonzero(ev.type == type_id)
        _, ftype = ex.type_of(type_id)
        got = ex.keys_for(type_id, words[pairs, :ftype.num_words])
        assert np.array_equal(got, ev.key[pairs])


@pytest.mark.parametrize("tags", [None, [1]])
def test_extraction_by_type_yields_the_same_pairs_one_type_at_a_time(tags):
    ex = FeatureExtractor(preset("skip10gram"), tags=("a", "b"))
    batch = SentenceBatch.from_lists([[3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8, 9, 10], [], [8, 9]])
    whole = ex.extract(batch, tags=tags)

    def pairs(ev):
        words = ev.context_words()
        return sorted(zip(ev.event.tolist(), ev.key.tolist(), ev.type.tolist(),
                          map(tuple, words.tolist())))

    groups = list(ex.extract_by_type(batch, tags=tags))
    assert len(groups) == len(np.unique(whole.type % len(ex.feature_types)))
    for ev in groups:
        assert len(np.unique(ev.type % len(ex.feature_types))) == 1
        assert np.array_equal(ev.target, whole.target)
    assert sorted(p for ev in groups for p in pairs(ev)) == pairs(whole)


def test_context_words_are_each_windows_words_before_the_target():
    # The oracle: each sentence padded with <S> and </S> in plain lists; an (r, s, a)
    # window at target t holds the r words ending s + a before t, then the a before t.
    rng = np.random.default_rng(3)
    sentences = [rng.integers(3, 40, n).tolist() for n in (0, 1, 4, 12, 25, 3)]
    ex = FeatureExtractor(preset("skip10gram"))
    ev = ex.extract(SentenceBatch.from_lists(sentences))
    padded = [[BOS_ID] + s + [EOS_ID] for s in sentences]
    starts = np.cumsum([0] + [len(s) for s in padded])
    sequence = [w for s in padded for w in s]
    events = [i for s, first in zip(padded, starts) for i in range(first + 1, first + len(s))]
    expected = []
    for p in range(ev.num_pairs):
        _, r, s, a = ex.generators[ev.generator[p]]
        t = events[ev.event[p]]
        row = sequence[t - a - s - r:t - a - s] + sequence[t - a:t]
        expected.append(row + [-1] * (ex.max_words - len(row)))
    assert ev.context_words().tolist() == expected
    some = rng.choice(ev.num_pairs, 50, replace=False)
    assert ev.context_words(some).tolist() == [expected[p] for p in some]
    one_type = np.flatnonzero(ev.type == ev.type[-1])
    narrow = ev.context_words(one_type, narrow=True)
    width = ex.feature_types[ev.type[-1] % len(ex.feature_types)].num_words
    assert narrow.tolist() == [expected[p][:width] for p in one_type]
    with pytest.raises(IndexError, match="out of range"):
        ev.context_words([0, ev.num_pairs])
