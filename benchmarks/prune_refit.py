"""Pruned SNM 5-gram models fitted again on the links they keep, and the SNM's
probabilities on pocolm's choice of n-grams.

    python benchmarks/prune_refit.py                    # kernel, pocolm's sizes
    python benchmarks/prune_refit.py --corpus mix       # mix pooled, 15% and 2.8% of its links
    python benchmarks/prune_refit.py --pocolm_arpa $POCOLM_WORK/lm5_prune1116762.arpa
    POCOLM=$POCOLM_DIR python benchmarks/prune_refit.py  # benchmarks/prune.py's pocolm ARPAs

`snm train --config 5gram` once on the corpus (kernel: train.txt.gz; mix: its four
training files pooled, untagged, through one glob; dev.txt held out, test.txt, the
corpus's vocab.txt), then for each target size T (default kernel: pocolm's 1,116,762
and 202,890 links; mix: 15% and 2.8% of the model's links, rounded down), each scored
by `snm eval` on test.txt (the runs under --work, by default benchmarks/work/prune_refit/):

* one-shot: `snm prune --criterion backoff --target_links T` of the trained model;
* refit at 2x then pruned: the trained model pruned to 2T, the run's count restricted
  to the links it kept (:func:`restrict_count`), `snm join` (dev.txt), `snm fit` and
  `snm apply` on that count, and the model so fitted pruned to T;
* fitted again at the size: the same, then the count restricted again to the links of
  that last prune, joined, fitted and applied;
* residual counts fitted: the one-shot prune's count restricted, each link's and
  feature's count less its kept extensions' (:func:`residual_count`), joined, fitted
  and applied.

On kernel, with a pocolm pruned ARPA (``--pocolm_arpa PATH``, or with POCOLM set the
``lm5_prune*.arpa`` that ``POCOLM=... benchmarks/prune.py`` made under its work
directory), the unpruned SNM is exported (`snm export-arpa`) and given the n-grams of
pocolm's model, and those of the SNM's own one-shot prune at the closest target, with
the unpruned model's probabilities and back-off weights recomputed so each context
normalises (:func:`renormalised_subset`); each ARPA is scored by the `kenlm` module
beside pocolm's own model.  Prints two tables and appends to benchmarks/results.jsonl.
"""

import argparse
import glob
import json
import math
import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (  # noqa: E402
    MODE,
    WORK,
    arpa_ngrams,
    corpus,
    print_table,
    record,
    run_measured,
)
from benchmarks.prune import kenlm_perplexity, links_of, snm, snm_perplexity  # noqa: E402
from snm_core.count import continuation  # noqa: E402
from snm_core.io.arrays import isin_sorted, run_starts, stable_argsort  # noqa: E402
from snm_core.stages.manifests import write_manifest  # noqa: E402
from snm_core.text import hashing  # noqa: E402
from snm_core.text.config import load_config  # noqa: E402
from snm_core.text.features import FeatureExtractor  # noqa: E402

#: Default targets: kernel's are pocolm's pruned sizes, mix's fractions of its links.
KERNEL_TARGETS = (1_116_762, 202_890)
MIX_FRACTIONS = (0.15, 0.028)


def trained(name, work):
    """The directory of an `snm train --config 5gram` run on corpus ``name`` (made once;
    mix's training files pooled through one glob, untagged)."""
    run = os.path.join(work, f"{name}-5gram")
    if not os.path.exists(os.path.join(run, "eval.json")):
        train = (os.path.join(corpus("mix", "train"), "*.txt.gz") if name == "mix"
                 else corpus(name, "train.txt.gz"))
        run_measured(snm("train", "--config", "5gram", "--train", train,
                         "--heldout", corpus(name, "dev.txt"), "--test", corpus(name, "test.txt"),
                         "--vocab", corpus(name, "vocab.txt"), "--out", run),
                     log=run + ".log")
    return run


def prune(model, target, out):
    """``model`` pruned by back-off relative entropy to ``target`` links, in ``out``."""
    run_measured(snm("prune", "--model", model, "--out", out, "--target_links", str(target),
                     "--criterion", "backoff", *MODE), log=out + ".log")
    return out


