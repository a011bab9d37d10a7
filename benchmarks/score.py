"""Scoring speed of `snm_core.scoring.layouts.hashed.Model` beside the kenlm Python module, and model sizes.

    python benchmarks/score.py                          # kernel 5-gram, kernel/test.txt
    python benchmarks/score.py --model DIR --text FILE
    BUILD_BINARY=/path/to/build_binary python benchmarks/score.py   # also KenLM binaries

Both scorers see the same ARPA model (`snm export-arpa` of the SNM model, so
the two compute the same probabilities: the run checks that the perplexities
agree to 1e-4) and the same lines, in one process.  Each timing is the best of
15 interleaved rounds (every scorer once a round) after one warm-up round, of
scoring every line with <s> and </s>:
kenlm `sum(model.score(line, bos=True, eos=True))` (its Python module has no
batch API) on one thread, and on two threads scoring half the lines each (the
last model form only: the module holds the GIL, so this shows what threads
give it), and snm `Model.score_lines` (adjusted probabilities) on 1 and 2
threads (its compiled lookups and numpy release the GIL).  Words are the
predicted tokens, </s> included.  Without --model, a kernel 5-gram model is
built once (count, join, fit with unlexicalized meta-features for 3 epochs,
apply) into benchmarks/work/score-kernel-5gram/.  The same model in the trie
and small layouts (`MODEL-trie/`, `MODEL-small/`: the Parquet files
hard-linked, `compact/` built with `--layout`) is scored too; the small
layout's perplexity may differ from the ARPA's by its rounding bound (0.1%)
instead of 1e-4.  Sizes: bytes per link of the compact arrays (hashed layout:
link arrays and feature arrays apart; trie; small), the ARPA file, and, when
BUILD_BINARY names KenLM's build_binary, its probing, trie and 8-bit
quantized trie files (`-q 8 -b 8 -a 22 trie`; the trie and probing ones scored
too: the forms decoders load).  Appends to benchmarks/results.jsonl.
"""

import argparse
import glob
import hashlib
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import MODE, WORK, arpa_ngrams, corpus, print_table, record, run_measured  # noqa: E402

REPEATS = 15
PPL_TOLERANCE = 1e-4  # largest relative perplexity difference between snm and kenlm
SMALL_TOLERANCE = 1e-3  # the small layout's values are rounded (snm_core/scoring/layouts/small.py)
TRIE_LAYOUTS = ("trie", "small")
SNM_THREADS = (1, 2)
FIT_EPOCHS = 3
DEFAULT_MODEL = os.path.join(WORK, "score-kernel-5gram")
LINK_ARRAYS = ("link_entries", "link_c", "link_index", "link_overflow")
FEATURE_ARRAYS = ("feature_entries", "feature_index", "feature_overflow")


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def build_model(model):
    """count -> join -> fit -> apply on kernel, each stage skipped if already done."""
    stage = os.path.join(WORK, os.path.basename(model) + "-stages")
    counts, heldout, fit = (os.path.join(stage, n) for n in ("counts", "heldout", "fit"))
    steps = [
        (counts, snm("count", "--config", "5gram", "--train", corpus("kernel", "train.txt.gz"),
                     "--vocab", corpus("kernel", "vocab.txt"), "--out", counts, *MODE)),
        (heldout, snm("join", "--count", counts, "--heldout", corpus("kernel", "dev.txt"),
                      "--out", heldout)),
        (fit, snm("fit", "--join", heldout, "--out", fit, "--metafeatures", "unlexicalized",
                  "--epochs", str(FIT_EPOCHS))),
        (model, snm("apply", "--count", counts, "--fit", fit, "--out", model)),
    ]
    for out, cmd in steps:
        if not os.path.exists(os.path.join(out, "manifest.json")):
            seconds, _ = run_measured(cmd, log=out + ".log")
            print(f"{cmd[3]}: {seconds:.1f} s", flush=True)


