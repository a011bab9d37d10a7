"""``snm prune --criterion reestimate``: the n-gram model estimated again from its counts
(count moving), pruned with E-M between rounds, written as a normalised SNM model that
``snm eval`` and the ARPA export read."""

import collections

import numpy as np
import pytest

from snm.cli import main
from snm_core.arpa.backoff import plain_extractor
from snm_core.fit.heldout import read_events
from snm_core.prune import reestimate
from snm_core.scoring.compact import load_model, read_model_tables
from snm_core.stages import manifests

DISCOUNTS = {1: (0.7, 0.5, 0.3, 0.1), 2: (0.6, 0.4, 0.3, 0.2), 3: (0.8, 0.5, 0.2, 0.1),
             4: (0.75, 0.45, 0.35, 0.05), 5: (0.9, 0.6, 0.3, 0.2)}


@pytest.fixture(scope="module")
def pooled(ngram_model):
    """The session's pooled 5-gram model (count thresholds of 2), its tables and n-grams."""
    model_dir = ngram_model[0]
    manifest = manifests.Model.read(str(model_dir))
    table = reestimate.read_table(str(model_dir), manifest["num_buckets"],
                                  plain_extractor(manifest["config"]).keys_for)
    return model_dir, manifest, table


def ngram_tuples(model_dir, table):
    """Per order, each n-gram of ``table`` as its word tuple (context words, then word),
    read from the model's rows."""
    features, matrix, _ = read_model_tables(str(model_dir))
    words = features["words"].to_pylist()
    feature_of_row = np.repeat(np.arange(features.num_rows), features["diversity"].to_numpy())
    row_word = matrix["word"].to_numpy()
    return [None] + [[tuple(words[feature_of_row[r]]) + (int(row_word[r]),)
                      for r in table.link_rows[n]] for n in range(1, table.order + 1)]


def oracle_probabilities(counts, discounts, order):
    """Count moving by dictionaries, as the module's docstring states it: ``counts`` maps
    n-gram tuples to C(h, w); returns P(w | h) of every n-gram."""
    by_order = collections.defaultdict(dict)
    for gram, c in counts.items():
        by_order[len(gram)][gram] = float(c)
    total = dict(by_order[order])
    pieces = {g: sorted([1.0] * min(int(c), 3), reverse=True) for g, c in total.items()}
    c_, D, T = {}, collections.Counter(), collections.Counter()
    for n in range(order, 0, -1):
        moved_total, moved_pieces = collections.Counter(), collections.defaultdict(list)
        for gram, t in total.items():
            p = (pieces[gram] + [0.0, 0.0, 0.0])[:3]
            d1, d2, d3, d4 = discounts[n]
            d = d1 * p[0] + d2 * p[1] + d3 * p[2] + d4 * max(t - sum(p), 0.0)
            c_[gram] = t - d
            D[gram[:-1]] += d
            T[gram[:-1]] += t
            if n > 1:
                moved_total[gram[1:]] += d
                moved_pieces[gram[1:]] += [d1 * p[0], d2 * p[1], d3 * p[2]]
        if n == 1:
            break
        lower = by_order[n - 1]
        extended = collections.Counter()
        for gram in by_order[n]:
            extended[gram[1:]] += by_order[n][gram]
        total, pieces = {}, {}
        for gram, c in lower.items():
            uncovered = max(c - extended[gram], 0.0)
            total[gram] = moved_total[gram] + uncovered
            pieces[gram] = sorted([x for x in moved_pieces[gram] if x > 0]
                                  + [1.0] * min(int(uncovered), 3), reverse=True)[:3]
    # half the unigram's back-off mass to <UNK> (id 2), half spread over the words
    unigrams = [g for g in c_ if len(g) == 1]
    unknown = 0.5 * D[()] if (2,) in c_ else 0.0
    for g in unigrams:
        c_[g] += (D[()] - unknown) / len(unigrams)
    if unknown:
        c_[(2,)] += unknown
    D[()] = 0.0

    def prob(gram):
        if len(gram) == 1:
            return c_[gram] / T[()]
        h = gram[:-1]
        lower = prob(gram[1:])
        if h not in T:
            return lower
        return (c_.get(gram, 0.0) + D[h] * lower) / T[h]

    return {g: prob(g) for g in counts}, {h for h in T}


