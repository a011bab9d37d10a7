"""The ARPA text's assembly loop, compiled (numba, no GIL): lines from strings already
formatted.  pyarrow's element-wise string joins took ~0.7 us a 5-gram line, more than
half of an export's time; this loop takes ~0.17 us."""

import numba

TAB, SPACE, NEWLINE = 9, 32, 10


@numba.njit(nogil=True, cache=True)
def assemble_lines(words, vocab, vocab_start, prob, prob_start, backoff_ids, backoff,
                   backoff_start, out):
    """Write line i = ``prob[i] TAB words[i] joined by SPACE [TAB backoff] NEWLINE`` into
    ``out`` (uint8, exactly the lines' size); returns the bytes written.

    ``vocab``/``vocab_start``: the words' UTF-8 bytes and offsets (word w is
    ``vocab[vocab_start[w]:vocab_start[w + 1]]``), likewise ``prob`` (line i's) and
    ``backoff`` (string ``backoff_ids[i]``'s; ``backoff_ids`` empty: no back-off
    column)."""
    pos = 0
    lines, n = words.shape
    with_backoff = len(backoff_ids) > 0
    for i in range(lines):
        for b in range(prob_start[i], prob_start[i + 1]):
            out[pos] = prob[b]
            pos += 1
        out[pos] = TAB
        pos += 1
        for j in range(n):
            w = words[i, j]
            for b in range(vocab_start[w], vocab_start[w + 1]):
                out[pos] = vocab[b]
                pos += 1
            out[pos] = SPACE if j < n - 1 else (TAB if with_backoff else NEWLINE)
            pos += 1
        if with_backoff:
            s = backoff_ids[i]
            for b in range(backoff_start[s], backoff_start[s + 1]):
                out[pos] = backoff[b]
                pos += 1
            out[pos] = NEWLINE
            pos += 1
    return pos
