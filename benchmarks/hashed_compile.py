"""The hashed compile (`snm compact --layout hashed`) at several budgets: wall, peak RSS, and
whether the arrays are byte-identical between budgets and to another checkout's build.

    python benchmarks/hashed_compile.py --model RUN/model --memory 8G 300M 206M \\
        [--other CHECKOUT] [--rounds 3] [--open_files 400] [--work DIR]

Each round copies the model directory once a build (into --work), then runs
`/usr/bin/time -v nice python -m snm compact --model COPY --layout hashed
--memory M` for every budget, and, with --other, that checkout's `snm compact`
(without --memory: it may have none), all under `ulimit -n --open_files`.  Then
the `.npy` files of every build are compared with the first budget's.  Scoring
cost: `event_sums` on kernel/test.txt's pairs, best of 15, with this checkout's
and --other's code, taking turns.
"""

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = os.path.join(REPO, "..", "shared", "corpora", "kernel", "test.txt")

SUMS = """
import sys, time
import numpy as np
from snm_core.scoring.compact import load_model
from snm_core.text.tokenize import SentenceBatch, tokenize
m = load_model(sys.argv[1])
lines = [l.strip() for l in open(sys.argv[2])]
batch, _, _ = tokenize(lines, m.vocab)
events = m.extractor.extract(SentenceBatch(m.word_map[batch.tokens], batch.offsets))
bounds = np.searchsorted(events.type, np.arange(m.extractor.num_types + 1))
if hasattr(m, "_scorer"):  # the C scorer (since the seventeenth session)
    def sums():
        return m._scorer.event_sums(events.key, events.event, bounds, events.target,
                                    events.num_events)
else:
    args = (events.key, events.event, bounds, m._prerequisite, events.target,
            events.num_events, *m.features.parts, m.features.value_words, *m.links.parts,
            m.links.value_words, m.link_c, *getattr(m, "_link_extra", ()))
    def sums():
        return m._kernels.event_sums(*args)
sums()
times = []
for _ in range(15):
    t = time.perf_counter(); out = sums(); times.append(time.perf_counter() - t)
print(f"{1000 * min(times):.1f} ms, {len(events.key):,} pairs, sum {out[1].sum():.6f}")
"""


def timed(argv, checkout, open_files):
    """(wall seconds, peak RSS MiB, return code) of one command under /usr/bin/time -v."""
    env = {**os.environ, "PYTHONPATH": checkout}
    shell = f"ulimit -n {open_files}; exec /usr/bin/time -v nice " + " ".join(argv)
    run = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True,
                         cwd=checkout)  # python -m and -c import from the directory first
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", run.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    return seconds, int(rss.group(1)) / 1024, run.returncode, run.stderr.strip().splitlines()[:1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--memory", nargs="+", default=["8G", "300M"])
    parser.add_argument("--other", help="another checkout whose snm compact to time beside")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--open_files", type=int, default=1024)
    parser.add_argument("--work", default=os.path.join(REPO, "benchmarks", "work", "hashed"))
    args = parser.parse_args()
    args.model, args.work = os.path.abspath(args.model), os.path.abspath(args.work)
    builds = [(f"--memory {m}", REPO, ["--memory", m]) for m in args.memory]
    if args.other:
        builds.append(("other", args.other, []))
    for r in range(args.rounds):
        for name, checkout, extra in builds:
            copy = os.path.join(args.work, name.replace(" ", "").replace("-", ""))
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(args.model, copy)
            wall, rss, code, err = timed([sys.executable, "-m", "snm", "compact", "--model", copy,
                                          "--layout", "hashed", *extra], checkout,
                                         args.open_files)
            print(f"round {r + 1} {name}: {wall:.2f} s, peak {rss:.0f} MiB"
                  + ("" if code == 0 else f", exit {code} ({err})"), flush=True)
    first = os.path.join(args.work, builds[0][0].replace(" ", "").replace("-", ""), "compact")
    for name, _, _ in builds[1:]:
        other = os.path.join(args.work, name.replace(" ", "").replace("-", ""), "compact")
        names = sorted(n for n in os.listdir(other) if n.endswith(".npy"))
        differ = [n for n in names if not filecmp.cmp(os.path.join(first, n),
                                                      os.path.join(other, n), shallow=False)]
        print(f"{name} against {builds[0][0]}: {len(names) - len(differ)} of {len(names)} "
              f".npy files identical{'; differ: ' + ', '.join(differ) if differ else ''}")
    scorers = builds[:1] + builds[-1:] if args.other else builds[:1]
    for _ in range(2):
        for name, checkout, _ in scorers:
            copy = os.path.join(args.work, name.replace(" ", "").replace("-", ""))
            out = subprocess.run([sys.executable, "-c", SUMS, copy, TEST], capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": checkout},
                                 cwd=checkout)
            print(f"event_sums, {name}'s code: {out.stdout.strip() or out.stderr[-300:]}")


if __name__ == "__main__":
    main()