def layout_copy(model, layout):
    """``MODEL-LAYOUT/``: the model's files hard-linked, its compact/ in ``layout``."""
    from snm_core.scoring.compact import compile_model
    copy = model.rstrip("/") + "-" + layout
    manifest = os.path.join(copy, "compact", "manifest.json")
    if newer(manifest, os.path.join(model, "manifest.json")):
        return copy
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    for name in os.listdir(model):
        if name != "compact":
            os.link(os.path.join(model, name), os.path.join(copy, name))
    seconds = time.perf_counter()
    compile_model(copy, layout)
    print(f"{layout} layout built in {time.perf_counter() - seconds:.1f} s", flush=True)
    return copy


def newer(target, *sources):
    return os.path.exists(target) and all(os.path.getmtime(target) >= os.path.getmtime(s)
                                          for s in sources)


def export_name(model):
    """A name for the model's ARPA export and KenLM binaries: its path under WORK
    (``layouts/mix/model`` -> ``layouts-mix-model``), else its name and a digest of
    its path, so that two models both called ``model/`` do not share one file."""
    path = os.path.abspath(model)
    relative = os.path.relpath(path, WORK)
    if not relative.startswith(".."):
        return relative.replace(os.sep, "-")
    digest = hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
    return f"{os.path.basename(path)}-{digest}"


def best_of_rounds(scorers):
    """Best seconds and result of each scorer over REPEATS interleaved rounds.

    Every round calls every scorer once (after one warm-up round), so a slow
    spell of this shared machine slows them all alike instead of one.
    """
    results = [fn() for fn in scorers]
    best = [float("inf")] * len(scorers)
    for _ in range(REPEATS):
        for i, fn in enumerate(scorers):
            start = time.perf_counter()
            results[i] = fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return list(zip(best, results))


def kenlm_log10(lm, lines):
    """Total log10 probability of ``lines`` (with <s> and </s>) under a kenlm model."""
    return sum(lm.score(line, bos=True, eos=True) for line in lines)


