"""Speed and memory of `snm count` on the shared corpora, beside KenLM's lmplz.

    python benchmarks/count.py                       # kernel and mix, 5gram and skip10gram
    python benchmarks/count.py --setups kernel --configs 5gram
    LMPLZ=... python benchmarks/count.py --configs 5gram --repeats 3
    LMPLZ=... python benchmarks/count.py --configs 5gram --repeats 3 \\
        --count_args "--num_buckets 16 --flush_links 1000000"   # other settings
    python benchmarks/count.py --scaling             # mix at 1/4, 1/2 and all
    LMPLZ=/path/to/lmplz python benchmarks/count.py  # also time lmplz in the same run

Each run is `snm count` in a fresh process on the DirectRunner with two
workers (``--mode``, default in_memory: each stage's input is split between
two threads, each running an in-process worker; numpy and pyarrow release the
GIL, so the two use both cores without copying data between processes, and
without the gRPC that multi_threading puts between runner and workers).
Wall time includes start-up; peak RSS is the summed RSS of the whole process
tree, sampled every 50 ms, and so is the peak of its scratch directory (``--scratch``,
a directory of its own).  lmplz figures come from
../shared/benchmarks/reference.md unless LMPLZ names a binary, in which case
lmplz runs here too (-o 5 -S 1G on the text with OOV words as one placeholder) and the
ratio is taken against that same-run time (benchmarks/README.md says how to
build lmplz from the PyPI kenlm source).  With ``--repeats N`` lmplz and
``snm count`` take turns N times; the best time and largest peak RSS of each
are kept.  Appends to benchmarks/results.jsonl.
"""

import argparse
import glob
import gzip
import json
import os
import shlex
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (  # noqa: E402
    WORK,
    corpus,
    placeholder_text,
    print_table,
    record,
    run_measured,
)

#: lmplz -o 5 -S 1G from ../shared/benchmarks/reference.md: wall s, peak RSS MiB.
LMPLZ_REFERENCE = {"kernel": (4.55, 277), "mix": (17.51, 518)}
MODES = {
    "multi_threading": ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "in_memory": ["--direct_running_mode=in_memory", "--direct_num_workers=2"],
}


def setup_files(name):
    if name == "kernel":
        return [corpus("kernel", "train.txt.gz")], corpus("kernel", "vocab.txt")
    return sorted(glob.glob(os.path.join(corpus("mix", "train"), "*.txt.gz"))), \
        corpus("mix", "vocab.txt")


