"""``snm prune``: a complete, normalised, ARPA-exportable model of the size asked for,
its links scored by the relative entropy that removing each one causes."""

import dataclasses
import re

import numpy as np
import pytest
from support.models import build_model
from support.runs import train_argv

from snm.cli import main
from snm_core.io import model_files, tables
from snm_core.prune import criteria as prune, backoff as prune_backoff
from snm_core.arpa.backoff import run_locally
from snm_core.scoring.compact import compile_model, load_model, read_model_tables
from snm_core.prune.backoff import PruneJob
from snm_core.stages import manifests
from snm_core.text import hashing
from snm_core.text.vocab import BOS_ID


@pytest.fixture(scope="module")
def models(ngram_model, tagged_ngram_model):
    """The session's pooled and tagged 5-gram models (tests/conftest.py), and test lines."""
    return {"pooled": ngram_model[0], "tagged": tagged_ngram_model[0], "test": ngram_model[1]}


def links_of(model_dir):
    return manifests.Model.read(str(model_dir))["totals"]["links"]


@pytest.mark.parametrize("which", ["pooled", "tagged"])
def test_pruned_to_a_target_is_a_complete_normalised_model(models, which, tmp_path, capsys):
    source = models[which]
    before = links_of(source)
    target = before // 4
    out = tmp_path / "pruned"
    assert main(["prune", "--model", str(source), "--out", str(out),
                 "--target_links", str(target)]) == 0
    after = links_of(out)
    assert abs(after - target) <= max(target // 100, 2)  # an n-gram's tag copies go together
    model = load_model(str(out))
    rng = np.random.default_rng(1)
    words = model.vocab.words[3:]
    for context in [[], ["begin1"], models["test"][0].split()[:3]] + [
            list(rng.choice(words, size=rng.integers(1, 6))) for _ in range(6)]:
        assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-6), context
    card = (out / "model_card.md").read_text()
    assert "## Pruning" in card and f"{after:,} of {before:,} links kept" in card
    assert "bytes a link" in card and "layout hashed (4): hashed keys" in card
    # what is left is still a complete n-gram model: ARPA holds it, and KenLM scores
    # the export as snm does
    kenlm = pytest.importorskip("kenlm")
    arpa = tmp_path / "pruned.arpa"
    assert main(["export-arpa", "--model", str(out), "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    test = models["test"]
    kenlm_ppl = 10 ** (-sum(lm.score(s, bos=True, eos=True) for s in test)
                       / sum(len(s.split()) + 1 for s in test))
    ours = model.evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4
    unpruned = load_model(str(source)).evaluate_lines(test)["adjusted"]["perplexity"]
    assert ours > unpruned  # pruning costs something, and is deterministic: the same bytes
    # in partitions of 1 MiB of working memory (the budget less the process's), on two
    # threads; over the scratch a killed run left, which goes first
    again = tmp_path / "again"
    stale = again / "_scratch" / "entry3" / "00000.arrow"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"cut short")
    capsys.readouterr()
    assert main(["prune", "--model", str(source), "--out", str(again),
                 "--target_links", str(target), "--memory", "202M",
                 "--direct_running_mode=multi_threading", "--direct_num_workers=2"]) == 0
    printed = capsys.readouterr().out
    assert "in 1 partition(s)" not in printed
    assert f"removing {again / '_scratch'}, left by a run that did not finish" in printed
    assert not (again / "_scratch").exists()
    for name in sorted(p.name for p in out.glob("*.parquet")):
        assert (out / name).read_bytes() == (again / name).read_bytes()


def test_the_score_is_the_relative_entropy_of_removing_the_link(models, tmp_path):
    """Oracle: the model with one link removed, scored by the SNM itself; the KL divergence
    of its distribution from the full model's, in that link's context, weighted by the
    context's share of all contexts' training counts, is the link's score."""
    source = models["pooled"]
    features, matrix, manifest = read_model_tables(str(source))
    job = dataclasses.replace(PruneJob.plan(str(source), manifest, str(tmp_path / "scratch"),
                                            512 << 20), partitions=3)
    run_locally(job, [step for step in job.steps() if step[0] != "backward"])
    scored = [job.read(f"entry{job.order}", p, ["key", "score"]) for p in range(3)]
    score_of = dict(zip(np.concatenate([s["key"] for s in scored]).tolist(),
                        np.concatenate([s["score"] for s in scored]).tolist()))
    full = load_model(str(source))
    vocab = full.vocab
    # Contexts of the longest order: Model.distribution puts <S> before a context, which
    # is then out of the window.  A pooled model's feature keys are its contexts' keys.
    lengths = np.array([len(w) for w in features["words"].to_pylist()])
    row_feature = np.repeat(np.arange(features.num_rows), features["diversity"].to_numpy())
    candidates = np.flatnonzero(lengths[row_feature] == job.order - 1)
    total_count = features["count"].to_numpy().sum()
    rng = np.random.default_rng(3)
    for row in rng.choice(candidates, size=4, replace=False):
        feature = row_feature[row]
        out = tmp_path / f"minus-{row}"
        write_without_row(str(source), str(out), manifest, row)
        context = [vocab.word(int(w)) for w in features["words"][feature].as_py()
                   if w != BOS_ID]  # distribution adds <S>
        p = full.distribution(context).astype(np.float64)
        q = load_model(str(out)).distribution(context).astype(np.float64)
        kl = float(np.sum(p * np.log(p / q)))
        key = int(hashing.link_key(matrix["feature"][row].as_py(), matrix["word"][row].as_py()))
        weight = features["count"][feature].as_py() / total_count
        assert kl * weight == pytest.approx(score_of[key], rel=2e-3, abs=1e-12), context


def write_without_row(source, out, manifest, row):
    """The model with one matrix row (of the whole table) removed, renormalised."""
    prune.start_output(source, out)
    num_buckets = manifest["num_buckets"]
    first = links = features_left = 0
    for b in range(num_buckets):
        features, matrix = (model_files.read_bucket(source, table, b, num_buckets)
                            for table in ("features", "matrix"))
        keep = np.arange(first, first + matrix.num_rows) != row
        first += matrix.num_rows
        kept = prune.pruned_tables(features, matrix, keep)
        prune.write_bucket(out, b, num_buckets, *kept)
        features_left += kept[0].num_rows
        links += kept[1].num_rows
    pruned = prune.finish_output(out, manifest, links, features_left, {"criterion": "one link"})
    compile_model(out)
    return pruned


def test_the_cut_keeps_the_best_ranked_entries_up_to_the_target():
    """Oracle: all ranks sorted at once.  Effective scores with many ties (broken by
    order, then key), tag copies weighing an entry's rows, unigrams (+inf) kept whatever
    the target; the histograms and gathers of several partitions add up."""
    rng = np.random.default_rng(7)
    k = 30_000
    effective = np.where(rng.random(k) < 0.3, 1e-6, rng.lognormal(-12, 2, k))
    effective[:500] = np.inf
    ranked = {"key": rng.integers(0, 2 ** 64, k, dtype=np.uint64),
              "effective": effective, "rows": rng.integers(1, 4, k),
              "n": np.where(np.isinf(effective), 1, rng.integers(2, 6, k))}
    job = PruneJob(model="", scratch="", config="", order=5, num_buckets=1, partitions=1,
                   chunk_links=1)
    parts = np.array_split(rng.permutation(k), 4)

    def part(i):
        return {name: values[parts[i]] for name, values in ranked.items()}

    def histogram(level, prefix):
        return [sum(h) for h in zip(*(prune_backoff.rank_histogram(
            job.rank_words(part(i)), part(i)["rows"], level, prefix) for i in range(4)))]

    def gather(prefix):
        gathered = [prune_backoff.ranks_with_prefix(job.rank_words(part(i)), part(i)["rows"],
                                                    prefix) for i in range(4)]
        return (np.concatenate([w for w, _ in gathered], axis=1),
                np.concatenate([r for _, r in gathered]))

    best_first = np.lexsort((ranked["key"], ranked["n"], -ranked["effective"]))
    kept_rows = np.cumsum(ranked["rows"][best_first])
    for target, limit in ((20_000, 10 ** 6), (20_000, 50), (31_337, 3), (100, 10 ** 6),
                          (10 ** 9, 10)):
        cut = prune_backoff.select_cut(histogram, gather, target, limit)
        keeps = prune_backoff.KeepRule(cut=cut).keeps(job, ranked)
        count = max(int(np.searchsorted(kept_rows, target, side="right")), 500)
        expected = np.zeros(k, bool)
        expected[best_first[:count]] = True
        assert np.array_equal(keeps, expected), (target, limit)


def test_a_threshold_keeps_the_links_scored_at_least_that(models, tmp_path):
    out_low, out_high = tmp_path / "low", tmp_path / "high"
    assert main(["prune", "--model", str(models["pooled"]), "--out", str(out_low),
                 "--threshold", "1e-7"]) == 0
    assert main(["prune", "--model", str(models["pooled"]), "--out", str(out_high),
                 "--threshold", "1e-5"]) == 0
    assert links_of(models["pooled"]) > links_of(out_low) > links_of(out_high)


def test_bad_requests_are_one_line_errors(models, tmp_path, capsys):
    assert main(["prune", "--model", str(models["pooled"]), "--out", str(models["pooled"]),
                 "--target_links", "10"]) == 2
    assert "--out must differ from --model" in capsys.readouterr().err
    assert main(["prune", "--model", str(models["pooled"]), "--out", str(tmp_path / "x"),
                 "--target_links", "0"]) == 2
    assert "--target_links must be at least 1" in capsys.readouterr().err


def test_train_prunes_to_a_size_and_evaluates_the_pruned_model(tmp_path, capsys):
    from snm_core.text import synthetic
    root = tmp_path / "corpus"
    train, dev, test = synthetic.write_corpus(str(root), 600, 80, 80, seed=4)
    corpus = {"train": train, "dev": dev, "test": test}
    out = tmp_path / "run"
    assert main(["train", *train_argv(corpus, out), "--prune_to", "3000"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^prune +3,000 of .* s$", printed, re.MULTILINE), printed
    assert re.search(r"^eval .* s$", printed, re.MULTILINE), printed
    assert links_of(out / "pruned") == 3000
    evaluated = load_model(str(out / "pruned")).evaluate_lines(
        [line.strip() for line in open(test) if line.strip()])
    import json
    reports = json.loads((out / "eval.json").read_text())
    assert reports["adjusted"]["perplexity"] == pytest.approx(
        evaluated["adjusted"]["perplexity"], rel=1e-12)
    assert "## Pruning" in (out / "pruned" / "model_card.md").read_text()
    # a re-run skips everything; another size re-runs prune and eval only
    assert main(["train", *train_argv(corpus, out), "--prune_to", "3000"]) == 0
    assert capsys.readouterr().out.count("up to date") == 7
    assert main(["train", *train_argv(corpus, out), "--prune_to", "2000"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("up to date") == 5 and links_of(out / "pruned") == 2000
    # pruned as pocolm prunes, its discounts chosen on the run's join: prune and eval again
    backoff = json.loads((out / "eval.json").read_text())["adjusted"]["perplexity"]
    assert main(["train", *train_argv(corpus, out), "--prune_to", "2000",
                 "--prune_criterion", "reestimate"]) == 0
    assert capsys.readouterr().out.count("up to date") == 5
    pruning = manifests.Model.read(str(out / "pruned"))["pruning"]
    assert "re-estimated" in pruning["criterion"] and pruning["heldout"] == str(out / "join")
    assert links_of(out / "pruned") == 2000
    assert json.loads((out / "eval.json").read_text())["adjusted"]["perplexity"] != backoff
    assert main(["train", *train_argv(corpus, out), "--prune_criterion", "reestimate"]) == 2
    assert "--prune_criterion chooses how --prune_to prunes" in capsys.readouterr().err


# --- the mass criterion (pipelines/prune.py): any configuration, bucket by bucket ---------

@pytest.fixture(scope="module")
def skipgram_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("skip"), "skip5gram", tagged=True)


def test_rank_selection_keeps_the_best_ranked_links(tmp_path):
    """Oracle: sorting all ranks.  Buckets' histograms add up; a tolerance stops early
    but stays within it."""
    rng = np.random.default_rng(5)
    scores = np.concatenate([rng.lognormal(-12, 3, 40_000), np.full(3_000, 1e-6),
                             np.full(500, np.inf)])  # ties, and protected links
    keys = rng.integers(0, 2 ** 63, len(scores), dtype=np.int64).astype(np.uint64)
    shares = rng.choice([1.0, 0.5, 0.25], len(scores))
    ranks = prune.rank_keys(scores, shares, keys, rng.integers(0, 1000, len(scores)))
    buckets = np.array_split(rng.permutation(ranks), 7)

    def histogram(level, prefix):
        return sum(prune.rank_histogram(b, level, prefix) for b in buckets)

    ordered = np.sort(ranks)[::-1]
    for target in (1, 500, 501, 2_000, 12_345, 41_000, len(ranks) - 1):
        threshold, kept = prune.select_rank(histogram, target)
        assert kept == target == np.count_nonzero(ranks >= np.uint64(threshold))
        assert np.uint64(threshold) <= ordered[target - 1]
        tolerance = target // 100
        threshold, kept = prune.select_rank(histogram, target, tolerance)
        assert abs(kept - target) <= tolerance
        assert kept == np.count_nonzero(ranks >= np.uint64(threshold))
    assert prune.select_rank(histogram, 10 ** 9) == (0, len(ranks))
    # a higher score is a higher rank, whatever the adjusted mass and key; then a higher
    # adjusted mass
    assert prune.rank_keys([2e-9], [0.1], [0], [0])[0] > \
        prune.rank_keys([1e-9], [1.0], [2 ** 63], [7])[0]
    assert prune.rank_keys([1e-9], [0.5], [0], [0])[0] > \
        prune.rank_keys([1e-9], [0.4], [2 ** 63], [7])[0]


def test_link_masses_are_the_training_and_adjusted_masses(skipgram_model):
    """Oracle: per link from the model's tables, in Python; the held-out text's features
    weigh more."""
    features, matrix, manifest = read_model_tables(str(skipgram_model[0]))
    events = manifest["count_totals"]["events"]
    touched = np.unique(features["feature"].to_numpy()[::3])
    masses = prune.link_masses(features, matrix, events, touched, heldout_weight=5.0)
    links = matrix.to_pylist()
    touched_set = set(touched.tolist())
    link = 0
    for f in features.to_pylist():
        weight = (5.0 if f["feature"] in touched_set else 1.0) / events
        for _ in range(f["diversity"]):
            c_wf = links[link]["count"] / f["count"]
            assert masses["count"][link] == pytest.approx(weight * f["count"] * c_wf)
            assert masses["adjusted"][link] == pytest.approx(
                weight * f["count"] * links[link]["m"] / f["m_star"], rel=1e-6)
            link += 1
    assert link == matrix.num_rows
    # the criteria rank by one mass, ties broken by the other; the empty feature is kept
    empty = manifest["feature_types"].index("0-gram")
    for criterion, (primary, _) in prune.BUCKET_CRITERIA.items():
        scoring = prune.BucketScoring(criterion, events, (empty,), 5.0)
        ranks, protected = scoring.ranks(features, matrix, touched)
        assert protected.any() and (ranks[protected] >= prune.score_rank(np.inf)).all()
        scores = masses[primary][~protected].astype(np.float32)
        order = np.argsort(ranks[~protected], kind="stable")
        assert (np.diff(scores[order]) >= 0).all()


def test_a_skipgram_model_pruned_by_mass_is_complete_and_normalised(skipgram_model, tmp_path):
    source, test = skipgram_model
    before = links_of(source)
    target = before // 5
    out = tmp_path / "pruned"
    assert main(["prune", "--model", str(source), "--out", str(out),
                 "--target_links", str(target)]) == 0  # mass: the default for skip-grams
    after = links_of(out)
    assert abs(after - target) <= target // 100
    features, matrix, manifest = read_model_tables(str(out))
    assert manifest["pruning"]["criterion"].startswith("mass")
    assert manifest["pruning"]["heldout"] is None
    # exact renormalisation: each feature's M_f* is the sum of the links it kept
    sums = np.add.reduceat(matrix["m"].to_numpy().astype(np.float64),
                           np.r_[0, np.cumsum(features["diversity"].to_numpy())[:-1]])
    assert np.allclose(features["m_star"].to_numpy(), sums, rtol=1e-12)
    assert (features["diversity"].to_numpy() > 0).all()
    # the empty feature's links all stay
    source_features, source_matrix, _ = read_model_tables(str(source))
    empty = manifest["feature_types"].index("0-gram")
    kept_empty = features.filter(features["type"].to_numpy() == empty)
    was_empty = source_features.filter(source_features["type"].to_numpy() == empty)
    assert kept_empty["diversity"].to_pylist() == was_empty["diversity"].to_pylist()
    model = load_model(str(out))
    words = model.vocab.words[3:]
    rng = np.random.default_rng(2)
    for context in [[], test[0].split()[:4]] + [
            list(rng.choice(words, size=rng.integers(1, 8))) for _ in range(4)]:
        assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-6), context
    pruned_ppl = model.evaluate_lines(test)["adjusted"]["perplexity"]
    assert pruned_ppl > load_model(str(source)).evaluate_lines(test)["adjusted"]["perplexity"]
    # the same bytes from a run on two threads
    again = tmp_path / "again"
    assert main(["prune", "--model", str(source), "--out", str(again), "--target_links",
                 str(target), "--direct_running_mode=multi_threading",
                 "--direct_num_workers=2"]) == 0
    for name in sorted(p.name for p in out.glob("*.parquet")):
        assert (out / name).read_bytes() == (again / name).read_bytes()


def test_mass_prunes_ngram_models_too_and_backoff_refuses_skipgrams(models, skipgram_model,
                                                                     tmp_path, capsys):
    out = tmp_path / "mass"
    target = links_of(models["pooled"]) // 3
    assert main(["prune", "--model", str(models["pooled"]), "--out", str(out),
                 "--target_links", str(target), "--criterion", "mass"]) == 0
    assert abs(links_of(out) - target) <= target // 100
    # without the suffixes of what it keeps, ARPA cannot hold it: one line says why
    assert main(["export-arpa", "--model", str(out), "--out", str(tmp_path / "m.arpa")]) == 2
    assert "--criterion backoff to export ARPA" in capsys.readouterr().err
    assert main(["prune", "--model", str(skipgram_model[0]), "--out", str(tmp_path / "b"),
                 "--target_links", "100", "--criterion", "backoff"]) == 2
    assert "needs an n-gram model" in capsys.readouterr().err


def test_heldout_features_weigh_more_and_must_match_the_model(skipgram_model, models,
                                                              tmp_path, capsys):
    source = skipgram_model[0]
    heldout = source.parent / "heldout"
    target = links_of(source) // 5
    kept_share = {}
    for name, extra in (("plain", []), ("heldout", ["--heldout", str(heldout)])):
        out = tmp_path / name
        assert main(["prune", "--model", str(source), "--out", str(out),
                     "--target_links", str(target), *extra]) == 0
        features = read_model_tables(str(out))[0]
        touched = np.isin(features["feature"].to_numpy(),
                          tables.read_tables(str(heldout), manifests.Join.read(
                              str(heldout)), "small_m", tables.SMALL_M)["feature"]
                          .to_numpy())
        kept_share[name] = features["diversity"].to_numpy()[touched].sum() / links_of(out)
    assert kept_share["heldout"] > kept_share["plain"]
    manifest = manifests.Model.read(str(tmp_path / "heldout"))
    assert manifest["pruning"]["heldout"] == str(heldout)
    assert manifest["pruning"]["heldout_weight"] == 8.0
    assert "weighed 8 times more" in (tmp_path / "heldout" / "model_card.md").read_text()
    other = models["pooled"].parent / "heldout"  # joined on another model's counts
    assert main(["prune", "--model", str(source), "--out", str(tmp_path / "x"),
                 "--target_links", "100", "--heldout", str(other)]) == 2
    assert "differs from the model's" in capsys.readouterr().err
    assert main(["prune", "--model", str(source), "--out", str(tmp_path / "x"),
                 "--target_links", "100", "--heldout_weight", "3"]) == 2
    assert "give that too" in capsys.readouterr().err


def test_train_fits_a_skipgram_model_at_a_number_of_links(tmp_path, capsys):
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), 600, 80, 80, seed=4)
    argv = train_argv({"train": train, "dev": dev, "test": test}, tmp_path / "run")
    argv[argv.index("5gram")] = "skip5gram"
    assert main(["train", *argv, "--prune_to", "5000"]) == 0
    assert re.search(r"^eval .* s$", capsys.readouterr().out, re.MULTILINE)
    # fitted on counts selected for 5000 links (pipelines/select.py): nothing to prune
    manifest = manifests.Model.read(str(tmp_path / "run" / "model"))
    selected = manifests.Count.read(str(tmp_path / "run" / "selected")).totals["links"]
    assert manifest["totals"]["links"] == selected <= 5000
    assert 4000 < selected  # within a step's share of the target


# --- to a size in bytes (--target_size, train --prune_to SIZE) -----------------------------

@pytest.mark.parametrize("layout, criterion", [("packed", "mass"), ("hashed", "backoff")])
def test_pruned_to_a_size_is_at_most_it_and_near(models, layout, criterion, tmp_path, capsys):
    """The scoring directory (what snm compact --out ships) is at most the size asked and,
    unless the layout's index doubles in the way, within 3% below it; a larger size keeps
    more links; the card and manifest say what was asked and found."""
    from snm_core.scoring.compact import scoring_bytes, write_scoring_directory
    source = models["pooled"]
    full = tmp_path / "full"
    write_scoring_directory(str(source), layout, str(full))
    whole = sum(f.stat().st_size for f in full.rglob("*") if f.is_file()
                and f.name != "model_card.md")
    kept = []
    for share in (0.4, 0.7):
        target = int(whole * share)
        out = tmp_path / f"{share}"
        assert main(["prune", "--model", str(source), "--out", str(out), "--target_size",
                     str(target), "--layout", layout, "--criterion", criterion]) == 0
        assert "bytes for --target_size" in capsys.readouterr().out
        size = scoring_bytes(str(out))
        shipped = tmp_path / f"{share}-shipped"
        write_scoring_directory(str(out), layout, str(shipped))
        assert size >= sum(f.stat().st_size for f in shipped.rglob("*") if f.is_file()
                           and f.name != "model_card.md") > 0.95 * size
        pruning = manifests.Model.read(str(out))["pruning"]
        assert size <= target and pruning["target_size"] == target
        assert size - 1024 <= pruning["size_rounds"][-1]["bytes"] <= size
        # within 3% below the target less the 1 KiB kept for the manifest's record of it
        assert size >= 0.97 * (target - 1024) or any(r["bytes"] > target - 1024
                                                     for r in pruning["size_rounds"])
        assert f"at most {target:,} bytes" in (out / "model_card.md").read_text()
        kept.append(links_of(out))
    assert kept[0] < kept[1] < links_of(source)


def test_sizes_that_cannot_be_met_are_one_line_errors(models, tmp_path, capsys):
    source = str(models["pooled"])
    assert main(["prune", "--model", source, "--out", str(tmp_path / "x"), "--target_size",
                 "2K", "--layout", "packed"]) == 2
    assert "no pruning met it" in capsys.readouterr().err
    assert main(["prune", "--model", source, "--out", str(tmp_path / "y"), "--target_size",
                 "lots"]) == 2
    assert "expected a size such as 200M" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prune", "--model", source, "--out", str(tmp_path / "z"), "--target_size",
              "1M", "--target_links", "5"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_train_prunes_to_a_size_of_its_scoring_directory(tmp_path, capsys):
    from snm_core.scoring.compact import scoring_bytes
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), 600, 80, 80, seed=4)
    corpus = {"train": train, "dev": dev, "test": test}
    out = tmp_path / "run"
    assert main(["train", *train_argv(corpus, out), "--layout", "packed"]) == 0
    whole = scoring_bytes(str(out / "model"))
    capsys.readouterr()
    target = whole // 2
    assert main(["train", *train_argv(corpus, out), "--layout", "packed",
                 "--prune_to", f"{target / 1024:.1f}K"]) == 0
    # apply again: a model to prune is stored hashed
    assert capsys.readouterr().out.count("up to date") == 4
    asked = int(float(f"{target / 1024:.1f}") * 1024)
    assert manifests.Model.read(str(out / "pruned"))["pruning"]["target_size"] == asked
    assert scoring_bytes(str(out / "pruned")) <= asked
    assert main(["train", *train_argv(corpus, out), "--prune_to", "many"]) == 2
    assert "--prune_to many: expected a size" in capsys.readouterr().err
