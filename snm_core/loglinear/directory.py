"""The log-linear model directory: built from counts, saved, loaded for scoring, exported as ARPA.

A log-linear n-gram model (:mod:`snm_core.loglinear`) needs exactly what the
count stage already computes for an n-gram configuration: its features are the
contexts (the nodes of the suffix trie), its links the (context, word) pairs
seen in training, and a link's count C(f, w) the number of positions whose
history ends with f and whose target is w.  So the Beam count stage is the
log-linear family's positions stage too, and :func:`from_counts` turns a count
directory into a model with W = 0 and the own counts the fit needs.

Directory layout (``manifest.json`` of kind ``"loglinear"``, written last)::

    vocab.txt               the vocabulary
    node_parent.npy         int64 (n,)  parent context (drop the oldest word), -1 for the root
    node_word.npy           int64 (n,)  oldest word of the context (-1 for the root)
    pair_ptr.npy            int64 (n+1,) pairs of node j are pair_ptr[j]:pair_ptr[j+1]
    pair_word.npy           int32 (m,)  word of each pair, ascending within a node
    pair_weight.npy         float64 (m,) w_{j,y} >= 0

Loading rebuilds the trie's lookup keys and each pair's score and each node's
normaliser in O(n + m) (:meth:`LogLinearModel.normalisers`); scoring a
position is then a walk up at most N - 1 nodes with a binary search in each.

ARPA export is exact (a log-linear n-gram model with W >= 0 is a back-off
model): the entry of pair (h, y) is log10 exp(s_y(h)) / Z(h) and the back-off
weight of context h is log10 Z(h') / Z(h), h' = h without its oldest word.
"""

import dataclasses
import time

import numpy as np

from snm_core.io import local_copies, storage, tables
from snm_core.io.arrays import padded_lists
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import read_text
from snm_core.loglinear import path
from snm_core.loglinear.family import KIND
from snm_core.loglinear.contexts import ContextTree, histories
from snm_core.loglinear.model import (
    LogLinearModel,
    _lookup_log_prob,
    deepest_nodes,
    own_counts_from_totals,
)
from snm_core.loglinear.optimizers import fit
from snm_core.arpa import export as arpa
from snm_core.scoring.layouts.npy import load_checked
from snm_core.scoring.layouts.trie_loops import shift_states
from snm_core.scoring.base import LineScoring, Scores
from snm_core.scoring.states import StateBatch, StateScoring
from snm_core.stages import manifests, validation
from snm_core.text.config import parse_config
from snm_core.text.tokenize import SentenceBatch, tokenize
from snm_core.text.vocab import BOS_ID

#: The default λ grid, times 1/P (see :class:`LogLinearOptions`).
LAM_SCALES = (0.1, 0.3, 1.0)
ARRAYS = {"node_parent": np.int64, "node_word": np.int64, "pair_ptr": np.int64,
          "pair_word": np.int32, "pair_weight": np.float64}


def from_counts(count_dir):
    """The model (W = 0) and own counts of an n-gram count directory.

    Returns
    -------
    model : LogLinearModel
    own : ndarray of float64, shape (m,)
        Positions whose whole history is the pair's context (see
        :func:`snm_core.loglinear.model.own_counts`).
    checked : snm_core.stages.validation.InputDirectory
        The count directory's manifest and vocabulary.
    """
    checked = validation.validate_directory(count_dir, "count")
    manifest = checked.manifest
    config = parse_config(manifest["config"])
    if config.ngram_order is None:
        raise SnmInputError(
            f"{count_dir}: the log-linear family takes n-gram configurations (the features "
            f"of lengths 0..N-1); this one has {', '.join(manifest['feature_types'])}")
    if manifest["tags"] != [""]:
        raise SnmInputError(f"{count_dir}: counts of tagged sources; the log-linear family "
                            "trains on pooled sources (count without --tagged)")
    order = config.ngram_order
    features = tables.read_tables(count_dir, manifest, "features", tables.FEATURES,
                                  ["feature", "words"])
    links = tables.read_tables(count_dir, manifest, "links", tables.LINKS,
                               ["feature", "word", "count"])
    words, lengths = padded_lists(features["words"], max(order - 1, 1))  # oldest word first
    columns = np.arange(words.shape[1])
    newest_first = lengths[:, None] - 1 - columns[None, :]
    history = np.where(newest_first >= 0,
                       np.take_along_axis(words, np.maximum(newest_first, 0), axis=1), -1)
    vocab_size = len(checked.vocabulary)
    tree = ContextTree.build(history, vocab_size)
    feature_node = deepest_nodes(tree.active(history))
    feature_keys = features["feature"].to_numpy()
    by_key = np.argsort(feature_keys)
    link_features = links["feature"].to_numpy()
    row = by_key[np.minimum(np.searchsorted(feature_keys, link_features, sorter=by_key),
                            max(len(by_key) - 1, 0))]
    if not np.array_equal(feature_keys[row], link_features):
        raise SnmInputError(f"{count_dir}: a link's feature is not in the feature table; "
                            "re-run 'snm count'")
    node = feature_node[row]
    word = links["word"].to_numpy().astype(np.int64)
    model = LogLinearModel.from_pairs(tree, node, word)
    counts = np.zeros(model.num_pairs)
    counts[model.pair_of(node, word)] = links["count"].to_numpy()
    return model, own_counts_from_totals(model, counts), checked