def fraction_files(fraction):
    """Plain-text copies of the first 1/fraction of each mix source (made once)."""
    out_dir = os.path.join(WORK, f"mix-1-of-{fraction}")
    files, _ = setup_files("mix")
    paths = []
    for path in files:
        target = os.path.join(out_dir, os.path.basename(path)[:-3])
        if not os.path.exists(target):
            os.makedirs(out_dir, exist_ok=True)
            with gzip.open(path, "rt", encoding="utf-8") as f:
                lines = f.read().splitlines()
            with open(target + ".tmp", "w", encoding="utf-8") as f:
                f.write("\n".join(lines[:len(lines) // fraction]) + "\n")
            os.replace(target + ".tmp", target)
        paths.append(target)
    return paths


def unk_text(setup):
    """The training text with words outside vocab.txt as one placeholder word, for lmplz."""
    files, vocab_path = setup_files(setup)
    return placeholder_text(files, vocab_path, os.path.join(WORK, f"{setup}-train-unk.txt"))


def run_count(label, files, vocab, config, mode, count_args=()):
    """One `snm count` of ``files`` pooled as one untagged source (a glob over their folder)."""
    out = os.path.join(WORK, "counts", label)
    scratch = out + ".scratch"  # its own directory, so that its peak is measured alone
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    pattern = files[0] if len(files) == 1 else os.path.join(os.path.dirname(files[0]), "*")
    cmd = [sys.executable, "-m", "snm", "count", "--config", config, "--vocab", vocab,
           "--out", out, "--train", pattern, "--scratch", scratch]
    seconds, rss, scratch_peak = run_measured(cmd + MODES[mode] + list(count_args),
                                              log=out + ".log", disk=scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    with open(os.path.join(out, "manifest.json")) as f:
        totals = json.load(f)["totals"]
    return seconds, rss, {**totals, "peak_scratch_bytes": scratch_peak}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="kernel,mix")
    parser.add_argument("--configs", default="5gram,skip10gram")
    parser.add_argument("--mode", default="in_memory", choices=sorted(MODES))
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each count (and of lmplz, alternating); best time kept")
    parser.add_argument("--count_args", default="",
                        help="more arguments for every snm count, e.g. "
                             "\"--num_buckets 16 --flush_links 1000000\"")
    parser.add_argument("--scaling", action="store_true",
                        help="run mix at 1/4, 1/2 and all instead")
    args = parser.parse_args(argv)
    lmplz = os.environ.get("LMPLZ")
    rows = []
    if args.scaling:
        _, vocab = setup_files("mix")
        for config in args.configs.split(","):
            base = None
            for fraction in (4, 2, 1):
                files = fraction_files(fraction)
                label = f"mix-1-of-{fraction}-{config}"
                seconds, rss, totals = run_count(label, files, vocab, config, args.mode)
                # Nothing reads these counts again; skip-10-gram ones take gigabytes.
                shutil.rmtree(os.path.join(WORK, "counts", label))
                base = base or (seconds, totals["tokens"])
                rows.append({"setup": f"mix 1/{fraction}", "config": config, "mode": args.mode,
                             "tokens": totals["tokens"], "links": totals["links"],
                             "wall_s": seconds, "peak_rss_mib": rss,
                             "tokens_per_s": totals["tokens"] / seconds,
                             "size_ratio": totals["tokens"] / base[1],
                             "time_ratio": seconds / base[0]})
        print_table(rows, ["setup", "config", "tokens", "links", "wall_s", "peak_rss_mib",
                           "tokens_per_s", "size_ratio", "time_ratio"])
        record("count_scaling", rows)
        return
    for setup in args.setups.split(","):
        files, vocab = setup_files(setup)
        text = unk_text(setup) if lmplz else None
        arpa = os.path.join(WORK, f"{setup}-lmplz5.arpa")
        lm_runs = []  # one setup's lmplz runs, made alongside its first config's counts
        for config in args.configs.split(","):
            # lmplz and snm take turns, so a slow spell of the machine slows both;
            # the best time and the largest peak RSS of each are kept.
            lm_seconds, lm_rss = LMPLZ_REFERENCE[setup]
            seconds, rss = float("inf"), 0
            for _ in range(args.repeats):
                if lmplz and len(lm_runs) < args.repeats:
                    lm_runs.append(run_measured([lmplz, "-o", "5", "-S", "1G", "--text", text,
                                                 "--arpa", arpa], log=arpa + ".log"))
                run_s, run_rss, totals = run_count(f"{setup}-{config}", files, vocab, config,
                                                   args.mode, shlex.split(args.count_args))
                seconds, rss = min(seconds, run_s), max(rss, run_rss)
            if lm_runs:
                lm_seconds, lm_rss = min(r[0] for r in lm_runs), max(r[1] for r in lm_runs)
            rows.append({"setup": setup, "config": config, "mode": args.mode,
                         "repeats": args.repeats, "count_args": args.count_args,
                         "tokens": totals["tokens"], "links": totals["links"],
                         "wall_s": seconds, "peak_rss_mib": rss,
                         "peak_scratch_bytes": totals["peak_scratch_bytes"],
                         "tokens_per_s": totals["tokens"] / seconds,
                         "lmplz_wall_s": lm_seconds, "lmplz_rss_mib": lm_rss,
                         "lmplz_source": "same run" if lm_runs else "reference.md",
                         "time_vs_lmplz": seconds / lm_seconds, "rss_vs_lmplz": rss / lm_rss})
    print_table(rows, ["setup", "config", "tokens", "links", "wall_s", "peak_rss_mib",
                       "peak_scratch_bytes", "tokens_per_s", "lmplz_wall_s", "lmplz_rss_mib",
                       "lmplz_source",
                       "time_vs_lmplz", "rss_vs_lmplz"])
    record("count", rows)


if __name__ == "__main__":
    main()