def link_keys(features, words):
    """One uint64 a (feature, word) pair: the feature's rank among ``features``' distinct
    values in the high 32 bits, the word in the low (feature keys are hashes, 64 bits)."""
    _, ranks = np.unique(features, return_inverse=True)
    return (ranks.astype(np.uint64) << np.uint64(32)) | words.astype(np.uint64)


def restrict_count(count, model, out):
    """The count directory ``count`` restricted to the links of ``model`` (a model
    directory of the same buckets), written to ``out``: a link is kept when the model
    has its (feature, word); a feature when it keeps a link, its diversity then the
    number it keeps, its C(f,*) and the links' continuation counts as counted."""
    with open(os.path.join(count, "manifest.json")) as f:
        manifest = json.load(f)
    manifest.pop("checksums", None)
    os.makedirs(out, exist_ok=True)
    totals = {"links": 0, "features": 0, "link_count_sum": 0}
    for name in manifest["files"]:
        if name.startswith("features-"):
            continue  # written with its bucket's links
        if not name.startswith("links-"):
            shutil.copy2(os.path.join(count, name), os.path.join(out, name))
            continue
        links = pq.read_table(os.path.join(count, name))
        kept = pq.read_table(os.path.join(model, name), columns=["feature", "word"])
        keys = link_keys(np.concatenate([links["feature"].to_numpy(),
                                         kept["feature"].to_numpy()]),
                         np.concatenate([links["word"].to_numpy(), kept["word"].to_numpy()]))
        links = links.filter(pa.array(np.isin(keys[:links.num_rows], keys[links.num_rows:])))
        features_name = "features-" + name[len("links-"):]
        features = pq.read_table(os.path.join(count, features_name))
        kept_features, kept_links = np.unique(links["feature"].to_numpy(), return_counts=True)
        keys = features["feature"].to_numpy()
        at = np.searchsorted(kept_features, keys)
        has_links = at < len(kept_features)
        has_links[has_links] = kept_features[at[has_links]] == keys[has_links]
        diversity = np.zeros(len(keys), np.int64)
        diversity[has_links] = kept_links[at[has_links]]
        column = features.schema.get_field_index("diversity")
        features = features.set_column(
            column, "diversity", pa.array(diversity, type=features.schema.field(column).type)
        ).filter(pa.array(has_links))
        pq.write_table(links, os.path.join(out, name))
        pq.write_table(features, os.path.join(out, features_name))
        totals["links"] += links.num_rows
        totals["features"] += features.num_rows
        totals["link_count_sum"] += int(links["count"].to_numpy().sum())
    manifest["totals"].update(totals)
    write_manifest(manifest, out)
    return out


def residual_count(count, out):
    """The restricted count ``count`` with each link's count less those of the kept links
    one word longer that extend it (the events its extensions no longer predict), and
    each feature's C(f,*) less the counts of the kept links that extend it: the lower
    orders re-estimated on the events pruning leaves to them.  A count that falls to 0
    (every event predicted by a kept extension) is kept at 1, so the model stays
    suffix-closed."""
    with open(os.path.join(count, "manifest.json")) as f:
        manifest = json.load(f)
    manifest.pop("checksums", None)
    extractor = FeatureExtractor(load_config("5gram"))
    parents = continuation.parent_types(extractor.config)
    names = sorted(name for name in manifest["files"] if name.startswith("links-"))
    tables_of, by_link, by_feature = {}, [], []
    for name in names:
        links = pq.read_table(os.path.join(count, name))
        features = pq.read_table(os.path.join(count, "features-" + name[len("links-"):]))
        tables_of[name] = links, features
        parent_feature, parent_word = continuation.extension_names(features, links, extractor,
                                                                   parents)
        parent_link = hashing.link_key(parent_feature, parent_word)
        extends = np.repeat(parents[features["type"].to_numpy()] >= 0,
                            features["diversity"].to_numpy())
        counts = links["count"].to_numpy()[extends]
        by_link.append((parent_link, counts))
        by_feature.append((parent_feature, counts))

    def summed(pairs):
        order, keys = stable_argsort(np.concatenate([k for k, _ in pairs]), return_sorted=True)
        counts = np.concatenate([c for _, c in pairs])[order]
        starts = run_starts(keys)
        return keys[starts], np.add.reduceat(counts, starts)

    def less(keys, values, taken):
        found = isin_sorted(keys, taken[0])
        out = values.copy()
        out[found] -= taken[1][np.searchsorted(taken[0], keys[found])]
        return np.maximum(out, 1)

    link_taken, feature_taken = summed(by_link), summed(by_feature)
    os.makedirs(out, exist_ok=True)
    for name in manifest["files"]:
        if not name.startswith(("links-", "features-")):
            shutil.copy2(os.path.join(count, name), os.path.join(out, name))
    totals = {"link_count_sum": 0}
    for name, (links, features) in tables_of.items():
        own = hashing.link_key(links["feature"].to_numpy(), links["word"].to_numpy())
        counts = less(own, links["count"].to_numpy(), link_taken)
        links = links.set_column(links.schema.get_field_index("count"), "count",
                                 pa.array(counts, pa.int64()))
        feature_counts = less(features["feature"].to_numpy(), features["count"].to_numpy(),
                              feature_taken)
        features = features.set_column(features.schema.get_field_index("count"), "count",
                                       pa.array(feature_counts, pa.int64()))
        pq.write_table(links, os.path.join(out, name))
        pq.write_table(features, os.path.join(out, "features-" + name[len("links-"):]))
        totals["link_count_sum"] += int(counts.sum())
    manifest["totals"].update(totals)
    write_manifest(manifest, out)
    return out


