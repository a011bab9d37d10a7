"""Shared helpers for the benchmark scripts: paths, timing, peak RSS, results file."""

import datetime
import json
import os
import platform
import resource
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = os.path.abspath(os.path.join(HERE, "..", "..", "shared", "corpora"))
RESULTS = os.path.join(HERE, "results.jsonl")
WORK = os.path.join(HERE, "work")


def corpus(*parts):
    path = os.path.join(CORPORA, *parts)
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: the benchmarks need ../shared/corpora")
    return path


def git_revision():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def record(benchmark, rows):
    """Append one JSON line per row to benchmarks/results.jsonl."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(RESULTS, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"benchmark": benchmark, "time": stamp, "revision": git_revision(),
                                "machine": platform.node(), "cpus": os.cpu_count(), **row},
                               sort_keys=True) + "\n")


def print_table(rows, columns):
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths)))


def _fmt(v):
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "" if v is None else str(v)


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def peak_rss_mib(children=False):
    """Peak resident set size of this process (or of its waited-for children), MiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024
