from snm_core.text.tokenize import SentenceBatch, tokenize
from snm_core.text.vocab import UNK_ID, Vocabulary


def test_tokenize_skips_empty_lines_and_counts_oov_and_markers():
    v = Vocabulary(["a", "b"])
    lines = ["a b", "", "   ", "\ta  x\t b ", "<S> a </S> <UNK>", None]
    batch, kept, stats = tokenize(lines, v)
    assert kept.tolist() == [0, 3, 4]
    assert [batch.sentence(i).tolist() for i in range(3)] == [
        [3, 4], [3, UNK_ID, 4], [UNK_ID, 3, UNK_ID, UNK_ID]]
    assert (stats.sentences, stats.tokens, stats.empty_lines, stats.invalid_lines) == (3, 9, 2, 1)
    assert stats.marker_tokens == 2
    assert stats.oov_tokens == 2  # 'x' and the literal <UNK>
    assert batch.num_events == 9 + 3


def test_from_lists_matches_layout():
    batch = SentenceBatch.from_lists([[3, 4], [], [5]])
    assert batch.offsets.tolist() == [0, 2, 2, 3]
    assert batch.num_events == 3 + 3


def test_chunks_split_at_sentence_boundaries():
    batch = SentenceBatch.from_lists([[3, 4], [5], [], [6, 7, 8], [9]])
    chunks = list(batch.chunks(4))
    assert [c.num_events for c in chunks] == [3, 3, 4, 2]
    assert [s.tolist() for c in chunks for s in (c.sentence(i) for i in range(c.num_sentences))] \
        == [[3, 4], [5], [], [6, 7, 8], [9]]
    assert [c.num_events for c in batch.chunks(1)] == [3, 2, 1, 4, 2]