def refitted(count, model, out, heldout, residual=False):
    """``count`` restricted to ``model``'s links (with ``residual``, then
    :func:`residual_count`), joined with ``heldout``, fitted and applied under ``out``;
    returns the applied model's directory and the fit's variant."""
    restricted, join, fit, applied = (os.path.join(out, name)
                                      for name in ("count", "join", "fit", "model"))
    restrict_count(count, model, restricted)
    if residual:
        residual_count(restricted, restricted + "-residual")
        shutil.rmtree(restricted)
        os.rename(restricted + "-residual", restricted)
    run_measured(snm("join", "--count", restricted, "--heldout", heldout, "--out", join, *MODE),
                 log=join + ".log")
    run_measured(snm("fit", "--join", join, "--out", fit), log=fit + ".log")
    run_measured(snm("apply", "--count", restricted, "--fit", fit, "--out", applied, *MODE),
                 log=applied + ".log")
    with open(os.path.join(fit, "manifest.json")) as f:
        return applied, json.load(f)["metafeatures"]["variant"]


def one_shot_dir(work, name, target):
    """The one-shot prune of corpus ``name``'s model to ``target`` links."""
    return os.path.join(work, f"{name}-{target}", "one-shot")


def refit_row(name, run, target, work):
    """Test perplexities of the three ways to ``target`` links (the docstring's)."""
    test_path, dev_path = corpus(name, "test.txt"), corpus(name, "dev.txt")
    model, count = os.path.join(run, "model"), os.path.join(run, "count")
    base = os.path.join(work, f"{name}-{target}")
    one_shot = prune(model, target, one_shot_dir(work, name, target))
    at_2x = prune(model, 2 * target, os.path.join(base, "pruned-2x"))
    refit_2x, variant_2x = refitted(count, at_2x, os.path.join(base, "refit-2x"), dev_path)
    refit_2x_pruned = prune(refit_2x, target, os.path.join(base, "refit-2x-pruned"))
    refit, variant = refitted(count, refit_2x_pruned, os.path.join(base, "refit"), dev_path)
    residual, _ = refitted(count, one_shot, os.path.join(base, "residual"), dev_path,
                           residual=True)
    row = {"corpus": name, "target_links": target,
           "one_shot": round(snm_perplexity(one_shot, test_path), 2),
           "refit_at_2x_then_pruned": round(snm_perplexity(refit_2x_pruned, test_path), 2),
           "fitted_again_at_the_size": round(snm_perplexity(refit, test_path), 2),
           "residual_counts_fitted": round(snm_perplexity(residual, test_path), 2),
           "one_shot_links": links_of(one_shot),
           "refit_at_2x_then_pruned_links": links_of(refit_2x_pruned),
           "fitted_again_at_the_size_links": links_of(refit),
           "refit_at_2x_ppl": round(snm_perplexity(refit_2x, test_path), 2),
           "refit_at_2x_variant": variant_2x, "fitted_again_variant": variant}
    print(row, flush=True)
    return row


