"""Billion-word scale (issue 32): corpora sampled from a model of mix, then every stage on them.

    nice python benchmarks/scale.py corpora                  # the model, then the corpora
    nice python benchmarks/scale.py corpora --sizes 50M,100M --dir SCRATCH_DIR
    nice python benchmarks/scale.py sampler --words 20M      # snm sample on 1 and 2 threads
    python benchmarks/scale.py stages --sizes 50M,100M --memory 8G --check_arpa

Steps (each skips what it finds done, so a run picks up where the last stopped):

* ``corpora``: ``snm train --config 5gram`` on all of mix pooled (its four sources,
  dev.txt, test.txt, vocab.txt; ``DIR/mix-5gram/``), then for each size a training
  corpus of that many words sampled from it in shards of ``--shard_words`` (10M:
  five shards at 50M, fifty at 500M) and a sampled dev and test set beside it
  (50K and 100K words, mix's sizes), each with its own seed
  (``DIR/corpus-50M/{train,dev,test}/sample-*.txt``, see :func:`corpus_paths`).
  Before each corpus the free disk is checked against its expected size (the bytes
  a word of the corpora already made, else 6.5). Reports words, seconds, words/s,
  peak RSS and bytes per part.
* ``stages``: for each size, in one run, ``snm train --config 5gram`` (the model's
  vocabulary, ``--memory``), ``snm prune --target_links`` a tenth of the links,
  ``snm export-arpa``, ``snm compact --layout trie``, ``snm eval``; then KenLM on the same
  text: ``lmplz -o 5 -S`` the same budget, ``build_binary trie``, ``query``.  Per stage:
  wall seconds, the peak RSS of its process tree and the peak of its anonymous part
  (``peak_anon_mib``: without the pages of mapped files, such as the model eval scores),
  the peak disk of what it writes (sampled every 2 s); ``vs_lmplz`` for train and export.  Each output is deleted once
  the next step has read it, unless ``--keep``; ``--check_arpa`` scores the test text
  with the kenlm module on the export (KenLM's perplexity against ``snm eval``'s);
  ``--gzip_arpa`` exports ``snm.arpa.gz``.
* ``sampler``: ``snm sample`` of ``--words`` into a scratch directory on one thread
  and on two (two shards each, so the text is the same), alternating, ``--repeats``
  rounds; the best of each, and their ratio.

The peak RSS of ``snm sample`` includes the pages of the model's rows it has read
(memory-mapped files: the page cache's, given back under pressure).  Prints a table
and appends to benchmarks/results.jsonl (benchmark ``scale``, ``step`` the step).
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (  # noqa: E402
    MIX_SOURCES,
    MODE,
    WORK,
    arpa_ngrams,
    corpus,
    kenlm_binary,
    print_table,
    read_train_run,
    record,
    run_measured,
)

from snm.commands.sample import word_count as words_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = "50M,100M,250M,500M"
SHARD_WORDS = 10_000_000
#: Sampled held-out sets beside each corpus: mix's own sizes.
HELDOUT_WORDS = {"dev": 50_000, "test": 100_000}
#: Expected bytes a word of sampled text (words, spaces, newlines) before any is made.
BYTES_PER_WORD = 6.5
#: Disk left free for the other work on the machine while a corpus is written.
DISK_RESERVE = 10 << 30


def label(words):
    """50_000_000 -> ``50M``."""
    for suffix, unit in (("G", 10 ** 9), ("M", 10 ** 6), ("k", 10 ** 3)):
        if words % unit == 0:
            return f"{words // unit}{suffix}"
    return str(words)


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def environment():
    """This checkout's snm for the subprocesses."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def model_dir(directory):
    return os.path.join(directory, "mix-5gram", "model")


def corpus_paths(directory, words):
    """The files of the corpus of ``words`` words: ``train`` (a glob), ``dev``, ``test``,
    and each part's directory (``train_dir``, ...); what the later steps read."""
    root = os.path.join(directory, f"corpus-{label(words)}")
    paths = {part + "_dir": os.path.join(root, part) for part in ("train", "dev", "test")}
    paths["train"] = os.path.join(root, "train", "sample-*.txt")
    for part in HELDOUT_WORDS:
        paths[part] = os.path.join(root, part, "sample-00000-of-00001.txt")
    return paths


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def tree_bytes(directory):
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(directory) for name in names)


