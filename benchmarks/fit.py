"""The adjustment trainer on kernel: small M size, seconds per epoch, peak RSS, dev perplexity.

    python benchmarks/fit.py                        # 5gram and skip10gram, every variant
    python benchmarks/fit.py --configs 5gram --epochs 3

Counts come from `snm count` on kernel/train.txt.gz (made once under
benchmarks/work/, shared with benchmarks/count.py), small M from `snm join`
with kernel/dev.txt as held-out.  Each variant is one `snm fit --epochs N` in a
fresh process; peak RSS is the process's, next to the RSS of a process that
only imports the trainer (the interpreter, numpy and pyarrow), measured in the
same run.  Dev perplexity is on the held-out set itself (what the trainer
optimises); the reference's L-BFGS optimum for unlexicalized + diversity is
73.56 (../shared/benchmarks/reference.md).  Lexicalized skip-10-gram runs one
epoch (EPOCHS).  Appends to benchmarks/results.jsonl.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import WORK, corpus, print_table, record, run_measured  # noqa: E402

#: (variant, snm fit flags): the default unlexicalized set (diversity and
#: continuation), the reference's two sets (366 and 638 weights on kernel), and
#: the other two variants.
VARIANTS = [("unlexicalized", []), ("unlexicalized", ["--no_continuation"]),
            ("unlexicalized", ["--no_continuation", "--no_diversity"]),
            ("feature-only", []), ("lexicalized", [])]
#: Lexicalized skip-10-gram takes ~4 min an epoch here: one epoch is measured.
EPOCHS = {("skip10gram", "lexicalized"): 1}
BUCKETS = {"5gram": 16, "skip10gram": 64}
MODE = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]


def ensure(path, cmd):
    if not os.path.exists(os.path.join(path, "manifest.json")):
        run_measured(cmd, log=path + ".log")
    return path


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="5gram,skip10gram")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    baseline_s, baseline_rss = run_measured([sys.executable, "-c", "import snm_core.fit"])
    rows = []
    for config in args.configs.split(","):
        counts = ensure(os.path.join(WORK, "counts", f"kernel-{config}"), snm(
            "count", "--config", config, "--train", corpus("kernel", "train.txt.gz"),
            "--vocab", corpus("kernel", "vocab.txt"), "--num_buckets", str(BUCKETS[config]),
            "--out", os.path.join(WORK, "counts", f"kernel-{config}"), *MODE))
        heldout = ensure(os.path.join(WORK, "heldout", f"kernel-{config}"), snm(
            "join", "--counts", counts, "--heldout", corpus("kernel", "dev.txt"),
            "--out", os.path.join(WORK, "heldout", f"kernel-{config}")))
        small_m_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(heldout,
                                                                              "small_m-*")))
        for variant, flags in VARIANTS:
            label = f"kernel-{config}-{variant}{''.join(flags)}"
            out = os.path.join(WORK, "fit", label)
            cmd = snm("fit", "--small_m", heldout, "--out", out, "--metafeatures", variant,
                      "--epochs", str(EPOCHS.get((config, variant), args.epochs)), *flags)
            seconds, rss = run_measured(cmd, log=out + ".log")
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            with open(os.path.join(out, "train_log.jsonl")) as f:
                log = [json.loads(line) for line in f]
            epochs = [e for e in log if e["epoch"] > 0]
            rows.append({
                "config": config, "metafeatures": variant,
                "diversity": manifest["metafeatures"]["diversity"],
                "continuation": manifest["metafeatures"]["continuation"],
                "small_m_links": manifest["small_m"]["links"],
                "small_m_classes": manifest["small_m"]["classes"],
                "small_m_mb": small_m_bytes / 2 ** 20,
                "weights": manifest["weights_in_use"],
                "s_per_epoch": sum(e["seconds"] for e in epochs) / max(len(epochs), 1),
                "wall_s": seconds, "peak_rss_mib": rss, "import_rss_mib": baseline_rss,
                "rss_over_small_m": rss / (small_m_bytes / 2 ** 20),
                "data_rss_over_small_m": (rss - baseline_rss) / (small_m_bytes / 2 ** 20),
                "dev_ppl_by_epoch": [round(e["train_perplexity"], 2) for e in log],
            })
            print(f"{label}: {rows[-1]['dev_ppl_by_epoch']}", flush=True)
    print_table(rows, ["config", "metafeatures", "diversity", "continuation", "small_m_links",
                       "small_m_classes",
                       "small_m_mb", "weights", "s_per_epoch", "peak_rss_mib", "import_rss_mib",
                       "rss_over_small_m", "data_rss_over_small_m", "dev_ppl_by_epoch"])
    record("fit", rows)


if __name__ == "__main__":
    main()
