"""Shared helpers for the benchmark scripts: paths, timing, peak RSS, results file."""

import datetime
import json
import os
import platform
import resource
import subprocess
import time

from snm_core.io.disk_peak import tree_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The shared corpora sit beside the checkout (../shared); SNM_SHARED overrides.
SHARED = os.path.abspath(os.environ.get("SNM_SHARED") or os.path.join(REPO, "..", "shared"))
CORPORA = os.path.join(SHARED, "corpora")
RESULTS = os.path.join(HERE, "results.jsonl")
WORK = os.path.join(HERE, "work")
#: Beam options of the benchmarks' pipeline runs: the direct runner on both cores.
MODE = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]
#: mix's training sources (mix/train/<source>.txt.gz); man pages are the domain.
MIX_SOURCES = ("man", "kernel", "gcide", "fortunes")


def corpus(*parts):
    path = os.path.join(CORPORA, *parts)
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: the benchmarks need ../shared/corpora")
    return path


def tokenized_corpus(name, files):
    """``(vocabulary, [sentences of each file])`` of a corpus in ../shared/corpora, tokenized
    with its vocab.txt (``.gz`` files read compressed)."""
    import gzip

    from snm_core.text.tokenize import tokenize
    from snm_core.text.vocab import Vocabulary

    vocab = Vocabulary.load(corpus(name, "vocab.txt"))

    def read(file):
        opener = gzip.open if file.endswith(".gz") else open
        with opener(corpus(name, file), "rt", encoding="utf-8") as f:
            return tokenize(f.read().splitlines(), vocab)[0]

    return vocab, [read(file) for file in files]


#: What words outside vocab.txt become in lmplz's input, as SNM reads them as <UNK>:
#: lmplz refuses a literal <unk> in text, and an ordinary placeholder word gives the
#: reference's n-gram counts.
OOV_PLACEHOLDER = "OOVTOKEN"


def placeholder_text(paths, vocab_path, target):
    """The text files ``paths`` (plain or ``.gz``) in one file ``target``, its lines' words
    outside ``vocab_path``'s vocabulary as :data:`OOV_PLACEHOLDER` and blank lines left
    out, for KenLM (made once)."""
    import gzip

    if not os.path.exists(target):
        with open(vocab_path, encoding="utf-8") as f:
            vocab = set(f.read().split("\n"))
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        with open(target + ".tmp", "w", encoding="utf-8") as out:
            for path in paths:
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rt", encoding="utf-8") as f:
                    for line in f:
                        words = line.split()
                        if words:
                            out.write(" ".join(w if w in vocab else OOV_PLACEHOLDER
                                               for w in words) + "\n")
        os.replace(target + ".tmp", target)
    return target


def kenlm_binary(name):
    """The path of KenLM's ``name`` (lmplz, build_binary, query) in ``KENLM_BIN``."""
    path = os.path.join(os.environ.get("KENLM_BIN", "/tmp/kenlm-build/bin"), name)
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: build KenLM (benchmarks/README.md) or set KENLM_BIN")
    return path


def arpa_ngrams(path):
    """Total n-gram count from an ARPA file's \\data\\ header."""
    total = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("ngram "):
                total += int(line.split("=")[1])
            elif line.startswith("\\1-grams"):
                break
    return total


def git_revision():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def portable(value):
    """A path inside the checkout relative to it, one in the shared directory as
    ``../shared/...``: no machine's absolute path goes into results.jsonl."""
    if not (isinstance(value, str) and os.path.isabs(value)):
        return value
    for root, shown in ((REPO, ""), (SHARED, os.path.join("..", "shared"))):
        if os.path.commonpath([root, os.path.abspath(value)]) == root:
            return os.path.join(shown, os.path.relpath(value, root))
    return value


def record(benchmark, rows):
    """Append one JSON line per row to benchmarks/results.jsonl (paths made portable)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(RESULTS, "a", encoding="utf-8") as f:
        for row in rows:
            row = {name: portable(value) for name, value in row.items()}
            f.write(json.dumps({"benchmark": benchmark, "time": stamp, "revision": git_revision(),
                                "machine": platform.node(), "cpus": os.cpu_count(), **row},
                               sort_keys=True) + "\n")


def read_train_run(out):
    """``(stages, the fit's manifest, eval.json)`` of a finished ``snm train --out out``:
    ``stages`` is ``stages.json``'s stages by name (not its other keys, such as the name of
    the final model)."""
    def load(*parts):
        with open(os.path.join(out, *parts)) as f:
            return json.load(f)
    stages = {name: stage for name, stage in load("stages.json").items()
              if isinstance(stage, dict)}
    return stages, load("fit", "manifest.json"), load("eval.json")


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


def _tree_rss_kib(root_pid):
    """Summed RSS and anonymous RSS (KiB) of a process and all its descendants
    (processes, not threads).  The anonymous part is the memory the processes own;
    the rest is pages of mapped files (a model being scored), which the kernel can drop."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, anonymous, stack = 0, 0, [root_pid]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anonymous += int(line.split()[1])
        except OSError:
            pass
    return total, anonymous


def run_measured(cmd, env=None, log=None, disk=None, anonymous=None):
    """Run ``cmd``; return wall seconds and its peak RSS (MiB), and with ``disk`` (a
    directory) the peak bytes of the files under it, sampled as the RSS is.

    The peak is the larger of the process's own (its kernel high-water mark,
    from wait4: exact for one process) and the summed RSS of the whole
    process tree sampled every 50 ms (for a runner and its worker processes).
    ``anonymous``, a dict, gets ``peak_anon_mib``: the sampled peak of the tree's
    anonymous RSS (without the mapped files' pages).
    """
    import threading

    start = time.perf_counter()
    if log:
        os.makedirs(os.path.dirname(log), exist_ok=True)
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    peak, anon_peak, disk_peak = [0], [0], [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss, anon = _tree_rss_kib(proc.pid)
            peak[0], anon_peak[0] = max(peak[0], rss), max(anon_peak[0], anon)
            if disk:
                disk_peak[0] = max(disk_peak[0], tree_bytes(disk))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if log:
        out.close()
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}"
                         + (f"; see {log}" if log else ""))
    rss = max(peak[0], usage.ru_maxrss) / 1024
    if anonymous is not None:
        anonymous["peak_anon_mib"] = anon_peak[0] / 1024
    return (seconds, rss, disk_peak[0]) if disk else (seconds, rss)


def peak_rss_mib(children=False):
    """Peak resident set size of this process (or of its waited-for children), MiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024
