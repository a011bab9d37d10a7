"""The adjustment fit on kernel: seconds per epoch, memory per small-M link, perplexity.

    python benchmarks/fit.py                        # 5gram and skip10gram, every variant
    python benchmarks/fit.py --configs 5gram --epochs 3
    python benchmarks/fit.py --renormalize          # also --renormalize epoch, and selection

Counts come from `snm count` on kernel/train.txt.gz (made once under
benchmarks/work/, shared with benchmarks/count.py), small M from `snm join`
with kernel/dev.txt as held-out.  Each row is one `snm fit` in a fresh
process (both cores):

* variant rows: ``--variants V --epochs N``; dev perplexity is on the
  held-out set the fit trains on (epoch 0 = unadjusted);
* ``--renormalize`` rows: ``--variants V --epochs auto`` with the exact
  per-batch normalisation (default) and the paper's per-epoch one: the best
  validation perplexity on the held-back tenth and the epochs it took;
* a selection row: ``snm fit`` with its defaults (race, all three variants):
  seconds choosing against seconds of the final run.

Memory: peak RSS of the process minus that of a process that has imported
numpy and pyarrow and nothing else (measured in the same run), per small-M
link.  Appends to benchmarks/results.jsonl.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import MODE, WORK, corpus, print_table, record, run_measured  # noqa: E402

#: (variant, snm fit flags): the default unlexicalized set (diversity and
#: continuation), the reference's two sets (366 and 638 weights on kernel), and
#: the other two variants.
VARIANTS = [("unlexicalized", []), ("unlexicalized", ["--no_continuation"]),
            ("unlexicalized", ["--no_continuation", "--no_diversity"]),
            ("feature-only", []), ("lexicalized", [])]
BUCKETS = {"5gram": 16, "skip10gram": 64}


def ensure(path, cmd):
    if not os.path.exists(os.path.join(path, "manifest.json")):
        run_measured(cmd, log=path + ".log")
    return path


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def kernel_join(config):
    counts = ensure(os.path.join(WORK, "counts", f"kernel-{config}"), snm(
        "count", "--config", config, "--train", corpus("kernel", "train.txt.gz"),
        "--vocab", corpus("kernel", "vocab.txt"), "--num_buckets", str(BUCKETS[config]),
        "--out", os.path.join(WORK, "counts", f"kernel-{config}"), *MODE))
    return ensure(os.path.join(WORK, "heldout", f"kernel-{config}"), snm(
        "join", "--count", counts, "--heldout", corpus("kernel", "dev.txt"),
        "--out", os.path.join(WORK, "heldout", f"kernel-{config}")))


def run_fit(heldout, label, args, baseline_rss):
    out = os.path.join(WORK, "fit", label)
    seconds, rss = run_measured(snm("fit", "--join", heldout, "--out", out, *args),
                                log=out + ".log")
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(out, "train_log.jsonl")) as f:
        log = [json.loads(line) for line in f]
    final = [e for e in log if e["run"] == "final" and e["epoch"] > 0]
    links = manifest["small_m"]["links"]
    return manifest, log, {
        "small_m_links": links, "small_m_classes": manifest["small_m"]["classes"],
        "weights": manifest["weights_in_use"],
        "s_per_epoch": sum(e["seconds"] for e in final) / max(len(final), 1),
        "wall_s": seconds, "peak_rss_mib": rss, "import_rss_mib": baseline_rss,
        "bytes_per_link": (rss - baseline_rss) * 2 ** 20 / links,
        "select_s": manifest["seconds"]["selection"], "final_s": manifest["seconds"]["final"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="5gram,skip10gram")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--renormalize", action="store_true",
                        help="also compare --renormalize epoch with batch, and the default "
                             "selection")
    args = parser.parse_args(argv)
    _, baseline_rss = run_measured([sys.executable, "-c", "import numpy, pyarrow"])
    rows = []
    for config in args.configs.split(","):
        heldout = kernel_join(config)
        small_m_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(heldout,
                                                                              "small_m-*")))
        for variant, flags in VARIANTS:
            label = f"kernel-{config}-{variant}{''.join(flags)}"
            manifest, log, row = run_fit(heldout, label, [
                "--variants", variant, "--epochs", str(args.epochs), *flags], baseline_rss)
            rows.append({"config": config, "run": "variant", "metafeatures": variant,
                         "diversity": manifest["metafeatures"]["diversity"],
                         "continuation": manifest["metafeatures"]["continuation"],
                         "small_m_mb": small_m_bytes / 2 ** 20, **row,
                         "dev_ppl_by_epoch": [round(e["train_perplexity"], 2) for e in log]})
            print(json.dumps(rows[-1]), flush=True)
        if not args.renormalize:
            continue
        for variant in ("unlexicalized", "lexicalized"):
            for renormalize in ("batch", "epoch"):
                label = f"kernel-{config}-{variant}-renormalize-{renormalize}"
                manifest, log, row = run_fit(heldout, label, [
                    "--variants", variant, "--renormalize", renormalize], baseline_rss)
                choice = manifest["choice"]["candidates"][variant]
                rows.append({"config": config, "run": f"renormalize {renormalize}",
                             "metafeatures": variant, **row,
                             "valid_ppl": choice["validation_perplexity"],
                             "valid_epochs": choice["epochs"]})
                print(json.dumps(rows[-1]), flush=True)
        manifest, log, row = run_fit(heldout, f"kernel-{config}-selection", [], baseline_rss)
        rows.append({"config": config, "run": "selection",
                     "metafeatures": manifest["metafeatures"]["variant"], **row,
                     "valid_ppl": manifest["choice"]["validation_perplexity"],
                     "valid_epochs": manifest["training"]["epochs"],
                     "select_vs_final": row["select_s"] / max(row["final_s"], 1e-9)})
        print(json.dumps(rows[-1]), flush=True)
    print_table(rows, ["config", "run", "metafeatures", "small_m_links", "small_m_classes",
                       "weights", "s_per_epoch", "wall_s", "peak_rss_mib", "bytes_per_link",
                       "select_s", "final_s", "valid_ppl", "valid_epochs", "dev_ppl_by_epoch"])
    record("fit", rows)


if __name__ == "__main__":
    main()
