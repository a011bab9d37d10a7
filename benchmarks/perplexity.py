"""Test perplexity on kernel and mix (pooled): unadjusted and adjusted SNM next to KenLM KN5.

    python benchmarks/perplexity.py                          # everything (~40 min)
    python benchmarks/perplexity.py --setups kernel --configs 5gram

For each setup and preset: `snm count` on the training text (the setup's
vocab.txt; two threads), `snm join` with dev.txt as held-out, then for each
meta-feature variant `snm fit --metafeatures V` (epochs chosen on a held-back
tenth of dev, the default rule; one epoch for lexicalized skip-10-gram, see
EPOCHS), `snm apply` and `snm eval` on test.txt.  The
unadjusted model (theta = 0) is the same for every variant.  KN5 figures are
from ../shared/benchmarks/reference.md (lmplz -o 5 on the same files).  Every
step runs in a fresh process; the table gives the adjusted test perplexity,
its ratio to KN5, the epochs chosen and the fit's seconds per epoch.  Appends
to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import MODE, WORK, corpus, print_table, record, run_measured  # noqa: E402

KN5_TEST = {"kernel": 73.43, "mix": 93.63}
UNADJUSTED_REFERENCE = {("kernel", "5gram"): 88.14351, ("mix", "5gram"): 115.65204}
VARIANTS = ("unlexicalized", "lexicalized", "feature-only")
BUCKETS = {"5gram": 16, "skip10gram": 64, "skip5gram": 32}
#: Fixed epochs where the default rule is too slow to be worth it: lexicalized
#: skip-10-gram takes ~4 min an epoch here, and lexicalized models over-train
#: after the first epoch anyway (paper, section 4.1).
EPOCHS = {("skip10gram", "lexicalized"): "1"}


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def train_glob(setup):
    if setup == "kernel":
        return corpus("kernel", "train.txt.gz")
    return os.path.join(corpus("mix", "train"), "*.txt.gz")


def step(out, cmd, done="manifest.json"):
    """Run ``cmd`` unless ``out/done`` exists; return (seconds, peak RSS MiB) or None."""
    if os.path.exists(os.path.join(out, done)):
        return None
    return run_measured(cmd, log=out.rstrip("/") + ".log")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="kernel,mix")
    parser.add_argument("--configs", default="5gram,skip10gram")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--keep_models", action="store_true",
                        help="keep each model directory after its evaluation")
    args = parser.parse_args(argv)
    rows = []
    for setup in args.setups.split(","):
        for config in args.configs.split(","):
            base = os.path.join(WORK, "ppl", f"{setup}-{config}")
            counts, heldout = os.path.join(base, "counts"), os.path.join(base, "heldout")
            count_run = step(counts, snm("count", "--config", config, "--train", train_glob(setup),
                                         "--vocab", corpus(setup, "vocab.txt"), "--out", counts,
                                         "--num_buckets", str(BUCKETS[config]), *MODE))
            step(heldout, snm("join", "--count", counts, "--heldout", corpus(setup, "dev.txt"),
                              "--out", heldout, *MODE))
            with open(os.path.join(counts, "manifest.json")) as f:
                links = json.load(f)["totals"]["links"]
            for variant in args.variants.split(","):
                adjust = os.path.join(base, f"adjust-{variant}")
                model = os.path.join(base, f"model-{variant}")
                report_path = os.path.join(base, f"eval-{variant}.json")
                fit_run = None
                if not os.path.exists(report_path):
                    fit_run = step(adjust, snm("fit", "--join", heldout, "--out", adjust,
                                               "--metafeatures", variant, "--epochs",
                                               EPOCHS.get((config, variant), "auto")))
                    step(model, snm("apply", "--count", counts, "--fit", adjust, "--out",
                                    model, *MODE))
                    with open(report_path + ".tmp", "w") as f:
                        subprocess.run(snm("eval", "--model", model, corpus(setup, "test.txt"),
                                           "--json"), stdout=f, check=True)
                    os.replace(report_path + ".tmp", report_path)
                    if not args.keep_models:  # a skip-10-gram model on mix is ~16 GB
                        shutil.rmtree(model)
                with open(report_path) as f:
                    report = json.load(f)
                with open(os.path.join(adjust, "manifest.json")) as f:
                    fit = json.load(f)
                with open(os.path.join(adjust, "train_log.jsonl")) as f:
                    final = [json.loads(line) for line in f]
                final = [e for e in final if e["run"] == "final" and e["epoch"] > 0]
                rows.append({
                    "setup": setup, "config": config, "metafeatures": variant,
                    "links": links,
                    "unadjusted_ppl": report["unadjusted"]["perplexity"],
                    "adjusted_ppl": report["adjusted"]["perplexity"],
                    "kn5_ppl": KN5_TEST[setup],
                    "adjusted_vs_kn5": report["perplexity"] / KN5_TEST[setup],
                    "unadjusted_reference": UNADJUSTED_REFERENCE.get((setup, config)),
                    "epochs": fit["training"]["epochs"],
                    "weights": fit["weights_in_use"],
                    "fit_s_per_epoch": (sum(e["seconds"] for e in final) / len(final)
                                        if final else 0.0),
                    "count_wall_s": count_run[0] if count_run else None,
                    "fit_wall_s": fit_run[0] if fit_run else None,
                    "oov": report["oov"], "words": report["words"],
                })
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, ["setup", "config", "metafeatures", "links", "unadjusted_ppl",
                       "adjusted_ppl", "kn5_ppl", "adjusted_vs_kn5", "epochs", "weights",
                       "fit_s_per_epoch"])
    record("perplexity", rows)


if __name__ == "__main__":
    main()