def test_count_moving_gives_the_probabilities_of_a_dictionary_oracle(pooled):
    model_dir, _, table = pooled
    grams = ngram_tuples(model_dir, table)
    counts = {g: c for n in range(1, table.order + 1) for g, c in zip(grams[n], table.counts[n])}
    expected, contexts = oracle_probabilities(counts, DISCOUNTS, table.order)
    P = reestimate.probabilities(table, reestimate.discounted(table, DISCOUNTS))
    for n in range(1, table.order + 1):
        ours = dict(zip(grams[n], P[n]))
        for gram in grams[n]:
            assert ours[gram] == pytest.approx(expected[gram], rel=1e-9), gram
    # every context's distribution over the words the unigrams predict sums to 1
    words = [g[0] for g in grams[1]]
    prob_of = {g: p for n in range(1, table.order + 1) for g, p in zip(grams[n], P[n])}

    def full(context, word):
        for start in range(len(context) + 1):
            if context[start:] + (word,) in prob_of:
                gram = context[start:] + (word,)
                break
        value = prob_of[gram]
        model = reestimate.discounted(table, DISCOUNTS)
        for shorter in range(start - 1, -1, -1):  # longer contexts back off to gram's
            h = context[shorter:]
            if h in contexts:
                k = len(h) + 1
                state = int(np.flatnonzero([g[:-1] == h for g in grams[k]])[0])
                s = table.state[k][state]
                value = model.D[k][s] * value / model.T[k][s]
        return value

    rng = np.random.default_rng(5)
    longest = [g[:-1] for g in grams[table.order]]
    for i in rng.choice(len(longest), size=5, replace=False):
        assert sum(full(longest[i], w) for w in words) == pytest.approx(1.0, abs=1e-9)


