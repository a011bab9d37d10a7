"""Events and features (paper, section 2), extracted for a whole batch of sentences at once.

A sentence w_1..w_n gives n + 1 events, predicting w_1, ..., w_n, ``</S>``;
``<S>`` starts every context and is never predicted.  Each event carries the
features its configuration extracts from the words before the target, never
reaching past ``<S>``:

* n-gram of length n: the n words right before the target (n = 0 is the empty
  feature, present in every event);
* skip-gram (r, s, a): a adjacent words right before the target, then s skipped
  words, then r remote words; the paper's (1, 2, 3) feature for ``dog`` in
  ``<S> The quick brown fox jumps over the lazy dog </S>`` is
  ``[brown skip-2 over the lazy]``.

An event's features form a set: a tied skip-gram seen at two skip lengths in
the same event is one feature.

Feature key
    A stable 64-bit hash of (corpus tag, feature type, words): words are folded
    in most recent first with :func:`snm_core.text.hashing.combine`, and the result is
    mixed with a per-(tag, type) salt, the xxhash64 of ``"tag\\x00type name"``.
    The key does not depend on the configuration, so a 5-gram model's features
    are also keys of a skip-10-gram model trained on the same data.  It does
    depend on word ids, so counts and events must share a vocabulary.

Feature type id
    ``tag_index * num_feature_types + type_index``: the (tag, type) pair used by
    the meta-features; with one untagged source it is just the type index.
"""

import dataclasses

import numpy as np

from snm_core.io import native
from snm_core.text import hashing
from snm_core.text.vocab import BOS_ID, EOS_ID


def type_salt(tag, feature_type):
    """The salt mixed into the keys of one (tag, feature type)."""
    return hashing.fingerprint(f"{tag}\x00{feature_type.name}")


@dataclasses.dataclass
class EventFeatures:
    """The events of a batch and their (event, feature) pairs.

    Attributes
    ----------
    target : ndarray of int32, shape (n_events,)
        Predicted word of each event.
    sentence : ndarray of int32, shape (n_events,)
        Index of each event's sentence in the batch.
    event : ndarray of int64, shape (n_pairs,)
        Event index of each pair.
    key : ndarray of uint64, shape (n_pairs,)
        Feature key.
    type : ndarray of int32, shape (n_pairs,)
        Feature type id (tag-major, see the module docstring).
    generator : ndarray of int16, shape (n_pairs,)
        Index into ``extractor.generators`` of the window that made the pair.
    """

    target: np.ndarray
    sentence: np.ndarray
    event: np.ndarray
    key: np.ndarray
    type: np.ndarray
    generator: np.ndarray
    extractor: "FeatureExtractor"
    _sequence: np.ndarray  # padded word ids: <S> w1..wn </S> per sentence
    _event_position: np.ndarray  # position of each event's target in _sequence

    @property
    def num_events(self):
        return len(self.target)

    @property
    def num_pairs(self):
        return len(self.key)

    def select(self, keep):
        """These events with only the pairs where the bool mask ``keep`` is true."""
        return dataclasses.replace(self, event=self.event[keep], key=self.key[keep],
                                   type=self.type[keep], generator=self.generator[keep])

    def context_words(self, pairs=None, narrow=False):
        """Identity words of the given pairs' features, oldest first, padded with -1.

        A skip-gram's words are its r remote words then its a adjacent words.

        Parameters
        ----------
        pairs : array of int, shape (k,), optional
            Pair indices (default: all pairs).
        narrow : bool
            Only as many columns as the pairs' features have words at most (one
            type's pairs: its number of words, no padding), not ``extractor.max_words``.

        Returns
        -------
        ndarray of int32, shape (k, extractor.max_words), or (k, the most words) if narrow
        """
        pairs = np.arange(self.num_pairs) if pairs is None else \
            np.ascontiguousarray(pairs, np.int64)
        windows = np.ascontiguousarray(self.extractor._gen_table, np.int64)  # (r, s, a) each
        if narrow:
            used = np.flatnonzero(np.bincount(self.generator[pairs], minlength=len(windows)))
            columns = int(max((windows[g, 0] + windows[g, 2] for g in used), default=0))
        else:
            columns = self.extractor.max_words
        words, work = np.empty((len(pairs), columns), np.int32), np.empty(len(pairs), np.int64)
        sequence = np.ascontiguousarray(self._sequence, np.int32)
        generator = np.ascontiguousarray(self.generator, np.int16)
        event = np.ascontiguousarray(self.event, np.int64)
        position = np.ascontiguousarray(self._event_position, np.int64)
        found = _context_words(
            native.address(sequence), len(sequence), native.address(generator),
            native.address(event), len(event), native.address(position), len(position),
            native.address(windows), len(windows), native.address(pairs), len(pairs), columns,
            native.address(work), native.address(words))
        if found == -2:
            raise IndexError(f"context_words: a pair out of range (of {self.num_pairs:,})")
        if found < 0:
            raise ValueError("a feature's window does not fit its sequence")
        return words


