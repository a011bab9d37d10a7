"""The definitions of ``snm sample``'s loops in plain Python, which the tests hold the C
loops (``snm_core/sample/sample_loops.c``) to exactly: the random numbers, the rows' alias
tables, a history's keys, the lanes' draws and the text.  Python's integers and
floats (IEEE float64, one rounding an operation) give the C's bits, so the same seed
gives the same text; nothing here calls the C.

The draws read the rows as :class:`snm_core.sample.rows.ModelRows` stores them, but
find a feature's record through a dictionary, not the KeyIndex.
"""

MASK = 2 ** 64 - 1
GOLDEN = 0x9E3779B97F4A7C15
#: Sentences of a stream drawn side by side.
LANES = 8


def mix64(x):
    """murmur3 fmix64 on a Python integer."""
    x ^= x >> 33
    x = x * 0xFF51AFD7ED558CCD & MASK
    x ^= x >> 33
    x = x * 0xC4CEB9FE1A85EC53 & MASK
    return x ^ x >> 33


def combine(h, value):
    """``value`` (in [0, 2^64)) folded into the running hash ``h``."""
    return mix64(h ^ ((value + 1) & MASK) * GOLDEN & MASK)


# --- random numbers -----------------------------------------------------------------------------

def seed_state(seed, stream, sequence_seed):
    """xoshiro256** state (4 integers) of stream ``stream`` of ``seed``: Weyl steps from
    combine(combine(sequence_seed, seed), stream) through fmix64 (splitmix64's scheme)."""
    x = combine(combine(sequence_seed, seed), stream)
    state = []
    for _ in range(4):
        x = (x + GOLDEN) & MASK
        state.append(mix64(x))
    return state


def _rotl(x, k):
    return (x << k | x >> (64 - k)) & MASK


def next_word(s):
    """The next uint64 of xoshiro256** (Blackman and Vigna); ``s`` changed in place."""
    result = _rotl(s[1] * 5 & MASK, 7) * 9 & MASK
    t = s[1] << 17 & MASK
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


def uniform(s):
    """A float uniform on [0, 1): the top 53 bits of the next word."""
    return (next_word(s) >> 11) * 2.0 ** -53


# --- rows ---------------------------------------------------------------------------------------

def alias_rows(m, diversity, words):
    """Each row's alias table (Walker's method, Vose's construction): ``(thresholds, own,
    alias, totals)``, lists; per link its threshold, its word and its alias word.

    Every link starts as its own word with threshold 1; its scaled mass m_k d / sum(m)
    (1 in a row without mass) puts it on the small stack (below 1) or the large one, in
    link order; then, while both hold links, the small stack's top s takes the large
    stack's top g as alias, with threshold scaled[s], and g keeps (scaled[g] +
    scaled[s]) - 1, moving to the small stack when that is below 1."""
    thresholds, own, alias, totals = [], [], [], []
    first = 0
    for d in diversity:
        row_m, row_w = m[first:first + d], words[first:first + d]
        mass = 0.0
        for v in row_m:
            mass += v
        totals.append(mass)
        scaled = [v * d / mass if mass > 0 else 1.0 for v in row_m]
        threshold, partner = [1.0] * d, list(row_w)
        small = [k for k in range(d) if scaled[k] < 1.0]
        large = [k for k in range(d) if not scaled[k] < 1.0]
        while small and large:
            s, g = small.pop(), large[-1]
            threshold[s], partner[s] = scaled[s], row_w[g]
            scaled[g] = (scaled[g] + scaled[s]) - 1.0
            if scaled[g] < 1.0:
                small.append(large.pop())
        thresholds += threshold
        own += list(row_w)
        alias += partner
        first += d
    return thresholds, own, alias, totals


# --- a history's keys ---------------------------------------------------------------------------

def event_keys(history, j, windows, salts, sequence_seed):
    """Keys of the event whose target is at position ``j`` of ``history`` (``<S>`` at 0),
    in the draws' order: window by window (``windows`` rows of type index, r, s, a and
    the first window of the type), the tags of each in turn.  A window is valid when
    j >= r + s + a; its base hash is that of the a words before j, folded with that of
    the r words before j - a - s when r > 0, unless an earlier valid window of its type
    had the same r words (a tied type's windows by increasing s)."""

    def words_before(position, n):
        h = sequence_seed
        for i in range(1, n + 1):
            h = combine(h, history[position - i])
        return h

    keys, valid, remote = [], {}, {}
    for g, (t, r, s, a, first) in enumerate(windows):
        valid[g] = j >= r + s + a
        if not valid[g]:
            continue
        base = words_before(j, a)
        if r > 0:
            remote[g] = words_before(j - a - s, r)
            if any(valid[h] and remote.get(h) == remote[g] for h in range(first, g)):
                continue
            base = combine(base, remote[g])
        keys += [mix64(base ^ tag_salts[t]) for tag_salts in salts]
    return keys