def save(model, directory, vocab, info):
    """Write the model directory; ``info`` (JSON-able) goes into the manifest, written last
    (a previous model's manifest goes first, so a half-written directory has none)."""
    storage.makedirs(directory)
    storage.remove_file(storage.join(directory, tables.MANIFEST))
    arrays = {"node_parent": model.tree.parent, "node_word": model.tree.word,
              "pair_ptr": model.ptr, "pair_word": model.word, "pair_weight": model.weight}
    for name, dtype in ARRAYS.items():
        storage.write_npy(np.ascontiguousarray(arrays[name], dtype), storage.join(directory,
                                                                                  name + ".npy"))
    vocab.save(storage.join(directory, "vocab.txt"))
    manifest = manifests.LogLinear(
        files=["vocab.txt"] + [name + ".npy" for name in ARRAYS], vocabulary_size=len(vocab),
        vocabulary_fingerprint=vocab.fingerprint(),
        totals={"nodes": int(model.tree.size), "pairs": int(model.num_pairs),
                "nonzero_pairs": int(np.count_nonzero(model.weight))},
        extra=info).write(directory)
    return manifest


def load_arrays(directory):
    """``(manifest, vocabulary, LogLinearModel)`` of a model directory, arrays checked."""
    checked = validation.validate_directory(directory, KIND)
    local = local_copies.local_copy(directory, [name + ".npy" for name in ARRAYS], tables.MANIFEST)
    totals = checked.manifest["totals"]
    n, m = totals["nodes"], totals["pairs"]
    shapes = {"node_parent": n, "node_word": n, "pair_ptr": n + 1, "pair_word": m,
              "pair_weight": m}
    arrays = load_checked(local, ARRAYS, {name: (dtype, (shapes[name],))
                                          for name, dtype in ARRAYS.items()},
                          remedy="re-run 'snm train --family loglinear'")
    V = checked.manifest["vocabulary_size"]
    parent, word = arrays["node_parent"], arrays["node_word"]
    keys = parent[1:] * V + word[1:]
    depth = np.zeros(n, np.int64)
    for _ in range(checked.manifest["order"] - 1):  # right up to depth d after d passes
        depth[1:] = depth[parent[1:]] + 1
    tree = ContextTree(parent, depth, word, keys, V)
    try:
        model = LogLinearModel.from_arrays(tree, arrays["pair_ptr"], arrays["pair_word"],
                                           arrays["pair_weight"])
    except ValueError as e:
        raise SnmInputError(f"{directory}: {e}; re-run 'snm train --family loglinear'") from None
    return checked.manifest, checked.vocabulary, model