class FeatureExtractor:
    """Vectorised feature extraction for one configuration and set of corpus tags.

    Parameters
    ----------
    config : snm_core.text.config.ExtractionConfig
    tags : sequence of str, default ("",)
        Corpus tags of the training sources; ``""`` is the single untagged source.

    Examples
    --------
    >>> from snm_core.text.config import preset
    >>> from snm_core.text.tokenize import SentenceBatch
    >>> ex = FeatureExtractor(preset("5gram"))
    >>> ev = ex.extract(SentenceBatch.from_lists([[5, 6, 7]]))
    >>> ev.num_events, ev.num_pairs   # 4 events with 2, 3, 4, 5 features
    (4, 14)
    """

    def __init__(self, config, tags=("",)):
        self.config = config
        self.tags = tuple(tags)
        if not self.tags or len(set(self.tags)) != len(self.tags):
            raise ValueError(f"tags must be distinct and non-empty, got {self.tags}")
        self.feature_types = config.feature_types()
        self.generators = config.generators()
        # Generator index and window (g, r, s, a) of each feature type's windows, by type index.
        self._windows_by_type = {}
        for g, (type_index, r, s, a) in enumerate(self.generators):
            self._windows_by_type.setdefault(type_index, []).append((g, r, s, a))
        self._gen_table = np.array([(r, s, a) for _, r, s, a in self.generators],
                                   dtype=np.int64).reshape(-1, 3)
        self.max_words = max(t.num_words for t in self.feature_types)
        # Longest word sequence hashed: an n-gram, or the remote/adjacent part of a skip-gram.
        self._max_run = max(max(r, a) for _, r, _, a in self.generators)
        self._salts = np.array([[type_salt(tag, t) for t in self.feature_types]
                                for tag in self.tags], dtype=np.uint64)

    @property
    def num_type_ids(self):
        """Tag-major type ids: feature types x tags."""
        return len(self.feature_types) * len(self.tags)

    @property
    def max_windows_per_type(self):
        """Most windows of one feature type: a type has at most that many pairs an event."""
        return max(len(windows) for windows in self._windows_by_type.values())

    @property
    def occurrences_per_event(self):
        """Most feature occurrences of one event in training text (one tag): its windows."""
        return len(self.generators)

    @property
    def type_salts(self):
        """uint64 (num_types,): the salt of each type id, a stable hash of (tag, type name).

        The meta-features use it as the identity of a feature's type.
        """
        return self._salts.ravel()

    @property
    def num_types(self):
        """Number of type ids: tags x feature types."""
        return len(self.tags) * len(self.feature_types)

    def type_of(self, type_id):
        """``(tag, FeatureType)`` of a type id."""
        tag, index = divmod(int(type_id), len(self.feature_types))
        return self.tags[tag], self.feature_types[index]

    def type_name(self, type_id):
        tag, feature_type = self.type_of(type_id)
        return f"{tag}:{feature_type.name}" if tag else feature_type.name

    def extract(self, batch, tags=None):
        """Events and features of a batch of sentences.

        Parameters
        ----------
        batch : SentenceBatch
        tags : sequence of int, optional
            Indices into ``self.tags`` to key each feature with.  A training
            source passes its own tag (one index); held-out and test text passes
            all tags, so every feature appears once per training tag.  Default:
            all tags.

        Returns
        -------
        EventFeatures
            Pairs ordered by tag, then feature type, then window, then event.
        """
        return self._pairs(self._prepare(batch), list(self._windows_by_type), tags)

    def extract_by_type(self, batch, tags=None):
        """The pairs of :meth:`extract`, one feature type at a time.

        Yields one :class:`EventFeatures` per feature type that has pairs in the
        batch; each holds every event (``target``, ``sentence``) but only that
        type's pairs.  Counting needs no more: keys of different types never
        meet, and one type's arrays are a fraction of the whole batch's (the
        word sequence and its hashes are computed once).

        Parameters
        ----------
        batch : SentenceBatch
        tags : sequence of int, optional
            As for :meth:`extract`.
        """
        prepared = self._prepare(batch)
        for type_index in self._windows_by_type:
            events = self._pairs(prepared, [type_index], tags)
            if events.num_pairs:
                yield events

    def _prepare(self, batch):
        """What every type's pairs are made from: the padded sequence, its hashes, the events."""
        seq, pos, event_pos = _pad(batch)
        return _Prepared(
            seq=seq, event_pos=event_pos,
            hashes=_sequence_hashes(seq, pos, self._max_run),
            event_depth=pos[event_pos],  # words available before each target, <S> included
            target=seq[event_pos].astype(np.int32),
            sentence=np.repeat(np.arange(batch.num_sentences, dtype=np.int32),
                               np.diff(batch.offsets) + 1))

    def _pairs(self, prepared, type_indices, tags):
        """EventFeatures with the pairs of the given feature types (indices into feature_types)."""
        tags = range(len(self.tags)) if tags is None else list(tags)
        base_keys, events, types, gens = [], [], [], []
        for type_index in type_indices:
            for g, ev, base in _type_pairs(self._windows_by_type[type_index], prepared.hashes,
                                           prepared.event_pos, prepared.event_depth):
                base_keys.append(base)
                events.append(ev)
                types.append(np.full(len(ev), type_index, np.int32))
                gens.append(np.full(len(ev), g, np.int16))
        base = _concat(base_keys, np.uint64)
        event = _concat(events, np.int64)
        type_index = _concat(types, np.int32)
        generator = _concat(gens, np.int16)

        keys = [hashing.mix64(base ^ self._salts[t][type_index]) for t in tags]
        n_types = len(self.feature_types)

        def per_tag(array):  # one copy per tag; one tag (the usual case) copies nothing
            return np.tile(array, len(tags)) if len(tags) > 1 else array

        return EventFeatures(
            target=prepared.target,
            sentence=prepared.sentence,
            event=per_tag(event),
            key=_concat(keys, np.uint64),
            type=_concat([type_index + t * n_types if t else type_index for t in tags],
                         np.int32),
            generator=per_tag(generator),
            extractor=self,
            _sequence=prepared.seq,
            _event_position=prepared.event_pos,
        )

    def keys_for(self, type_id, words):
        """Feature keys of one type id for given identity words (no text needed).

        Parameters
        ----------
        type_id : int
        words : int array (n, r + a), identity words oldest first (remote, then adjacent)

        Returns
        -------
        uint64 (n,), equal to the keys :meth:`extract` gives those features
        """
        tag, type_index = divmod(int(type_id), len(self.feature_types))
        feature_type = self.feature_types[type_index]
        words = np.asarray(words)
        if words.ndim != 2 or words.shape[1] < feature_type.num_words:
            raise ValueError(f"{feature_type.name} needs words of shape (n, "
                             f"{feature_type.num_words}), got {words.shape}")
        r = feature_type.remote

        def fold(columns):  # newest word first, as _sequence_hashes does
            h = np.full(words.shape[0], hashing.SEQUENCE_SEED, dtype=np.uint64)
            for col in reversed(columns):
                h = hashing.combine(h, words[:, col])
            return h

        base = fold(range(r, feature_type.num_words))
        if r:
            base = hashing.combine(base, fold(range(r)))
        return hashing.mix64(base ^ self._salts[tag][type_index])

    def render(self, type_id, words, vocab):
        """A feature in the paper's notation, e.g. ``[brown skip-2 over the lazy]``.

        Parameters
        ----------
        type_id : int
        words : sequence of int
            Identity words, oldest first (padding -1 is ignored).
        vocab : snm_core.text.vocab.Vocabulary
        """
        tag, feature_type = self.type_of(type_id)
        return render_feature(feature_type, words, vocab, tag)