def test_the_unpruned_model_is_a_fixed_point_of_em(pooled):
    _, _, table = pooled
    model = reestimate.discounted(table, DISCOUNTS)
    stats = reestimate.float_stats(table, model)
    total = sum(c.sum() for c in model.c[1:])
    assert sum(s.sum() for s in stats[0][1:]) == pytest.approx(total, rel=1e-9)
    again = reestimate.em_step(table, model, stats)
    for n in range(1, table.order + 1):
        np.testing.assert_allclose(again.c[n], model.c[n], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(again.T[n], model.T[n], rtol=1e-8, atol=1e-10)


def oracle_em_step(table, model, stats):
    """One E-M iteration n-gram by n-gram: each n-gram's stat (the expected count of its
    word after its context) shared among the states of its back-off path by their part
    of P(w | h), each part counted for the n-gram it reaches and as backed off by every
    context it passed through."""
    N = table.order
    counts_stats, backoff_stats = stats
    counts = [None] + [[0.0] * len(x) for x in model.c[1:]]
    backoff = [None] + [list(x) for x in backoff_stats[1:]]
    for n in range(1, N + 1):
        for j in range(len(model.c[n])):
            path = [(n, j)]              # (order, n-gram) from the longest down
            while path[-1][0] > 1:
                k, i = path[-1]
                path.append((k - 1, int(table.suffix[k][i])))
            parts, weight = [], 1.0       # weight: the back-off factors passed so far
            for k, i in path:
                h = table.state[k][i]
                parts.append(weight * model.c[k][i] / model.T[k][h])
                weight *= model.D[k][h] / model.T[k][h]
            total = sum(parts)
            if total <= 0:
                continue
            for step, (k, i) in enumerate(path):
                share = counts_stats[n][j] * parts[step] / total
                counts[k][i] += share
                for kk, ii in path[:step]:   # the contexts backed off from to reach it
                    backoff[kk][table.state[kk][ii]] += share
    return counts, backoff


def test_em_reestimates_a_pruned_model_as_an_oracle_does(pooled):
    _, _, table = pooled
    model = reestimate.discounted(table, DISCOUNTS)
    stats = reestimate.float_stats(table, model)
    pruned = reestimate.prune_pass(table, model.copy(), 1.0)
    assert pruned.num_kept() < model.num_kept()
    again = reestimate.em_step(table, pruned, stats)
    counts, backoff = oracle_em_step(table, pruned, stats)
    for n in range(1, table.order + 1):
        np.testing.assert_allclose(again.c[n], counts[n], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(again.D[n], backoff[n], rtol=1e-9, atol=1e-12)
    assert any(not np.allclose(again.c[n], pruned.c[n]) for n in range(1, table.order + 1))


def test_pruning_keeps_the_target_closed_and_normalised(pooled):
    _, _, table = pooled
    model = reestimate.discounted(table, DISCOUNTS)
    target = table.num_links // 3
    pruned = reestimate.prune(table, model, target)
    assert pruned.num_kept() == target
    for n in range(2, table.order + 1):
        kept = pruned.c[n] > 0
        # every kept n-gram's suffix, and its context's own n-gram, are kept
        assert (pruned.c[n - 1][table.suffix[n][kept]] > 0).all()
        if n < table.order:
            states = np.unique(table.state[n + 1][pruned.c[n + 1] > 0])
            own = table.own[n][states]
            assert (pruned.c[n][own[own >= 0]] > 0).all()
    # each context's counts and back-off mass add up to its total
    for n in range(1, table.order + 1):
        sums = np.bincount(table.state[n], weights=pruned.c[n], minlength=table.num_states[n])
        np.testing.assert_allclose(sums + pruned.D[n], pruned.T[n], rtol=1e-9)


def oracle_pass(table, model, threshold):
    """One pruning pass written from pocolm's description, n-gram by n-gram: the counts,
    back-off masses and totals after it."""
    import math
    N = table.order
    c = [None] + [list(x) for x in model.c[1:]]
    D = [None] + [list(x) for x in model.D[1:]]
    T = [None] + [list(x) for x in model.T[1:]]
    P = [None, [x / T[1][0] for x in c[1]]]
    for n in range(2, N + 1):
        P.append([(c[n][i] + D[n][h] * P[n - 1][s]) / T[n][h]
                  for i, (h, s) in enumerate(zip(table.state[n], table.suffix[n]))])
    protected = [set() for _ in range(N + 1)]
    for n in range(2, N):
        for i in range(len(c[n + 1])):
            own = table.own[n][table.state[n + 1][i]]
            if c[n + 1][i] > 0 and own >= 0:
                protected[n].add(int(own))
    for n in range(N, 1, -1):
        shadowed = ({int(table.suffix[n + 1][i]) for i in range(len(c[n + 1])) if c[n + 1][i] > 0}
                    if n < N else set())
        lower_state = table.state[n - 1]
        visit = sorted(range(len(c[n])), key=lambda i: (lower_state[table.suffix[n][i]],
                                                        table.state[n][i], i))
        for i in visit:
            if c[n][i] <= 0 or i in protected[n] or i in shadowed:
                continue
            h, s = table.state[n][i], table.suffix[n][i]
            hs = lower_state[s]
            share = D[n - 1][hs] * P[n - 2][table.suffix[n - 1][s]] if n > 2 else 0.0
            count, a, total, backoff = c[n][i], c[n - 1][s] + share, T[n - 1][hs], D[n][h]
            # a's count here with its back-off share, the other words backed off here
            # (b), the rest of the back-off state (c), a's count there from elsewhere
            mine = count + backoff * a / total
            b = backoff * (total - a) / total
            rest = total - a - b
            a_elsewhere = a - backoff * a / total
            change = mine * math.log((backoff + count) * (a + count) / (total + count) / mine)
            if a_elsewhere > 0:
                change += a_elsewhere * math.log((a + count) / (total + count) / (a / total))
            if b > 0:
                change += b * math.log((backoff + count) / (total + count) / (backoff / total))
            if rest > 0:
                change += rest * math.log(total / (total + count))
            if -change < threshold:
                c[n][i] = 0.0
                D[n][h] += count
                c[n - 1][s] += count
                T[n - 1][hs] += count
    return c, D, T


def test_a_pruning_pass_is_sequential_as_pocolm_s(pooled):
    """Each n-gram is scored against the model as the n-grams before it left it."""
    _, _, table = pooled
    model = reestimate.discounted(table, DISCOUNTS)
    for threshold in (0.3, 3.0):
        c, D, T = oracle_pass(table, model, threshold)
        passed = reestimate.prune_pass(table, model.copy(), threshold)
        for n in range(1, table.order + 1):
            np.testing.assert_allclose(passed.c[n], c[n], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(passed.D[n], D[n], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(passed.T[n], T[n], rtol=1e-9, atol=1e-12)
        assert model.num_kept() > passed.num_kept() > len(model.c[1])


def test_heldout_events_are_scored_as_the_float_model_says(pooled):
    """The held-out perplexity the discounts are chosen on is the written model's."""
    model_dir, manifest, table = pooled
    join = model_dir.parent / "heldout"
    events = read_events(str(join))
    scored = reestimate.heldout_events(table, events.ptr, events.keys, events.target)
    model = reestimate.discounted(table, DISCOUNTS)
    logp = reestimate.heldout_log_probs(table, model, scored)
    assert np.isfinite(logp).mean() > 0.9


def test_discounts_chosen_on_the_pruned_model_prune_it_no_worse(pooled):
    """The search on the pruned model's held-out perplexity returns the model its
    discounts prune to, no worse on the held-out events than where it started."""
    model_dir, manifest, table = pooled
    events = read_events(str(model_dir.parent / "heldout"))
    events = reestimate.heldout_events(table, events.ptr, events.keys, events.target)
    target = manifest["totals"]["links"] // 3
    start = reestimate.prune(table, reestimate.discounted(table, DISCOUNTS), target)
    before = reestimate.heldout_perplexity(table, start, events)
    said = []
    discounts, model, after = reestimate.tune_pruned_discounts(table, events, DISCOUNTS,
                                                               target, said.append)
    assert after == pytest.approx(reestimate.heldout_perplexity(table, model, events))
    assert after <= before and discounts != DISCOUNTS
    assert model.num_kept() == target
    again = reestimate.prune(table, reestimate.discounted(table, discounts), target)
    for n in range(1, table.order + 1):
        np.testing.assert_array_equal(again.c[n], model.c[n])
    assert any("order 5's D1" in line for line in said)
    # two processes try a parameter's steps at once and make the same choices
    in_two = reestimate.tune_pruned_discounts(table, events, DISCOUNTS, target, workers=2)
    assert in_two[0] == discounts and in_two[2] == after
    for n in range(1, table.order + 1):
        np.testing.assert_array_equal(in_two[1].c[n], model.c[n])


def test_snm_prune_reestimate_writes_a_model_eval_and_arpa_agree_on(pooled, ngram_model,
                                                                    tmp_path, capsys):
    model_dir, manifest, table = pooled
    target = manifest["totals"]["links"] // 3
    out = tmp_path / "pruned"
    argv = ["prune", "--model", str(model_dir), "--out", str(out), "--target_links",
            str(target), "--criterion", "reestimate", "--heldout",
            str(model_dir.parent / "heldout")]
    assert main(argv) == 0
    pruned = manifests.Model.read(str(out))
    assert pruned["totals"]["links"] == target
    assert "re-estimated" in pruned["pruning"]["criterion"]
    model = load_model(str(out))
    test = ngram_model[1]
    for context in [[], ["begin1"], test[0].split()[:3], test[5].split()[:4]]:
        assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-5), context
    kenlm = pytest.importorskip("kenlm")
    arpa = tmp_path / "pruned.arpa"
    assert main(["export-arpa", "--model", str(out), "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    kenlm_ppl = 10 ** (-sum(lm.score(s, bos=True, eos=True) for s in test)
                       / sum(len(s.split()) + 1 for s in test))
    ours = model.evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4
    # the same bytes again
    again = tmp_path / "again"
    assert main(argv[:4] + [str(again)] + argv[5:]) == 0
    for name in sorted(p.name for p in out.glob("*.parquet")):
        assert (out / name).read_bytes() == (again / name).read_bytes()


def test_models_it_cannot_reestimate_are_one_line_errors(tagged_ngram_model, ngram_model,
                                                         tmp_path, capsys):
    for source, flags, message in [
            (tagged_ngram_model[0], ["--target_links", "100"], "needs a pooled model"),
            (ngram_model[0], ["--threshold", "0.1"], "not to a --threshold")]:
        capsys.readouterr()
        assert main(["prune", "--model", str(source), "--out", str(tmp_path / "x"),
                     "--criterion", "reestimate", *flags]) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
