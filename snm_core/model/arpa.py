"""Exact ARPA export of an n-gram SNM model (``snm export-arpa``).

For a configuration whose features are exactly the n-grams of lengths 0..N-1
the SNM is a back-off model.  With, for a context h (summed over corpus tags),

    S(h) = M_h*,  Z(h) = S(h) + Z(h'),  N(h, w) = M_hw + N(h', w),

where h' drops the oldest word of h (Z and N of the empty context are its own
S and M), the model gives P(w | h) = N(h, w) / Z(h) when (h, w) was seen and
otherwise [Z(h') / Z(h)] P(w | h'); a context the model never saw backs off
with weight 1.  So the ARPA entry of n-gram (h, w) is log10 N(h, w) / Z(h) and
its back-off weight, as a context, is log10 Z(h') / Z(h).  Every context the
model has is also an n-gram entry (the words before its last word were seen
followed by it), every suffix of an entry is an entry, and ``<s>`` gets
log10 probability -99 (it is never predicted).

Everything is vectorised: contexts and links are keyed by 64-bit keys of
their words (:meth:`FeatureExtractor.keys_for`, untagged), sums over tags
number the keys by sorting them (:func:`snm_core.io.arrays.sorted_ids`), suffix
lookups a :class:`snm_core.model.layouts.hashed.KeyIndex`, and the text is formatted by
pyarrow string kernels.
"""


import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from snm_core.io import storage
from snm_core.io.arrays import padded_lists, sorted_ids
from snm_core.io.errors import SnmInputError
from snm_core.model.compact import read_model_tables
from snm_core.model.layouts.hashed import KeyIndex
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.hashing import link_key
from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID, Vocabulary

ARPA_MARKERS = {BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}
#: log10 "probability" of <s>, which is never predicted (the SRILM convention).
NEVER = -99.0


#: Why a model lacks an ARPA file's suffixes, most often.
_CLOSURE_HINT = (" (snm prune --criterion mass keeps no suffixes for the links it keeps; "
                 "prune with --criterion backoff to export ARPA)")


def _context_keys(plain, lengths, words):
    """Untagged n-gram keys of word rows (``words`` padded, ``lengths`` words each)."""
    keys = np.empty(len(lengths), dtype=np.uint64)
    for n in np.unique(lengths) if len(lengths) else []:
        rows = np.flatnonzero(lengths == n)
        keys[rows] = plain.keys_for(int(n), words[rows][:, :n])
    return keys


@dataclasses.dataclass
class BackoffForm:
    """An n-gram model's back-off form (see the module docstring); arrays by context
    (``ctx_*``, sorted by key) and by distinct n-gram entry ``(context, word)``
    (``l_*``, sorted by link key), tags summed away.

    ``feature_ctx``: the context of each (tagged) feature row.  ``row_link``: the
    entry of each row of the model's matrix (its tag copies share one).
    ``suffix_link``: the entry ``(h', w)`` of entry ``(h, w)`` (-1 for unigrams);
    ``prefix_link``: the entry whose n-gram is the context ``h`` (-1 for the empty
    context).
    """

    order: int
    plain: FeatureExtractor
    ctx_keys: np.ndarray
    ctx_len: np.ndarray
    ctx_words: np.ndarray
    ctx_index: KeyIndex
    feature_ctx: np.ndarray
    z: np.ndarray
    l_ctx: np.ndarray
    l_word: np.ndarray
    n_self: np.ndarray
    n_total: np.ndarray
    row_link: np.ndarray
    suffix_link: np.ndarray
    prefix_link: np.ndarray