def read_arpa(path, keep=None):
    """``{n-gram: log10 probability}`` of an ARPA file (only the n-grams in ``keep`` if
    given), an n-gram its words joined by single spaces."""
    probabilities, order = {}, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("\\"):
                order = int(line[1:line.index("-")]) if line.rstrip().endswith("-grams:") else 0
                continue
            fields = line.split()
            if order and fields:
                ngram = " ".join(fields[1:1 + order])
                if keep is None or ngram in keep:
                    probabilities[ngram] = float(fields[0])
    return probabilities


def renormalised_subset(full_arpa, subset_arpa, out):
    """An ARPA file of ``subset_arpa``'s n-grams with ``full_arpa``'s log10 probabilities
    and back-off weights recomputed so every context sums to one (SRILM's pruned model):
    bow(h) = (1 - sum P(w|h)) / (1 - sum P_new(w|h')) over the kept words w after h, h'
    being h without its oldest word and P_new the new model's, shorter contexts first."""
    kept = read_arpa(subset_arpa).keys()
    probabilities = read_arpa(full_arpa, keep=kept)
    missing = kept - probabilities.keys()
    if missing:
        raise SystemExit(f"{len(missing):,} n-grams of {subset_arpa} are not in {full_arpa}, "
                         f"such as {next(iter(missing))!r}")
    children = {}
    for ngram in probabilities:
        context = ngram.rpartition(" ")[0]
        if context:
            children.setdefault(context, []).append(ngram)
    backoffs = {}

    def log10_new(ngram):
        """log10 P_new(last word | the others), backing off from the shorter contexts."""
        total = 0.0
        while ngram not in probabilities:
            total += backoffs.get(ngram.rpartition(" ")[0], 0.0)
            ngram = ngram.partition(" ")[2]
        return total + probabilities[ngram]

    for context in sorted(children, key=lambda c: c.count(" ")):
        ngrams = children[context]
        numerator = 1.0 - sum(10 ** probabilities[ngram] for ngram in ngrams)
        denominator = 1.0 - sum(10 ** log10_new(ngram.partition(" ")[2]) for ngram in ngrams)
        backoffs[context] = (math.log10(numerator / denominator)
                             if numerator > 0 and denominator > 0 else 0.0)
    by_order = {}
    for ngram in probabilities:
        by_order.setdefault(ngram.count(" ") + 1, []).append(ngram)
    highest = max(by_order)
    with open(out, "w", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for n in sorted(by_order):
            f.write(f"ngram {n}={len(by_order[n])}\n")
        for n in sorted(by_order):
            f.write(f"\n\\{n}-grams:\n")
            for ngram in by_order[n]:
                backoff = backoffs.get(ngram) if n < highest else None
                f.write(f"{probabilities[ngram]:.7g}\t{ngram}"
                        + ("" if backoff is None else f"\t{backoff:.7g}") + "\n")
        f.write("\n\\end\\\n")
    return out


def pocolm_selection_rows(run, pocolm_arpas, one_shots, work):
    """pocolm's pruned models, and the unpruned SNM's probabilities on their n-grams and
    on those of its own one-shot prune at the closest of ``one_shots`` ({target: model})."""
    test_path = corpus("kernel", "test.txt")
    full = os.path.join(work, "kernel-5gram-unpruned.arpa")
    run_measured(snm("export-arpa", "--model", os.path.join(run, "model"), "--out", full),
                 log=full + ".log")
    rows = []
    for pocolm in pocolm_arpas:
        ngrams = arpa_ngrams(pocolm)
        target = min(one_shots, key=lambda t: abs(t - ngrams))
        own = os.path.join(work, f"kernel-one-shot-{target}.arpa")
        run_measured(snm("export-arpa", "--model", one_shots[target], "--out", own),
                     log=own + ".log")
        pocolm_name = f"pocolm {os.path.basename(pocolm)}"
        snm_name = f"snm prune --criterion backoff --target_links {target:,}"
        rows.append({"n-grams of": pocolm_name, "probabilities": "pocolm's", "n-grams": ngrams,
                     "test_ppl": round(kenlm_perplexity(pocolm, test_path), 2)})
        for name, arpa in ((pocolm_name, pocolm), (snm_name, own)):
            subset = renormalised_subset(full, arpa, os.path.join(work, "renormalised.arpa"))
            rows.append({"n-grams of": name, "n-grams": arpa_ngrams(subset),
                         "probabilities": "unpruned SNM's, back-offs renormalised",
                         "test_ppl": round(kenlm_perplexity(subset, test_path), 2)})
            os.remove(subset)
            print(rows[-1], flush=True)
        rows.append({"n-grams of": snm_name, "probabilities": "the pruned SNM's (snm eval)",
                     "n-grams": arpa_ngrams(own),
                     "test_ppl": round(snm_perplexity(one_shots[target], test_path), 2)})
        os.remove(own)
    os.remove(full)
    return rows


def pocolm_arpas(args):
    """The pocolm pruned ARPA files to compare with: --pocolm_arpa, else with POCOLM set
    those benchmarks/prune.py made (none made: none)."""
    if args.pocolm_arpa:
        return [args.pocolm_arpa]
    if os.environ.get("POCOLM"):
        made = sorted(glob.glob(os.path.join(WORK, "prune", "pocolm", "lm5_prune*.arpa")))
        if not made:
            print("POCOLM is set but benchmarks/prune.py has made no pocolm ARPA under "
                  f"{os.path.join(WORK, 'prune', 'pocolm')}: no pocolm comparison", flush=True)
        return made
    return []


def two_decimals(rows, keys):
    """``rows`` with the values of ``keys`` as text to two decimals (print_table shows a
    float over 100 without any)."""
    return [{**row, **{key: f"{row[key]:.2f}" for key in keys}} for row in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="kernel", choices=("kernel", "mix"))
    parser.add_argument("--targets", help="comma-separated link counts (default: kernel "
                                          "1116762,202890; mix 15%% and 2.8%% of its links)")
    parser.add_argument("--pocolm_arpa", help="kernel: a pocolm pruned ARPA file whose "
                                              "n-grams get the SNM's probabilities")
    parser.add_argument("--work", default=os.path.join(WORK, "prune_refit"),
                        help="directory of the runs (default benchmarks/work/prune_refit)")
    args = parser.parse_args(argv)
    if args.pocolm_arpa and args.corpus != "kernel":
        parser.error("--pocolm_arpa goes with --corpus kernel")
    os.makedirs(args.work, exist_ok=True)
    run = trained(args.corpus, args.work)
    total = links_of(os.path.join(run, "model"))
    if args.targets:
        targets = [int(t) for t in args.targets.split(",")]
    elif args.corpus == "kernel":
        targets = list(KERNEL_TARGETS)
    else:
        targets = [int(total * fraction) for fraction in MIX_FRACTIONS]  # at most the share
    with open(os.path.join(run, "eval.json")) as f:
        unpruned = {"unpruned_links": total,
                    "unpruned_ppl": round(json.load(f)["adjusted"]["perplexity"], 2)}
    rows = [{**refit_row(args.corpus, run, target, args.work), **unpruned} for target in targets]
    arpas = pocolm_arpas(args) if args.corpus == "kernel" else []
    one_shots = {target: one_shot_dir(args.work, args.corpus, target) for target in targets}
    selection = pocolm_selection_rows(run, arpas, one_shots, args.work) if arpas else []
    columns = ["corpus", "target_links", "one_shot", "refit_at_2x_then_pruned",
               "fitted_again_at_the_size", "residual_counts_fitted"]
    print_table(two_decimals(rows, columns[2:]), columns)
    record("prune-refit", rows)
    if selection:
        print()
        print_table(two_decimals(selection, ["test_ppl"]),
                    ["n-grams of", "probabilities", "n-grams", "test_ppl"])
        record("prune-refit-pocolm-selection", selection)


if __name__ == "__main__":
    main()
