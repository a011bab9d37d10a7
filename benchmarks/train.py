"""`snm train` end to end beside KenLM's whole path, timed in the same run.

    LMPLZ=$KENLM_BIN/lmplz python benchmarks/train.py              # kernel 5-gram
    LMPLZ=... python benchmarks/train.py --repeats 3
    python benchmarks/train.py --setups kernel --configs skip10gram        # no KenLM rows

One row per (setup, config): `snm train` with its defaults from scratch (a
fresh run directory, vocabulary given, both cores: ``--direct_num_workers=2``),
its time per stage (stages.json) and the fit's split between choosing the
variant and the final run, next to KenLM's whole path on the same files:
``lmplz -o 5 -S 1G`` (OOV words as one placeholder word, as in count.py),
``build_binary trie`` and ``query`` over the test text, OOV words as the same
placeholder (build_binary and query from LMPLZ's directory).  With ``--repeats N`` the two take turns N times and
each keeps its best time; peak RSS is the largest, summed over the process
tree.  KenLM's whole path only exists for n-gram configurations; other rows
show snm alone.  Appends to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import WORK, corpus, print_table, read_train_run, record, run_measured  # noqa: E402
from benchmarks.common import OOV_PLACEHOLDER  # noqa: E402
from benchmarks.count import setup_files, unk_text  # noqa: E402

STAGES = ("vocab", "count", "join", "fit", "apply", "eval")


def snm_train(setup, config, extra):
    files, vocab = setup_files(setup)
    out = os.path.join(WORK, "train", f"{setup}-{config}")
    shutil.rmtree(out, ignore_errors=True)
    pattern = files[0] if len(files) == 1 else os.path.join(os.path.dirname(files[0]), "*")
    cmd = [sys.executable, "-m", "snm", "train", "--config", config, "--train", pattern,
           "--vocab", vocab, "--heldout", corpus(setup, "dev.txt"),
           "--test", corpus(setup, "test.txt"), "--out", out, "--direct_num_workers=2", *extra]
    seconds, rss = run_measured(cmd, log=out + ".log")
    stages, fit, evaluation = read_train_run(out)
    return {"wall_s": seconds, "peak_rss_mib": rss,
            **{f"{s}_s": stages[s]["seconds"] for s in STAGES if s in stages},
            "fit_select_s": fit["seconds"]["selection"], "fit_final_s": fit["seconds"]["final"],
            "variant": fit["metafeatures"]["variant"], "epochs": fit["training"]["epochs"],
            "test_ppl": evaluation["adjusted"]["perplexity"]}


def unk_test(setup):
    """The test text with words outside vocab.txt as lmplz's placeholder word (made once)."""
    target = os.path.join(WORK, f"{setup}-test-unk.txt")
    if not os.path.exists(target):
        _, vocab_path = setup_files(setup)
        with open(vocab_path, encoding="utf-8") as f:
            vocab = set(f.read().split("\n"))
        with open(corpus(setup, "test.txt"), encoding="utf-8") as f, \
                open(target + ".tmp", "w", encoding="utf-8") as out:
            for line in f:
                out.write(" ".join(w if w in vocab else OOV_PLACEHOLDER for w in line.split())
                          + "\n")
        os.replace(target + ".tmp", target)
    return target


def kenlm_path(setup, lmplz):
    """lmplz, build_binary trie and query in sequence: (wall s, peak RSS MiB, test ppl)."""
    bin_dir = os.path.dirname(lmplz)
    arpa = os.path.join(WORK, f"{setup}-train-lmplz5.arpa")
    binary = arpa[:-len(".arpa")] + ".trie"
    text = unk_text(setup)
    steps = [[lmplz, "-o", "5", "-S", "1G", "--text", text, "--arpa", arpa],
             [os.path.join(bin_dir, "build_binary"), "trie", arpa, binary]]
    seconds, rss = 0.0, 0.0
    for cmd in steps:
        s, r = run_measured(cmd, log=binary + ".log")
        seconds, rss = seconds + s, max(rss, r)
    start = time.perf_counter()
    with open(unk_test(setup), "rb") as test:
        query = subprocess.run([os.path.join(bin_dir, "query"), binary], stdin=test,
                               capture_output=True, check=True)
    seconds += time.perf_counter() - start
    summary = query.stdout.decode().splitlines()
    ppl = next(float(line.split()[-1]) for line in summary
               if line.startswith("Perplexity including OOVs"))
    return seconds, rss, ppl


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="kernel")
    parser.add_argument("--configs", default="5gram")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--train_args", default="", help="more `snm train` arguments")
    args = parser.parse_args(argv)
    lmplz = os.environ.get("LMPLZ")
    rows = []
    for setup in args.setups.split(","):
        for config in args.configs.split(","):
            best, kenlm = None, None
            for _ in range(args.repeats):
                if lmplz and config == "5gram":
                    s, r, ppl = kenlm_path(setup, lmplz)
                    kenlm = (min(s, kenlm[0]), max(r, kenlm[1]), ppl) if kenlm else (s, r, ppl)
                run = snm_train(setup, config, args.train_args.split())
                if best is None or run["wall_s"] < best["wall_s"]:
                    best = {**run, "peak_rss_mib": max(run["peak_rss_mib"],
                                                       best["peak_rss_mib"] if best else 0)}
            row = {"setup": setup, "config": config, "repeats": args.repeats, **best}
            if kenlm:
                row.update(kenlm_s=kenlm[0], kenlm_rss_mib=kenlm[1], kenlm_test_ppl=kenlm[2],
                           time_vs_kenlm=best["wall_s"] / kenlm[0])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print_table(rows, ["setup", "config", "wall_s", "peak_rss_mib", "count_s", "join_s", "fit_s",
                       "fit_select_s", "fit_final_s", "apply_s", "eval_s", "variant", "epochs",
                       "test_ppl", "kenlm_s", "kenlm_test_ppl", "time_vs_kenlm"])
    record("train", rows)


if __name__ == "__main__":
    main()