def render_feature(feature_type, words, vocab, tag=""):
    """Paper notation: ``[the cat]``, ``[]``, ``[curiosity skip-* the cat]``, ``tag:[...]``."""
    names = [vocab.word(int(w)) for w in words if w >= 0]
    if len(names) != feature_type.num_words:
        raise ValueError(f"{feature_type.name} has {feature_type.num_words} words, "
                         f"got {len(names)}")
    if feature_type.kind == "ngram":
        text = "[" + " ".join(names) + "]"
    else:
        skip = "*" if feature_type.skip is None else feature_type.skip
        parts = names[:feature_type.remote] + [f"skip-{skip}"] + names[feature_type.remote:]
        text = "[" + " ".join(parts) + "]"
    return f"{tag}:{text}" if tag else text


@dataclasses.dataclass
class _Prepared:
    """A batch's word sequence, hashes and events, shared by the pairs of every type."""

    seq: np.ndarray
    event_pos: np.ndarray
    hashes: np.ndarray
    event_depth: np.ndarray
    target: np.ndarray
    sentence: np.ndarray


def _concat(arrays, dtype):
    if len(arrays) == 1:
        return arrays[0].astype(dtype, copy=False)
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)


def _pad(batch):
    """``<S> w1 .. wn </S>`` per sentence, back to back.

    Returns
    -------
    seq : int32 (L,)  word ids
    pos : int64 (L,)  position within the sentence (0 at ``<S>``)
    event_pos : int64 (n_events,)  positions of predicted words (all but ``<S>``)
    """
    lengths = np.diff(batch.offsets)
    n_sent = len(lengths)
    starts = batch.offsets[:-1] + 2 * np.arange(n_sent, dtype=np.int64)
    total = batch.num_tokens + 2 * n_sent
    seq = np.empty(total, dtype=np.int32)
    seq[starts] = BOS_ID
    seq[starts + lengths + 1] = EOS_ID
    token_sentence = np.repeat(np.arange(n_sent, dtype=np.int64), lengths)
    seq[np.arange(batch.num_tokens, dtype=np.int64) + 2 * token_sentence + 1] = batch.tokens
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths + 2)
    is_event = np.ones(total, dtype=bool)
    is_event[starts] = False
    return seq, pos, np.flatnonzero(is_event)


