"""How the fit grows with the corpus: small M, seconds per epoch and memory on parts of mix.

    python benchmarks/projection.py                  # 1/8, 1/4, 1/2, all; tagged and pooled
    python benchmarks/projection.py --fractions 8,4

For the first 1/8, 1/4, 1/2 and all of every mix source (plain-text copies,
as count.py --scaling makes them), pooled and corpus-tagged: `snm count
--config skip5gram` (vocabulary mix/vocab.txt), `snm join` with mix/dev.txt,
then one `snm fit --epochs 1` a variant (lexicalized, unlexicalized) in a
fresh process, both cores.  Each row: training words, small-M links, seconds
of the epoch (training, then the evaluation of the log), the fit's peak RSS
and its bytes per small-M link above a process that imported numpy and
pyarrow.  The fits of a row's parts are then fitted by power laws in the
training words (small-M links) and in the small-M links (seconds an epoch),
and the peak RSS by a line in the small-M links (a fixed part, then bytes a
link), which the script prints with their projection to the paper's One
Billion Word setup (0.8B training words; skip-10-gram has 1.35x the small-M
links of skip-5-gram on mix) and to the largest small M this machine's
memory holds.  Appends to benchmarks/results.jsonl.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import MIX_SOURCES, MODE, WORK, corpus, print_table, record, run_measured  # noqa: E402
from benchmarks.count import fraction_files  # noqa: E402

VARIANTS = ("lexicalized", "unlexicalized")
#: The paper's One Billion Word setup: training words.
BILLION_WORD_TRAINING = 0.8e9
#: Small-M links of skip-10-gram over skip-5-gram on all of mix, pooled, with mix/dev.txt
#: held out (21,876,593 / 16,236,855; benchmarks/README.md).
SKIP10_OVER_SKIP5 = 1.35
MACHINE_MIB = 24 * 1024


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def prepare(fraction, tagged):
    """Count and join skip5gram on 1/fraction of mix; returns (join dir, training words)."""
    files = fraction_files(fraction) if fraction > 1 else [
        os.path.join(corpus("mix", "train"), s + ".txt.gz") for s in MIX_SOURCES]
    by_source = {os.path.basename(f).split(".")[0]: f for f in files}
    label = f"mix-1-of-{fraction}-skip5gram-{'tagged' if tagged else 'pooled'}"
    counts = os.path.join(WORK, "projection", label, "counts")
    heldout = os.path.join(WORK, "projection", label, "heldout")
    if not os.path.exists(os.path.join(heldout, "manifest.json")):
        train = sum((["--train", f"{s}={by_source[s]}" if tagged else by_source[s]]
                     for s in MIX_SOURCES), [])
        run_measured(snm("count", "--config", "skip5gram", "--vocab", corpus("mix", "vocab.txt"),
                         "--out", counts, "--num_buckets", "32", *train, *MODE),
                     log=counts + ".log")
        run_measured(snm("join", "--count", counts, "--heldout", corpus("mix", "dev.txt"),
                         "--out", heldout, *MODE), log=heldout + ".log")
        # The counts are not read again (gigabytes at the larger parts).
        shutil.rmtree(counts)
        with open(counts + ".words", "w") as f:
            f.write(str(_words(counts + ".log")))
    with open(counts + ".words") as f:
        return heldout, int(f.read())


def _words(log):
    with open(log) as f:
        for line in f:
            if line.strip().startswith("tokens"):
                return int(line.split()[-1].replace(",", ""))
    raise SystemExit(f"{log}: no token count")


def power_law(x, y):
    """(a, b) of y = a x**b, least squares in logs."""
    b, log_a = np.polyfit(np.log(x), np.log(y), 1)
    return math.exp(log_a), b


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fractions", default="8,4,2,1")
    parser.add_argument("--trainings", default="pooled,tagged")
    args = parser.parse_args(argv)
    _, baseline = run_measured([sys.executable, "-c", "import numpy, pyarrow"])
    rows = []
    for training in args.trainings.split(","):
        for fraction in map(int, args.fractions.split(",")):
            heldout, words = prepare(fraction, training == "tagged")
            for variant in VARIANTS:
                out = os.path.join(WORK, "projection", "fit")
                seconds, rss = run_measured(snm("fit", "--join", heldout, "--out", out,
                                                "--variants", variant, "--epochs", "1"),
                                            log=out + ".log")
                with open(os.path.join(out, "manifest.json")) as f:
                    manifest = json.load(f)
                with open(os.path.join(out, "train_log.jsonl")) as f:
                    epoch = [json.loads(line) for line in f][-1]
                links = manifest["small_m"]["links"]
                rows.append({"part": f"1/{fraction}", "training": training, "variant": variant,
                             "words": words, "small_m_links": links,
                             "small_m_classes": manifest["small_m"]["classes"],
                             "weights": manifest["weights_in_use"],
                             "epoch_s": epoch["seconds"], "wall_s": seconds,
                             "peak_rss_mib": rss,
                             "bytes_per_link": (rss - baseline) * 2 ** 20 / links})
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, ["part", "training", "variant", "words", "small_m_links",
                       "small_m_classes", "weights", "epoch_s", "wall_s", "peak_rss_mib",
                       "bytes_per_link"])
    record("projection", rows)
    for training in args.trainings.split(","):
        for variant in VARIANTS:
            part = [r for r in rows if r["training"] == training and r["variant"] == variant]
            if len(part) < 2:
                continue
            words = np.array([r["words"] for r in part], float)
            links = np.array([r["small_m_links"] for r in part], float)
            seconds = np.array([r["epoch_s"] for r in part], float)
            rss = np.array([r["peak_rss_mib"] - baseline for r in part], float)
            a_links, b_links = power_law(words, links)
            a_s, b_s = power_law(links, seconds)
            # Memory is a fixed part (the weight table, the process) plus a part per link.
            per_link, fixed = np.polyfit(links, rss, 1)
            billion = SKIP10_OVER_SKIP5 * a_links * BILLION_WORD_TRAINING ** b_links
            largest = (MACHINE_MIB - baseline - fixed) / per_link
            print(f"{training} {variant}: links ~ {a_links:.3g} words^{b_links:.2f}; "
                  f"s/epoch ~ {a_s:.3g} links^{b_s:.2f}; MiB ~ {fixed:.0f} + "
                  f"{per_link * 2 ** 20:.1f} B/link x links")
            print(f"  One Billion Word skip-10-gram: ~{billion:,.0f} small-M links, "
                  f"~{a_s * billion ** b_s:,.0f} s an epoch, "
                  f"~{fixed + per_link * billion + baseline:,.0f} MiB; largest small M in "
                  f"{MACHINE_MIB:,} MiB: ~{largest:,.0f} links (~{(largest / a_links) ** (1 / b_links):,.0f}"
                  f" training words of skip-5-gram)")


if __name__ == "__main__":
    main()