def train_model(directory):
    """``snm train --config 5gram`` on mix pooled, unless done; returns its row."""
    out = os.path.dirname(model_dir(directory))
    done = os.path.exists(os.path.join(out, "eval.json"))
    row = {"part": "mix 5-gram model", "status": "skipped" if done else "ran"}
    if not done:
        train_dir = corpus("mix", "train")
        cmd = snm("train", "--config", "5gram", "--heldout", corpus("mix", "dev.txt"),
                  "--test", corpus("mix", "test.txt"), "--vocab", corpus("mix", "vocab.txt"),
                  "--out", out, "--num_buckets", "16", *MODE)
        for source in MIX_SOURCES:
            cmd += ["--train", f"{source}={os.path.join(train_dir, source + '.txt.gz')}"]
        row["seconds"], row["peak_rss_mib"] = run_measured(cmd, env=environment(),
                                                            log=out + ".log")
    manifest = read_json(os.path.join(out, "model", "manifest.json"))
    report = read_json(os.path.join(out, "eval.json"))
    row.update(links=manifest["totals"]["links"], features=manifest["totals"]["features"],
               test_perplexity=report["adjusted"]["perplexity"])
    return row


def sample_part(model, out, words, seed, shards):
    """``snm sample`` into ``out`` unless a sample of this model, words, seed and shards
    is there; returns its row."""
    with open(os.path.join(model, "manifest.json"), "rb") as f:
        identity = hashlib.sha256(f.read()).hexdigest()
    manifest_path = os.path.join(out, "manifest.json")
    done = read_json(manifest_path) if os.path.exists(manifest_path) else None
    wanted = {"words_requested": words, "seed": seed, "model_manifest_sha256": identity}
    row = {"status": "skipped"}
    if done is None or len(done["files"]) != shards or any(
            done[k] != v for k, v in wanted.items()):
        row["status"] = "ran"
        cmd = snm("sample", "--model", model, "--words", str(words), "--out", out,
                  "--seed", str(seed), "--shards", str(shards))
        row["seconds"], row["peak_rss_mib"] = run_measured(cmd, env=environment(),
                                                            log=out + ".log")
        done = read_json(manifest_path)
    totals = done["totals"]
    row.update(words=totals["words"], sentences=totals["sentences"], shards=len(done["files"]),
               sample_seconds=done["seconds"], cpu_seconds=done.get("cpu_seconds"),
               threads=done["threads"],
               words_per_second=totals["words"] / done["seconds"], bytes=tree_bytes(out))
    row["bytes_per_word"] = row["bytes"] / row["words"]
    return row