# --- the draws ----------------------------------------------------------------------------------

class Rows:
    """A model's rows (the arrays of :class:`snm_core.sample.rows.ModelRows`) as lists."""

    def __init__(self, records, links):
        self.where = {int(key): p for p, key in enumerate(records[0:-3:3])}
        self.first_link = records[1::3].tolist()
        self.mass = records.view("float64")[2::3].tolist()
        self.threshold = links.view("float64")[0::2].tolist()
        pairs = links[1::2].tolist()
        self.own = [pair & 0xFFFFFFFF for pair in pairs]
        self.alias = [pair >> 32 for pair in pairs]


def sample_sentences(state, words_wanted, quota, max_length, windows, salts, sequence_seed,
                     rows, bos, eos):
    """Sentences of one stream: ``(out, stats, finished)``, as
    :func:`snm_core.sample.sample_loops.sample_sentences` defines them.

    ``state`` is a dictionary of lists, changed in place: ``rng`` (a state a lane),
    ``history`` (a list of max_length + 1 word ids a lane), ``position`` (each lane's next
    target position, 0: idle) and ``words`` (one number: the stream's words so far).
    A step starts a sentence in each idle lane while the stream has fewer than ``quota``
    words, then draws each busy lane's next word, lane by lane: a feature of the history
    with a present record of positive M_f*, chosen by one uniform (the features in key
    order, the last one if the running difference never goes below 0), then a link of its
    row by another, which gives the link's word or its alias word.  ``</S>``, or no
    feature at all (a dead end), or reaching ``max_length`` words ends the sentence.  The
    call returns after the step that brings its words to ``words_wanted``, or when no
    lane is busy (finished)."""
    rng, history, position, words = (state[k] for k in ("rng", "history", "position", "words"))
    stats = [0] * 5  # words, sentences, empty, truncated, dead ends
    out = []
    while True:
        for lane in range(LANES):
            if position[lane] == 0 and words[0] < quota:
                history[lane][0] = bos
                position[lane] = 1
        if not any(position):
            return out, stats, True
        for lane in range(LANES):
            j = position[lane]
            if j == 0:
                continue
            found = []
            for key in event_keys(history[lane], j, windows, salts, sequence_seed):
                p = rows.where.get(key)
                if p is not None and rows.mass[p] > 0:
                    found.append(p)
            ended = not found
            if ended:
                stats[4] += 1
            else:
                total = 0.0
                for p in found:
                    total += rows.mass[p]
                u = uniform(rng[lane]) * total
                pick = len(found) - 1
                for i in range(len(found) - 1):
                    u -= rows.mass[found[i]]
                    if u < 0:
                        pick = i
                        break
                p = found[pick]
                start, size = rows.first_link[p], rows.first_link[p + 1] - rows.first_link[p]
                x = uniform(rng[lane]) * size
                k = min(int(x), size - 1)
                link = start + k
                word = rows.alias[link] if x - k >= rows.threshold[link] else rows.own[link]
                if word == eos:
                    ended = True
                else:
                    history[lane][j] = word
                    j += 1
                    position[lane] = j
                    if j > max_length:
                        stats[3] += 1
                        ended = True
            if ended:
                position[lane] = 0
                if j == 1:
                    stats[2] += 1
                    continue
                out += history[lane][1:j] + [eos]
                stats[0] += j - 1
                stats[1] += 1
                words[0] += j - 1
        if stats[0] >= words_wanted:
            return out, stats, False


# --- text ---------------------------------------------------------------------------------------

def render(ids, vocabulary, eos):
    """UTF-8 text of sentences ``ids`` (each ended by ``eos``): a line a sentence, its
    words (``vocabulary[id]``) joined by spaces."""
    lines, sentence = [], []
    for w in ids:
        if w == eos:
            lines.append(" ".join(sentence) + "\n")
            sentence = []
        else:
            sentence.append(vocabulary[w])
    return "".join(lines).encode("utf-8")