def _sequence_hashes(seq, pos, max_len):
    """``hashes[n][j]``: hash of the n words ending right before position j, newest first.

    Valid where ``pos[j] >= n`` (the words stay inside the sentence); other
    entries are garbage and never read.
    """
    hashes = np.empty((max_len + 1, len(seq)), dtype=np.uint64)
    hashes[0] = hashing.SEQUENCE_SEED
    for n in range(1, max_len + 1):
        hashes[n, n:] = hashing.combine(hashes[n - 1, n:], seq[:-n] if n else seq)
        hashes[n, :n] = 0
    return hashes


def _window_hash(hashes, positions, r, s, a):
    """Base hash of window (r, s, a) for targets at ``positions`` (all valid)."""
    adjacent = hashes[a][positions]
    if r == 0:
        return adjacent
    remote = hashes[r][positions - a - s]
    return hashing.combine(adjacent, remote)


def _type_pairs(windows, hashes, event_pos, event_depth):
    """Yield ``(generator, event indices, base hashes)`` for the windows of one type.

    Windows of a tied type differ only in s; an event that sees the same remote
    words at two skip lengths gets the feature once, from the shortest skip.
    """
    if len(windows) == 1:
        g, r, s, a = windows[0]
        ev = np.flatnonzero(event_depth >= r + s + a)
        yield g, ev, _window_hash(hashes, event_pos[ev], r, s, a)
        return
    windows = sorted(windows, key=lambda w: w[2])  # by skip length
    _, r0, s0, a0 = windows[0]
    ev = np.flatnonzero(event_depth >= r0 + s0 + a0)  # events the shortest skip reaches
    positions = event_pos[ev]
    depth = event_depth[ev]
    earlier = []  # remote hashes of shorter skips, with their validity
    for g, r, s, a in windows:
        valid = depth >= r + s + a
        remote = np.where(valid, hashes[r][np.where(valid, positions - a - s, 0)], 0)
        fresh = valid.copy()
        for prev_remote, prev_valid in earlier:
            fresh &= ~(prev_valid & (prev_remote == remote))
        earlier.append((remote, valid))
        keep = np.flatnonzero(fresh)
        yield g, ev[keep], hashing.combine(hashes[a][positions[keep]], remote[keep])


_context_words = native.function(
    "context_words", [native.ptr, native.i64, native.ptr, native.ptr, native.i64, native.ptr,
                      native.i64, native.ptr, native.i64, native.ptr, native.i64, native.i64,
                      native.ptr, native.ptr], native.i64)