def snm_log10(model, lines, threads):
    """(total log10 probability, predicted words) of ``lines`` under the adjusted model."""
    total, words = 0.0, 0
    for _, _, s in model.score_lines(lines, threads=threads, unadjusted=False):
        total += float(np.log10(s.prob).sum())
        words += len(s.prob)
    return total, words


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="snm model directory (n-gram)")
    parser.add_argument("--text", default=None, help="default ../shared/corpora/kernel/test.txt")
    args = parser.parse_args(argv)
    import kenlm

    from snm_core.scoring.compact import load_model

    text = args.text or corpus("kernel", "test.txt")
    if args.model == DEFAULT_MODEL:
        build_model(args.model)
    manifest = os.path.join(args.model, "manifest.json")
    arpa = os.path.join(WORK, export_name(args.model) + ".arpa")
    if not newer(arpa, manifest):
        run_measured(snm("export-arpa", "--model", args.model, "--out", arpa), log=arpa + ".log")
    kenlm_models = [("kenlm", "ARPA", arpa)]
    build_binary = os.environ.get("BUILD_BINARY")
    binaries = {}
    if build_binary:
        for kind, options in (("probing", ["probing"]), ("trie", ["trie"]),
                              ("trie-q8", ["-q", "8", "-b", "8", "-a", "22", "trie"])):
            binaries[kind] = arpa[:-len(".arpa")] + f".{kind}"
            if not newer(binaries[kind], arpa):
                run_measured([build_binary, *options, arpa, binaries[kind]],
                             log=binaries[kind] + ".log")
        # The forms a decoder loads: probing (fastest) and trie (KenLM's compact one,
        # the size the fast layout is held to).
        kenlm_models += [("kenlm", "trie binary", binaries["trie"]),
                         ("kenlm", "probing binary", binaries["probing"])]

    with open(text, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.split()]
    words = sum(len(line.split()) + 1 for line in lines)
    halves = [lines[:len(lines) // 2], lines[len(lines) // 2:]]
    models = [kenlm.Model(path) for _, _, path in kenlm_models]
    model = load_model(args.model)
    copies = {layout: layout_copy(args.model, layout) for layout in TRIE_LAYOUTS}
    tries = {layout: load_model(path) for layout, path in copies.items()}
    pool = ThreadPoolExecutor(2)
    specs = [({"scorer": scorer, "model_form": form, "threads": 1,
               "note": "Python module has no batch API"},
              lambda lm=lm: kenlm_log10(lm, lines))
             for (scorer, form, _), lm in zip(kenlm_models, models)]
    specs.append(({"scorer": "kenlm", "model_form": kenlm_models[-1][1], "threads": 2,
                   "note": "half the lines each: the module holds the GIL"},
                  lambda: sum(pool.map(lambda h: kenlm_log10(models[-1], h), halves))))
    specs += [({"scorer": "snm", "model_form": f"{layout} layout (mmap)", "threads": threads,
                "note": "Model.score_lines, adjusted"},
               lambda scorer=scorer, threads=threads: snm_log10(scorer, lines, threads))
              for layout, scorer in [("hashed", model), *tries.items()]
              for threads in SNM_THREADS]
    rows = []
    for (row, _), (seconds, result) in zip(specs, best_of_rounds([fn for _, fn in specs])):
        if row["scorer"] == "snm":
            result, snm_words = result
            if snm_words != words:
                raise SystemExit(f"snm predicted {snm_words} words, kenlm {words}")
        rows.append({**row, "words": words, "seconds": seconds, "log10_prob": result})
    pool.shutdown()
    base = rows[0]
    for r in rows:
        r["words_per_s"] = r["words"] / r["seconds"]
        r["ratio_vs_kenlm"] = r["words_per_s"] / base["words_per_s"]
        r["perplexity"] = 10 ** (-r["log10_prob"] / r["words"])
        r["ppl_rel_diff"] = abs(r["perplexity"] / base["perplexity"] - 1)
    print(f"{len(lines):,} lines of {text}, {args.model}\n")
    shown = [{**r, "ppl_rel_diff": f"{r['ppl_rel_diff']:.1e}"} for r in rows]
    print_table(shown, ["scorer", "model_form", "threads", "words", "seconds", "words_per_s",
                        "ratio_vs_kenlm", "perplexity", "ppl_rel_diff", "note"])

    compact = os.path.join(args.model, "compact")
    nbytes = {os.path.basename(p)[:-4]: os.path.getsize(p)
              for p in glob.glob(os.path.join(compact, "*.npy"))}
    links, features = len(model.links.entries), len(model.features.entries)
    ngrams = arpa_ngrams(arpa)
    sizes = [("snm hashed layout, all arrays", sum(nbytes.values()), links, "link"),
             ("snm link arrays", sum(nbytes[n] for n in LINK_ARRAYS), links, "link"),
             ("snm feature arrays", sum(nbytes[n] for n in FEATURE_ARRAYS), features, "feature"),
             ("snm feature arrays", sum(nbytes[n] for n in FEATURE_ARRAYS), links, "link"),
             ("ARPA file", os.path.getsize(arpa), ngrams, "n-gram")]
    sizes += [(f"snm {layout} layout, all arrays",
               sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "compact", "*.npy"))),
               links, "link") for layout, path in copies.items()]
    sizes += [(f"KenLM {kind} binary", os.path.getsize(path), ngrams, "n-gram")
              for kind, path in binaries.items()]
    size_rows = [{"model": name, "bytes": size, "count": count, "per": per,
                  "bytes_per": size / count} for name, size, count, per in sizes]
    print()
    print_table(size_rows, ["model", "bytes", "count", "per", "bytes_per"])
    bad = [r for r in rows if not r["ppl_rel_diff"] < (
        SMALL_TOLERANCE if r["model_form"].startswith("small") else PPL_TOLERANCE)]
    if bad:
        raise SystemExit(f"perplexities differ by more than {PPL_TOLERANCE}: not the same "
                         "computation; nothing recorded")
    record("score", [{"table": "speed", "text": text, "model": args.model, **r} for r in rows]
           + [{"table": "size", "model_dir": args.model, **r} for r in size_rows])


if __name__ == "__main__":
    main()
