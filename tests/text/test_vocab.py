import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID, Vocabulary, VocabularyError


def test_markers_have_fixed_ids_and_unknown_words_map_to_unk():
    v = Vocabulary(["the", "cat"])
    assert v.words[:3] == ["<S>", "</S>", "<UNK>"]
    assert (v.id("<S>"), v.id("</S>"), v.id("<UNK>")) == (BOS_ID, EOS_ID, UNK_ID)
    assert v.ids(["cat", "dog", "the"]).tolist() == [4, UNK_ID, 3]
    assert v.ids([]).dtype == np.int32


def test_save_load_round_trip_and_files_without_markers(tmp_path):
    v = Vocabulary(["b", "a", "<"])
    v.save(tmp_path / "v.txt")
    assert (tmp_path / "v.txt").read_text().splitlines()[:4] == ["<S>", "</S>", "<UNK>", "b"]
    assert Vocabulary.load(tmp_path / "v.txt") == v
    (tmp_path / "plain.txt").write_text("b\na\n<\n")
    assert Vocabulary.load(tmp_path / "plain.txt") == v


@pytest.mark.parametrize("content, message", [
    ("a\nb\na\n", r"line 3: 'a' repeats line 1"),
    ("a\n\nb\n", r"line 2: empty line"),
    ("a b\n", r"line 1: 'a b' contains whitespace"),
])
def test_bad_vocabulary_files_name_the_line(tmp_path, content, message):
    path = tmp_path / "v.txt"
    path.write_text(content)
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.load(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(VocabularyError, match="vocabulary file not found"):
        Vocabulary.load(tmp_path / "nope.txt")


def test_from_counts_orders_by_count_then_word_and_applies_limits():
    words = ["c", "a", "b", "d", "<S>"]
    counts = [5, 5, 9, 1, 100]
    assert Vocabulary.from_counts(words, counts).words[3:] == ["b", "a", "c", "d"]
    assert Vocabulary.from_counts(words, counts, min_count=2).words[3:] == ["b", "a", "c"]
    assert Vocabulary.from_counts(words, counts, max_size=2).words[3:] == ["b", "a"]
    with pytest.raises(VocabularyError, match="min_count must be at least 1"):
        Vocabulary.from_counts(words, counts, min_count=0)


@given(words=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Cc")),
                              min_size=1, max_size=6), unique=True, max_size=60),
       queries=st.lists(st.text(max_size=6), max_size=80), cut=st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_ids_agree_with_a_plain_dictionary(words, queries, cut):
    """The lookup (a hash table of the vocabulary), on Arrow slices, chunks and nulls, is
    a dictionary lookup."""
    import pyarrow as pa
    vocab = Vocabulary([w for w in words if w not in ("<S>", "</S>", "<UNK>")])
    index = {w: i for i, w in enumerate(vocab.words)}
    mixed = queries + vocab.words[:10]
    expected = [index.get(w, UNK_ID) for w in mixed]
    half = len(mixed) // 2
    assert vocab.ids(mixed).tolist() == expected
    assert vocab.ids(pa.array(["x"] * cut + mixed).slice(cut)).tolist() == expected
    chunked = pa.chunked_array([mixed[:half], [], mixed[half:]], pa.string())
    assert vocab.ids(chunked).tolist() == expected
    assert vocab.ids(pa.array(mixed + [None])).tolist() == expected + [UNK_ID]