class LogLinearScorer(LineScoring, StateScoring):
    """A log-linear model directory loaded for scoring (``snm eval``, ``snm score``).

    Thread-safe like :class:`snm_core.scoring.layouts.hashed.Model`: nothing changes after loading.
    A state (:mod:`snm_core.scoring.states`) holds the words of the deepest node of the
    history, which alone decides what follows.
    """

    REPORTS = {"loglinear": "prob"}
    WITHOUT_UNADJUSTED = "a log-linear model has no unadjusted form"

    def __init__(self, manifest, vocab, model):
        self.manifest = manifest
        self.vocab = vocab
        vocab.ids([])  # its lookup table, built now rather than while scoring
        self.model = model
        self._order = manifest["order"]
        S, Z = model.normalisers()
        self.pair_score = S
        self.log_z = np.log(Z)
        self.state_width = max(1, self.order - 1)

    def _advance(self, states, target):
        """:meth:`snm_core.scoring.states.StateScoring._advance`: the log-probability from the
        deepest node of the state's words; the new state holds the words of the deepest
        node of the history with the target."""
        width = self.state_width
        history = states.words[:, ::-1].astype(np.int64)  # newest first, -1 beyond
        if self.order == 1:
            history = history[:, :0]
        target = np.asarray(target, np.int32)
        prob = np.exp(self.log_prob(self.model.tree.active(history), target))
        after = np.concatenate([target[:, None].astype(np.int64), history[:, :width - 1]],
                               axis=1)[:, :history.shape[1]]
        active = self.model.tree.active(after)
        depth = (active >= 0).sum(axis=1) - 1
        # The deepest node is the longest n-gram ending in the target seen in training.
        return prob, depth, StateBatch(*shift_states(states.words, target, depth))

    @property
    def order(self):
        """The model's n-gram order (KenLM's ``order``)."""
        return self._order

    @classmethod
    def load(cls, directory):
        return cls(*load_arrays(directory))

    @property
    def scored_words(self):
        """Word ids the model predicts: every id but ``<S>``."""
        return np.arange(BOS_ID + 1, len(self.vocab))

    def log_prob(self, active, target):
        """Natural log p(target | history) of positions (``active`` from the model's trie)."""
        return _lookup_log_prob(self.model.ptr, self.model.word, self.model.tree.parent,
                                self.pair_score, self.log_z, deepest_nodes(active),
                                np.asarray(target, np.int64))

    def score_batch(self, batch, unadjusted=False):
        """Probabilities of every predicted word of a :class:`SentenceBatch`."""
        history, target = histories(batch, self.order)
        prob = np.exp(self.log_prob(self.model.tree.active(history), target))
        lengths = np.diff(np.asarray(batch.offsets, np.int64)) + 1
        sentence = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
        return Scores(target, sentence, prob)

    def distribution(self, context):
        """p(y | context) for every vocabulary id (0 for ``<S>``): ``context`` a list of words."""
        batch = SentenceBatch.from_lists([list(self.vocab.ids(list(context)))])
        history, _ = histories(batch, self.order)
        last = np.repeat(history[-1:], len(self.vocab), axis=0)
        prob = np.exp(self.log_prob(self.model.tree.active(last), np.arange(len(self.vocab))))
        prob[BOS_ID] = 0.0
        return prob


def train(count_dir, heldout_path, out_dir, options, say=print, encoding="utf-8",
          skip_invalid=False):
    """Fit a log-linear model on a count directory, choosing λ and α on held-out text (in
    ``encoding``; lines that do not decode: :func:`snm_core.io.textfile.read_text`), and
    write its model directory.  Returns the manifest."""
    model, own, checked = from_counts(count_dir)
    order = parse_config(checked.manifest["config"]).ngram_order
    heldout, _, _ = tokenize(read_text(heldout_path, encoding, skip_invalid),
                             checked.vocabulary)
    history, target = histories(heldout, order)
    dev = (model.tree.active(history), target)
    # One entry per training position: the pair of its whole history and target (all
    # the tree gradient needs of it); P int64 values, not the (P, N) active nodes.
    if options.optimizer == "auto":
        positions = max(float(own.sum()), 1.0)
        say(f"  choosing lambda and alpha on {heldout_path} within {options.seconds:g} s "
            f"(APG along a warm-started lambda path; --time_budget)")
        best, trials = path.choose(
            model, own, dev, options.penalty, alphas=options.alphas,
            lam_scales=tuple(lam * positions for lam in options.lams) if options.lams
            else path.LAM_SCALES, seconds=options.seconds, say=say)
    else:
        pair_of_position = np.repeat(np.arange(model.num_pairs), own.astype(np.int64))
        best, trials = select(model, pair_of_position, dev, options, say)
    info = {"order": order, "config": checked.manifest["config"], "penalty": options.penalty,
            "lam": best["lam"], "alpha": best["alpha"],
            "heldout_perplexity": best["heldout_perplexity"], "trials": trials,
            "options": dataclasses.asdict(options),
            "count_totals": checked.manifest["totals"]}
    return save(model, out_dir, checked.vocabulary, info)