def backoff_form(features, matrix, config, model_dir):
    """The :class:`BackoffForm` of a model's tables (an n-gram ``config``)."""
    order = config.ngram_order
    plain = FeatureExtractor(config)  # untagged: tags are summed away

    # Contexts: one per distinct word sequence, S summed over tags.  (Each
    # temporary is dropped once used: a whole model's arrays are held here.)
    words, lengths = padded_lists(features["words"], max(order - 1, 1))
    ctx_of_feature, ctx_keys, first = sorted_ids(_context_keys(plain, lengths, words))
    s_ctx = np.bincount(ctx_of_feature, weights=features["m_star"].to_numpy(),
                        minlength=len(first))
    ctx_len, ctx_words = lengths[first], words[first]
    del words, lengths, first
    ctx_index = KeyIndex(ctx_keys)

    # Links: one per (context, word), M summed over tags.
    packed = np.repeat(ctx_of_feature.astype(np.uint64) << np.uint64(32),
                       features["diversity"].to_numpy())
    packed |= matrix["word"].to_numpy().astype(np.uint64)
    link_ids, unique_packed, _ = sorted_ids(packed)
    del packed
    n_self = np.bincount(link_ids, weights=matrix["m"].to_numpy().astype(np.float64),
                         minlength=len(unique_packed))
    l_ctx = (unique_packed >> np.uint64(32)).astype(np.int64)
    l_word = (unique_packed & np.uint64(0xFFFFFFFF)).astype(np.int64)
    del unique_packed
    l_keys = link_key(ctx_keys[l_ctx], l_word)
    l_order = np.argsort(l_keys)
    l_ctx, l_word, n_self, l_keys = (l_ctx[l_order], l_word[l_order], n_self[l_order],
                                     l_keys[l_order])
    link_index = KeyIndex(l_keys)
    row_link = np.argsort(l_order)[link_ids]
    del l_order, link_ids

    # Z and N, shortest contexts first: the suffix's values are final by then.
    z = s_ctx.copy()
    n_total = n_self.copy()
    suffix_link = np.full(len(l_keys), -1, np.int64)
    suffix_key = np.zeros(len(ctx_keys), np.uint64)
    for n in range(1, order):
        ctx = np.flatnonzero(ctx_len == n)
        if not len(ctx):
            continue
        suffix_key[ctx] = _context_keys(plain, np.full(len(ctx), n - 1), ctx_words[ctx][:, 1:])
        suffix = ctx_index.find(suffix_key[ctx])
        if np.any(suffix < 0):
            raise SnmInputError(f"{model_dir}: a context's suffix is missing; the model is not "
                                f"a complete n-gram model{_CLOSURE_HINT}")
        z[ctx] += z[suffix]
        links = np.flatnonzero(ctx_len[l_ctx] == n)
        lower = link_index.find(link_key(suffix_key[l_ctx[links]], l_word[links]))
        if np.any(lower < 0):
            raise SnmInputError(f"{model_dir}: an n-gram's suffix is missing{_CLOSURE_HINT}")
        n_total[links] += n_total[lower]
        suffix_link[links] = lower

    # The entry (h[:-1], h[-1]) of each context h.
    prefix_ctx = np.full(len(ctx_keys), -1, np.int64)
    for n in range(1, order):
        ctx = np.flatnonzero(ctx_len == n)
        if len(ctx):
            prefix_ctx[ctx] = ctx_index.find(_context_keys(
                plain, np.full(len(ctx), n - 1), ctx_words[ctx][:, :n - 1]))
    prefix_link = np.full(len(l_keys), -1, np.int64)
    has_prefix = (ctx_len[l_ctx] > 0) & (prefix_ctx[l_ctx] >= 0)
    rows = np.flatnonzero(has_prefix)
    last_word = ctx_words[l_ctx[rows], np.maximum(ctx_len[l_ctx[rows]] - 1, 0)]
    prefix_link[rows] = link_index.find(link_key(ctx_keys[prefix_ctx[l_ctx[rows]]], last_word))
    return BackoffForm(order, plain, ctx_keys, ctx_len, ctx_words, ctx_index, ctx_of_feature, z,
                       l_ctx, l_word, n_self, n_total, row_link, suffix_link, prefix_link)