def corpora(args):
    """The model, then each size's corpus and its dev and test sets."""
    os.makedirs(args.dir, exist_ok=True)
    rows = [train_model(args.dir)]
    print_table(rows, ["part", "status", "seconds", "peak_rss_mib", "features", "links",
                       "test_perplexity"])
    record("scale", [{"step": "corpora", **r} for r in rows if r["status"] == "ran"])
    model = model_dir(args.dir)
    bytes_per_word = BYTES_PER_WORD
    rows = []
    for words in (words_of(s) for s in args.sizes.split(",")):
        paths = corpus_paths(args.dir, words)
        need = int(words * bytes_per_word)
        have = os.path.exists(os.path.join(paths["train_dir"], "manifest.json"))
        free = shutil.disk_usage(args.dir).free
        print(f"{label(words)}: about {need / 2 ** 30:.1f} GiB ({bytes_per_word:.2f} bytes a "
              f"word); {free / 2 ** 30:.1f} GiB free", flush=True)
        if not have and free - need < DISK_RESERVE:
            print(f"{label(words)}: skipped, the disk is too small for it with "
                  f"{DISK_RESERVE >> 30} GiB left over", flush=True)
            continue
        shards = max(1, -(-words // args.shard_words))
        parts = [("train", words, shards)] + [(part, n, 1) for part, n in HELDOUT_WORDS.items()]
        for offset, (part, n, k) in enumerate(parts):
            # Seeds differ between sizes and parts: no corpus repeats another's text.
            row = sample_part(model, paths[part + "_dir"], n, 3 * words + offset, k)
            row.update(corpus=label(words), part=part, free_disk_gib=free / 2 ** 30)
            rows.append(row)
            print_table([row], COLUMNS)
        bytes_per_word = rows[-3]["bytes_per_word"]
    print()
    print_table(rows, COLUMNS)
    record("scale", [{"step": "corpora", **r} for r in rows if r["status"] == "ran"])


COLUMNS = ["corpus", "part", "status", "words", "sentences", "shards", "sample_seconds",
           "words_per_second", "seconds", "peak_rss_mib", "bytes", "bytes_per_word"]


def sampler(args):
    """``snm sample`` on one thread and on two, alternating."""
    model = model_dir(args.dir)
    if not os.path.exists(os.path.join(model, "manifest.json")):
        raise SystemExit(f"{model}: no model; run the corpora step first")
    words = words_of(args.words)
    scratch = os.path.join(args.dir, "sampler-scratch")
    best = {}
    for _ in range(args.repeats):
        for threads in (1, 2):
            shutil.rmtree(scratch, ignore_errors=True)
            cmd = snm("sample", "--model", model, "--words", str(words), "--out", scratch,
                      "--seed", "1", "--shards", "2", "--threads", str(threads))
            seconds, rss = run_measured(cmd, env=environment())
            manifest = read_json(os.path.join(scratch, "manifest.json"))
            run = {"threads": threads, "words": manifest["totals"]["words"],
                   "sample_seconds": manifest["seconds"], "seconds": seconds,
                   "cpu_seconds": manifest["cpu_seconds"], "peak_rss_mib": rss}
            run["words_per_second"] = run["words"] / run["sample_seconds"]
            run["words_per_cpu_second"] = run["words"] / run["cpu_seconds"]
            print_table([run], SAMPLER_COLUMNS)
            if threads not in best or run["sample_seconds"] < best[threads]["sample_seconds"]:
                best[threads] = run
    shutil.rmtree(scratch, ignore_errors=True)
    rows = [best[1], best[2]]
    rows[1]["speedup"] = rows[0]["sample_seconds"] / rows[1]["sample_seconds"]
    print()
    print_table(rows, SAMPLER_COLUMNS + ["speedup"])
    record("scale", [{"step": "sampler", "repeats": args.repeats, **r} for r in rows])


SAMPLER_COLUMNS = ["threads", "words", "sample_seconds", "words_per_second", "cpu_seconds",
                   "words_per_cpu_second", "seconds", "peak_rss_mib"]
def disk_bytes(paths):
    """Bytes allocated on disk to the files under ``paths`` (files or directories; those
    missing count nothing), a file of several names (a model's links to its count's
    files) once."""
    seen, total = set(), 0
    for path in paths:
        files = [path] if os.path.isfile(path) else (
            os.path.join(root, name) for root, _, names in os.walk(path) for name in names)
        for name in files:
            try:
                stat = os.stat(name)
            except FileNotFoundError:  # a temporary file gone between listing and stat
                continue
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total


def measured(cmd, log, disk_paths, env=None, anonymous=None):
    """``run_measured`` with the peak disk of ``disk_paths`` sampled every 2 s:
    ``(seconds, peak RSS MiB, peak disk bytes)``; ``anonymous`` as ``run_measured``'s."""
    import threading

    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], disk_bytes(disk_paths))
            done.wait(2.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        seconds, rss = run_measured(cmd, env=env, log=log, anonymous=anonymous)
    finally:
        done.set()
        sampler.join()
    peak[0] = max(peak[0], disk_bytes(disk_paths))
    return seconds, rss, peak[0]


def stages(args):
    """Every stage of both toolkits on each corpus, in one run (see the module docstring)."""
    model = model_dir(args.dir)
    vocab = os.path.join(model, "vocab.txt")
    for size in args.sizes.split(","):
        words = words_of(size)
        paths = corpus_paths(args.dir, words)
        if not os.path.isdir(paths["train_dir"]):
            raise SystemExit(f"{paths['train_dir']}: run the corpora step first")
        run = os.path.join(args.dir, f"run-{label(words)}")
        shutil.rmtree(run, ignore_errors=True)
        os.makedirs(run)
        shards = sorted(glob.glob(paths["train"]))
        text_bytes = sum(os.path.getsize(p) for p in shards)
        memory = args.memory
        rows = []

        def step(toolkit, name, cmd, disk, required=True, **extra):
            """Run and measure one step; a step not ``required`` that fails (a full
            disk, say) is a row with its error, and the next steps run."""
            log = os.path.join(run, f"{toolkit}-{name}.log")
            print(f"--- {label(words)} {toolkit} {name}", flush=True)
            row = {"step": "stages", "corpus": label(words), "words": words,
                   "toolkit": toolkit, "stage": name, "memory": memory, **extra}
            anonymous = {}
            try:
                seconds, rss, disk_peak = measured(cmd, log, disk, env=environment(),
                                                   anonymous=anonymous)
            except SystemExit as failure:
                if required:
                    record("scale", rows)  # the steps that ran are kept
                    raise
                with open(log, encoding="utf-8", errors="replace") as f:
                    last = (f.read().strip().splitlines() or [""])[-1]
                print(f"{failure}\n{last}", file=sys.stderr)
                row.update(status="failed", error=last[-300:])
                rows.append(row)
                return row
            row.update(seconds=round(seconds, 2), peak_rss_mib=round(rss, 1),
                       peak_anon_mib=round(anonymous["peak_anon_mib"], 1),
                       peak_disk_bytes=disk_peak)
            rows.append(row)
            with open(log, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-3000:]
            if " failed" in tail or "error:" in tail or "Traceback" in tail:
                print(tail, file=sys.stderr)
            return row

        snm_run = os.path.join(run, "snm")
        train = step("snm", "train", snm(
            "train", "--config", "5gram", "--train", paths["train"], "--vocab", vocab,
            "--heldout", paths["dev"], "--test", paths["test"], "--out", snm_run,
            "--memory", memory, *MODE), [snm_run])
        links = read_json(os.path.join(snm_run, "model", "manifest.json"))["totals"]["links"]
        only = set(args.only.split(","))
        stages_run, _, evaluation = read_train_run(snm_run)
        train.update(links=links, stage_seconds={k: v["seconds"] for k, v in
                                                 stages_run.items()},
                     stage_peak_rss_mib={k: v.get("peak_rss_mib") for k, v in
                                         stages_run.items()},
                     test_perplexity=evaluation["adjusted"]["perplexity"])
        model_out = os.path.join(snm_run, "model")
        if not args.keep:  # what the next steps do not read
            for name in ("count", "join"):
                shutil.rmtree(os.path.join(snm_run, name), ignore_errors=True)
        pruned = os.path.join(run, "pruned")
        if "prune" in only:
            step("snm", "prune", snm("prune", "--model", model_out, "--out", pruned,
                                     "--target_links", str(links // 10), "--memory", memory,
                                     *MODE), [pruned], required=False, target_links=links // 10)
        arpa = os.path.join(run, "snm.arpa.gz" if args.gzip_arpa else "snm.arpa")
        arpa_scratch = os.path.join(run, "arpa-scratch")
        if "export-arpa" in only:
            os.makedirs(arpa_scratch)
            step("snm", "export-arpa", snm("export-arpa", "--model", model_out, "--out", arpa,
                                           "--memory", memory, "--scratch", arpa_scratch),
                 [arpa, arpa_scratch], required=False)  # its joins' scratch counted with it
        if "compact" in only:
            step("snm", "compact", snm("compact", "--model", model_out, "--layout", "trie",
                                       "--memory", memory), [os.path.join(model_out, "compact")])
        if "eval" in only:
            ev = step("snm", "eval", snm("eval", "--model", model_out, paths["test"], "--json"),
                      [])
            with open(os.path.join(run, "snm-eval.log"), encoding="utf-8") as f:
                ev["test_perplexity"] = json.loads(f.read().strip().splitlines()[-1])[
                    "adjusted"]["perplexity"]
        if args.check_arpa and {"export-arpa", "eval"} <= only:
            import kenlm
            lm = kenlm.Model(arpa)
            logprob, n = 0.0, 0
            with open(paths["test"], encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        logprob += lm.score(line.strip(), bos=True, eos=True)
                        n += len(line.split()) + 1
            ev["kenlm_on_export_perplexity"] = 10 ** (-logprob / n)
            ev["relative_difference"] = abs(ev["kenlm_on_export_perplexity"]
                                            / ev["test_perplexity"] - 1)
            del lm
        if not args.keep:
            for path in (arpa, pruned):
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else (
                    os.remove(path) if os.path.exists(path) else None)

        if "lmplz" not in only:
            finish(args, run, rows, text_bytes, None)
            continue
        if not args.keep:  # no later step reads snm's files: lmplz gets their disk
            shutil.rmtree(snm_run, ignore_errors=True)
        kenlm_arpa, tmp = os.path.join(run, "kn5.arpa"), os.path.join(run, "lmplz-tmp")
        os.makedirs(tmp)
        lmplz = step("kenlm", "lmplz", ["bash", "-c", " ".join(
            ["cat", *shards, "|", kenlm_binary("lmplz"), "-o", "5", "-S", memory, "-T", tmp,
             # sampled text from a closed vocabulary may have no word seen once, which
             # the 1-gram discounts need (lmplz stops at 100M words without it)
             "--discount_fallback",
             ">", kenlm_arpa])], [kenlm_arpa, tmp])
        lmplz["ngrams"] = arpa_ngrams(kenlm_arpa)
        if "build_binary" in only:
            binary = os.path.join(run, "kn5.trie")
            step("kenlm", "build_binary", [kenlm_binary("build_binary"), "-S", memory, "trie",
                                           kenlm_arpa, binary], [binary])
            query = step("kenlm", "query", ["bash", "-c", f"{kenlm_binary('query')} {binary} "
                                            f"< {paths['test']}"], [])
            with open(os.path.join(run, "kenlm-query.log"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Perplexity including OOVs:"):
                        query["test_perplexity"] = float(line.split()[-1])
        finish(args, run, rows, text_bytes, lmplz)


def finish(args, run, rows, text_bytes, lmplz):
    """One corpus's rows: the ratios to lmplz's seconds, the table, results.jsonl."""
    if not args.keep:
        shutil.rmtree(run)
    for row in rows:
        row["text_bytes"] = text_bytes
        if lmplz and row["toolkit"] == "snm" and row["stage"] in ("train", "export-arpa") \
                and "seconds" in row:
            row["vs_lmplz"] = round(row["seconds"] / lmplz["seconds"], 3)
    print_table(rows, ["corpus", "toolkit", "stage", "seconds", "peak_rss_mib",
                       "peak_anon_mib", "peak_disk_bytes", "vs_lmplz", "test_perplexity",
                       "status"])
    record("scale", rows)


def report(args):
    """The plot and the projection from the ``stages`` rows of results.jsonl: per toolkit,
    seconds and peak GiB against words (benchmarks/plots/scale.png), and each stage's
    seconds a word (the largest run's) projected to 1B and 10B words on one machine and on
    N Dask workers (the Beam stages' time divided by N; the one-worker stages' not)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in open(os.path.join(ROOT, "benchmarks",
                                                            "results.jsonl"))]
    rows = [r for r in rows if r.get("benchmark") == "scale" and r.get("step") == "stages"
            and r.get("status") != "failed"]
    if not rows:
        raise SystemExit("no stages rows in results.jsonl: run the stages step first")
    latest = {}
    for r in rows:  # the newest row of each (corpus, toolkit, stage)
        latest[(r["words"], r["toolkit"], r["stage"])] = r
    totals = {}
    for (words, toolkit, stage), r in latest.items():
        t = totals.setdefault((toolkit, words), {"seconds": 0.0, "rss": 0.0, "disk": 0})
        t["seconds"] += r["seconds"]
        t["rss"] = max(t["rss"], r["peak_rss_mib"] / 1024)
        t["disk"] = max(t["disk"], r["peak_disk_bytes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for toolkit in sorted({k[0] for k in totals}):
        sizes = sorted(w for k, w in totals if k == toolkit)
        left.plot(sizes, [totals[(toolkit, w)]["seconds"] for w in sizes], "o-", label=toolkit)
        right.plot(sizes, [totals[(toolkit, w)]["rss"] for w in sizes], "o-", label=toolkit)
    left.set(xlabel="words", ylabel="seconds, every stage", xscale="log", yscale="log")
    right.set(xlabel="words", ylabel="peak RSS of a process, GiB", xscale="log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("snm (train, prune, export-arpa, compact, eval) and KenLM (lmplz, "
                 "build_binary, query) on sampled text")
    fig.tight_layout()
    os.makedirs(os.path.join(ROOT, "benchmarks", "plots"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "plots", "scale.png")
    fig.savefig(path, dpi=100)
    print(path)
    largest = max(w for _, w in totals)
    beam = {"train", "prune"}  # mostly Beam stages (count, join, apply; prune)
    table = []
    for (words, toolkit, stage), r in sorted(latest.items()):
        if words != largest:
            continue
        per_word = r["seconds"] / words
        row = {"toolkit": toolkit, "stage": stage, "us_per_word": round(per_word * 1e6, 3),
               "disk_bytes_per_word": round(r["peak_disk_bytes"] / words, 2)}
        for target in (10 ** 9, 10 ** 10):
            row[f"hours_{target // 10 ** 9}B"] = round(per_word * target / 3600, 2)
            if toolkit == "snm" and stage in beam:
                row[f"hours_{target // 10 ** 9}B_8_workers"] = round(
                    per_word * target / 3600 / 4, 2)  # 8 workers = 4x this machine's 2
        table.append(row)
    print_table(table, ["toolkit", "stage", "us_per_word", "disk_bytes_per_word", "hours_1B",
                        "hours_1B_8_workers", "hours_10B", "hours_10B_8_workers"])


STEPS = {"corpora": corpora, "sampler": sampler, "stages": stages, "report": report}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="+", choices=sorted(STEPS), help="steps to run, in order")
    parser.add_argument("--dir", default=os.path.join(WORK, "scale"),
                        help="where the model and corpora go (default benchmarks/work/scale)")
    parser.add_argument("--sizes", default=SIZES, help=f"corpus sizes (default {SIZES})")
    parser.add_argument("--shard_words", type=words_of, default=SHARD_WORDS,
                        help="words a training shard (default 10M)")
    parser.add_argument("--words", default="20M", help="sampler: words a run (default 20M)")
    parser.add_argument("--repeats", type=int, default=2, help="sampler: rounds (default 2)")
    parser.add_argument("--memory", default="8G",
                        help="stages: the budget of both toolkits (--memory, lmplz -S)")
    parser.add_argument("--keep", action="store_true",
                        help="stages: keep every output (default: each deleted once read)")
    parser.add_argument("--check_arpa", action="store_true",
                        help="stages: score the test text with the kenlm module on the export")
    parser.add_argument("--gzip_arpa", action="store_true",
                        help="stages: export-arpa writes snm.arpa.gz (for a disk that cannot "
                             "hold the plain text beside the model)")
    parser.add_argument("--only",
                        default="train,prune,export-arpa,compact,eval,lmplz,build_binary",
                        help="stages: the steps to run (default all: %(default)s; train "
                             "always runs; build_binary, and query, need lmplz); e.g. "
                             "train,lmplz for train's time ratio alone")
    args = parser.parse_args(argv)
    for step in args.steps:
        print(f"=== {step} ===", flush=True)
        STEPS[step](args)


if __name__ == "__main__":
    main()