def select(model, position_pairs, dev, options, say=print):
    """Fit every (α, λ) of the options' grids and keep the best on held-out positions.

    For each α the fit starts from W = 0 and goes through the λ grid strongest
    first, each fit warm-started from the previous one.

    Parameters
    ----------
    model : LogLinearModel
        Its weights are replaced by the best fit's.
    position_pairs : ndarray of int64, shape (P,)
        The deepest pair of each training position (see :func:`loglinear.fit`).
    dev : (active, target)
        Held-out positions under the model's trie.
    options : LogLinearOptions

    Returns
    -------
    best : dict
        The best trial: ``lam``, ``alpha``, ``heldout_perplexity``, ``epochs``, ``seconds``.
    trials : list of dict
        Every trial, in the order fitted.
    """
    if options.optimizer == "auto":
        raise ValueError("select fits the named optimizers' grids; optimizer auto is "
                         "snm_core.loglinear.path.choose (as train() does)")
    lams = options.lams or tuple(scale / len(position_pairs) for scale in LAM_SCALES)
    best, best_weight, trials = None, None, []
    for alpha in options.alphas:
        model.weight = np.zeros(model.num_pairs)
        for lam in sorted(lams, reverse=True):
            start = time.perf_counter()

            def progress(epoch, fitted):
                held_out = fitted.fit_log[-1][1]
                say(f"    epoch {epoch + 1}: held-out perplexity {np.exp(held_out):.2f} "
                    f"({time.perf_counter() - start:.1f} s)")

            at_optimum = options.optimizer == "apg"  # runs to its certificate, no early stop
            fit(model, None, None, options.penalty, lam, alpha, epochs=options.epochs,
                batch_size=max(1, -(-len(position_pairs) // options.batches_per_epoch)),
                step=options.step, seed=options.seed, optimizer=options.optimizer,
                dev=dev, patience=None if at_optimum else options.patience, gradient="tree",
                position_pairs=position_pairs, callback=progress, tol=options.tol)
            # the kept weights': the last (apg) or the best held-out ones
            held = model.fit_log[-1][1] if at_optimum else min(
                loss for _, loss in model.fit_log)
            trial = {"lam": lam, "alpha": alpha, "heldout_perplexity": float(np.exp(held)),
                     "epochs": len(model.fit_log), "seconds": round(time.perf_counter() - start, 2)}
            if at_optimum:
                result = model.fit_result
                trial.update(iterations=result.iterations, certificate=result.certificate,
                             converged=bool(result.converged), objective=result.objective)
            trials.append(trial)
            say(f"  lambda {lam:g} alpha {alpha:g}: held-out perplexity "
                f"{trial['heldout_perplexity']:.2f} after {trial['epochs']} epoch(s), "
                f"{trial['seconds']:.1f} s"
                + (f"; APG {model.fit_result.summary()}" if at_optimum else ""))
            if best is None or trial["heldout_perplexity"] < best["heldout_perplexity"]:
                best, best_weight = trial, model.weight.copy()
    model.weight = best_weight
    return best, trials


def export_arpa(directory, out_path, say=print):
    """Write the exact ARPA file of a log-linear model; returns the n-gram count per order."""
    manifest, vocab, model = load_arrays(directory)
    arpa.check_vocabulary(vocab)
    order = manifest["order"]
    tree = model.tree
    S, Z = model.normalisers()
    log10_z = np.log10(Z)
    # Words of each context, oldest first, built one depth at a time from the parent's.
    n = tree.size
    ctx_words = np.full((n, max(order - 1, 1)), -1, np.int64)
    for d in range(1, int(tree.depth.max(initial=0)) + 1):
        nodes = np.flatnonzero(tree.depth == d)
        ctx_words[nodes, 0] = tree.word[nodes]
        ctx_words[nodes, 1:d] = ctx_words[tree.parent[nodes], :d - 1]
    node_backoff = np.zeros(n)
    node_backoff[1:] = log10_z[tree.parent[1:]] - log10_z[1:]

    pair_node = model.pair_node
    pair_depth = model.pair_depth
    log_prob = S / np.log(10.0) - log10_z[pair_node]
    sections = []
    for n_words in range(1, order + 1):
        pairs = np.flatnonzero(pair_depth == n_words - 1)
        gram = np.concatenate([ctx_words[pair_node[pairs], :n_words - 1],
                               model.word[pairs, None].astype(np.int64)], axis=1)
        prob = log_prob[pairs]
        backoff = None
        if n_words < order:  # the entry as a context: its node, if the trie has it
            history = np.full((len(pairs), order - 1), -1, np.int64)
            history[:, :n_words] = gram[:, ::-1]
            node = tree.active(history)[:, n_words]
            backoff = np.where(node >= 0, node_backoff[np.maximum(node, 0)], 0.0)
        if n_words == 1:  # every outcome is a unigram: those without a root pair score 0
            missing = np.setdiff1d(np.arange(len(vocab)), np.append(gram[:, 0], BOS_ID))
            gram = np.concatenate([gram, missing[:, None]])
            prob = np.concatenate([prob, np.full(len(missing), -log10_z[0])])
            backoff = np.concatenate([backoff, np.zeros(len(missing))]) \
                if backoff is not None else None
            bos = tree.active(np.array([[BOS_ID] + [-1] * (order - 2)]))[0, 1] \
                if order > 1 else -1
            gram = np.concatenate([[[BOS_ID]], gram])
            prob = np.concatenate([[arpa.NEVER], prob])
            if backoff is not None:
                backoff = np.concatenate([[node_backoff[bos] if bos >= 0 else 0.0], backoff])
        sections.append((n_words, gram, prob, backoff))
    counts = arpa.write_sections(out_path, vocab, sections)
    say(f"wrote {out_path}: " + ", ".join(f"{k}-grams {c:,}" for k, c in counts.items()))
    return counts