def export_arpa(model_dir, out_path, say=print):
    """Write the ARPA file of an n-gram model; returns the n-gram count of each order."""
    features, matrix, manifest = read_model_tables(model_dir)
    config = parse_config(manifest["config"])
    if config.ngram_order is None:
        raise SnmInputError(
            f"{model_dir}: ARPA holds only n-gram models; this configuration "
            f"({', '.join(manifest['feature_types'])}) is not the n-grams of lengths 0..N "
            "without skip-grams, so it has no exact back-off form")
    vocab = Vocabulary.load(storage.join(model_dir, "vocab.txt"))
    check_vocabulary(vocab)
    form = backoff_form(features, matrix, config, model_dir)
    order, plain, ctx_index = form.order, form.plain, form.ctx_index
    ctx_len, ctx_words, z, l_ctx, l_word = (form.ctx_len, form.ctx_words, form.z, form.l_ctx,
                                            form.l_word)

    log_prob = np.log10(form.n_total / z[l_ctx])
    # Back-off of entry (h, w) used as a context g = h + w: log10 Z(g') / Z(g).
    entry_len = ctx_len[l_ctx] + 1
    backoff = np.zeros(len(l_ctx))
    has_bo = np.zeros(len(l_ctx), bool)
    for n in range(1, order):
        rows = np.flatnonzero(entry_len == n)
        g_words = np.concatenate([ctx_words[l_ctx[rows], :n - 1], l_word[rows, None]], axis=1)
        g = ctx_index.find(_context_keys(plain, np.full(len(rows), n), g_words))
        found = g >= 0
        g_suffix = ctx_index.find(_context_keys(plain, np.full(found.sum(), n - 1),
                                                g_words[found, 1:]))
        backoff[rows[found]] = np.log10(z[g_suffix] / z[g[found]])
        has_bo[rows[found]] = True

    sections = []
    for n in range(1, order + 1):
        rows = np.flatnonzero(entry_len == n)
        words = np.concatenate([ctx_words[l_ctx[rows], :n - 1], l_word[rows, None]], axis=1)
        prob = log_prob[rows]
        bo = np.where(has_bo[rows], backoff[rows], 0.0) if n < order else None
        if n == 1:  # <s> (never predicted, with its back-off) and <unk> if training had none
            bos = ctx_index.find(_context_keys(plain, np.array([1]), np.array([[BOS_ID]])))[0]
            empty = ctx_index.find(_context_keys(plain, np.array([0]),
                                                 np.zeros((1, 1), np.int64)))[0]
            extra = [(BOS_ID, np.log10(z[empty] / z[bos]) if bos >= 0 else 0.0)]
            if not np.any(l_word[rows] == UNK_ID):
                extra.append((UNK_ID, 0.0))
            words = np.concatenate([[[w] for w, _ in extra], words]).astype(np.int64)
            prob = np.concatenate([[NEVER] * len(extra), prob])
            if bo is not None:
                bo = np.concatenate([[b for _, b in extra], bo])
        sections.append((n, words, prob, bo))
    counts = write_sections(out_path, vocab, sections)
    say(f"wrote {out_path}: " + ", ".join(f"{n}-grams {c:,}" for n, c in counts.items()))
    return counts


def check_vocabulary(vocab):
    """ARPA reserves ``<s>``, ``</s>`` and ``<unk>``: a vocabulary word spelt so is refused."""
    for word in vocab.words[3:]:
        if word in ("<s>", "</s>", "<unk>"):
            raise SnmInputError(f"the vocabulary has the word {word!r}, which ARPA reserves")


def write_sections(out_path, vocab, sections):
    """Write an ARPA file; returns the n-gram count of each order.

    ``sections``: per order n, ``(n, words, log10_prob, backoff)`` with ``words``
    int (k, n) (oldest word first), ``log10_prob`` (k,) and ``backoff`` (k,) or
    None (the highest order).
    """
    names = [ARPA_MARKERS.get(i, w) for i, w in enumerate(vocab.words)]
    word_strings = pa.array(names, pa.string())
    counts = {}
    body = []
    for n, words, log_prob, backoff in sections:
        parts = [word_strings.take(pa.array(words[:, j])) for j in range(n)]
        text = pc.binary_join_element_wise(*parts, " ") if n > 1 else parts[0]
        columns = [pc.cast(pa.array(np.asarray(log_prob, np.float32)), pa.string()), text]
        if backoff is not None:
            columns.append(pc.cast(pa.array(np.asarray(backoff, np.float32)), pa.string()))
        counts[n] = len(words)
        body += [f"\\{n}-grams:"] + pc.binary_join_element_wise(*columns, "\t").to_pylist() + [""]
    header = ["\\data\\"] + [f"ngram {n}={c}" for n, c in counts.items()] + [""]
    storage.write_text("\n".join(header + body + ["\\end\\"]) + "\n", out_path)
    return counts
