"""Pruned SNM models: test perplexity against size, beside KenLM and pocolm.

    python benchmarks/prune.py                   # kernel 5-gram, 50 .. 1% and pocolm's sizes
    python benchmarks/prune.py --config skip10gram               # kernel skip-10-gram, mass
    python benchmarks/prune.py --config skip10gram --corpus mix --targets 25000000
    python benchmarks/prune.py --config skip10gram --corpus mix --targets 25000000 \
        --heldout_weights 1,2,4,8,16 --choose_weight      # the weight, on dev halves
    LMPLZ=$KENLM_BIN/lmplz python benchmarks/prune.py   # lmplz --prune in this run
    POCOLM=$POCOLM_DIR python benchmarks/prune.py                 # pocolm in this run
    POCOLM=$POCOLM_DIR python benchmarks/prune.py --corpus man --criteria reestimate

pocolm builds from its public sources: ``git clone https://github.com/danpovey/pocolm
$POCOLM_DIR && make -C $POCOLM_DIR/src`` (its scripts need numpy: this process's
Python runs them).

`snm train --config 5gram` on kernel (train.txt.gz, dev.txt, test.txt, the corpus's
vocab.txt; made once under benchmarks/work/prune/), then `snm prune --target_links N`
for 50, 20, 10, 5, 2 and 1% of its links and for the n-gram counts of pocolm's two
pruned models.  Each pruned model is scored by `snm eval` on test.txt and exported
with `snm export-arpa`, whose test perplexity under the `kenlm` module is reported too
(they agree: the export is exact).  KenLM's count pruning (`lmplz -o 5 --prune 0 N N N
N`) runs here when LMPLZ names the binary, pocolm (`train_lm.py` on the same files,
dev.txt for its metaparameters, then `prune_lm_dir.py --target-num-ngrams` to lmplz's
sizes as in reference.md, `format_arpa_lm.py`, scored by the `kenlm` module) when
POCOLM names its checkout, and then the SNM is pruned to the n-gram counts pocolm
reached; otherwise their figures are ../shared/benchmarks/reference.md's.  The
5-gram is pruned by ``--criteria`` (default: ``backoff``, the default for n-gram models;
``reestimate``, with the run's held-out join; ``count`` and ``mass``), to ``--targets``
if given.  ``--corpus man`` does the same on text the pruning was not tuned on: mix's
man pages alone (400K words of train/man.txt.gz, mix's dev and test, which are man
pages, and its vocab.txt), beside pocolm in the same run at POCOLM_TARGETS["man"]
(POCOLM must be set).  pocolm's word list there is the vocab.txt words the training text
holds, the words the SNM has: with all 115K words of mix's list pocolm would spread its
unigram mass over words the text never shows, where the SNM gives it to ``<UNK>``.

Skip-gram configurations (``--config skip10gram``) are pruned by ``mass`` and ``count``
(through the Beam pipeline, two threads; also ``mass`` with the run's held-out join at
each of ``--heldout_weights``) to the same fractions or to ``--targets``, and set beside
the corpus's unpruned SNM 5-gram; mix trains on its four sources pooled (the run of
benchmarks/mixing.py, kept here with its model).  Prints a table, writes
benchmarks/plots/prune_<corpus>_<config>.png and appends to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (  # noqa: E402
    MIX_SOURCES,
    MODE,
    WORK,
    arpa_ngrams,
    corpus,
    print_table,
    record,
    run_measured,
)

FRACTIONS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01)
#: ../shared/benchmarks/reference.md, "Pruned n-gram models on kernel".
POCOLM = {1_116_762: 88.94, 202_890: 123.05}
LMPLZ_REFERENCE = {1: (1_095_624, 96.75), 2: (508_154, 112.77), 3: (330_471, 127.55),
                   5: (197_026, 148.62), 10: (108_836, 181.86), 20: (69_452, 223.82)}
GOALS = {1_116_762: 80.0, 202_890: 110.7}


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def kenlm_perplexity(arpa, test_path):
    import kenlm
    model = kenlm.Model(arpa)
    with open(test_path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    total = sum(model.score(line, bos=True, eos=True) for line in lines)
    return 10 ** (-total / sum(len(line.split()) + 1 for line in lines))


def snm_perplexity(model, test_path):
    out = subprocess.run(snm("eval", "--model", model, "--json", test_path),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["adjusted"]["perplexity"]


def lmplz_rows(lmplz, work, test_path):
    """lmplz --prune 0 N N N N on the text with OOV words as one placeholder, scored on
    the test text written the same way."""
    from benchmarks.count import unk_text
    from benchmarks.train import unk_test
    text, test_path = unk_text("kernel"), unk_test("kernel")  # OOVs as lmplz's placeholder
    rows = []
    for n in LMPLZ_REFERENCE:
        arpa = os.path.join(work, f"lmplz-prune{n}.arpa")
        if not os.path.exists(arpa):
            with open(text, "rb") as src, open(arpa + ".tmp", "wb") as dst:
                subprocess.run([lmplz, "-o", "5", "-S", "1G", "--prune", "0", str(n), str(n),
                                str(n), str(n)], stdin=src, stdout=dst, check=True,
                               stderr=subprocess.DEVNULL)
            os.replace(arpa + ".tmp", arpa)
        rows.append({"model": f"lmplz --prune 0 {n} {n} {n} {n}", "links": arpa_ngrams(arpa),
                     "test_ppl": round(kenlm_perplexity(arpa, test_path), 2)})
    return rows


#: pocolm's prune targets: on kernel lmplz's sizes (reference.md; it lands within 5% of a
#: target), on man about 20% and 6% of its n-grams above the unigrams.
POCOLM_TARGETS = {"kernel": (1_095_624, 197_026), "man": (205_745, 76_394)}


def corpus_files(name):
    """``{"train": [(source, path)], "dev", "test", "vocab"}`` of a corpus: ../shared's
    setups, and ``man``, mix's man pages alone."""
    if name == "man":
        return {"train": [("man", corpus("mix", "train", "man.txt.gz"))],
                "dev": corpus("mix", "dev.txt"), "test": corpus("mix", "test.txt"),
                "vocab": corpus("mix", "vocab.txt")}
    train = ([(s, corpus("mix", "train", s + ".txt.gz")) for s in MIX_SOURCES]
             if name == "mix" else [(name, corpus(name, "train.txt.gz"))])
    return {"train": train, "dev": corpus(name, "dev.txt"), "test": corpus(name, "test.txt"),
            "vocab": corpus(name, "vocab.txt")}


def seen_words(files, path):
    """Write to ``path`` the words of ``files``' vocab.txt its training text holds."""
    import gzip
    with open(files["vocab"], encoding="utf-8") as f:
        vocab = {line.strip() for line in f if line.strip()}
    seen = set()
    for _, source in files["train"]:
        with gzip.open(source, "rt", encoding="utf-8") as f:
            for line in f:
                seen.update(line.split())
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(w + "\n" for w in sorted(vocab & seen))


def pocolm_rows(pocolm, work, name, test_path, targets):
    """pocolm's unpruned 5-gram and its pruned models at ``targets``, built here (each
    step skipped when its output exists), timed and scored."""
    import time
    env = {**os.environ, "PATH": os.pathsep.join(
        [os.path.dirname(sys.executable), os.path.join(pocolm, "scripts"),
         os.path.join(pocolm, "src"), os.environ.get("PATH", "")])}
    files = corpus_files(name)
    root = os.path.join(work, "pocolm" if name == "kernel" else f"pocolm-{name}")
    text = os.path.join(root, "text")
    os.makedirs(text, exist_ok=True)
    for file, source in [(s + ".txt.gz", path) for s, path in files["train"]] + [
            ("dev.txt", files["dev"])]:
        if not os.path.lexists(os.path.join(text, file)):
            os.symlink(source, os.path.join(text, file))
    wordlist = files["vocab"]
    if name != "kernel":   # kernel's vocab.txt is its words seen three times or more
        wordlist = os.path.join(root, "words.txt")
        seen_words(files, wordlist)

    def step(cmd, output, stdout=None):
        """Seconds to make ``output`` (None: it was there from an earlier run)."""
        if os.path.exists(output):
            return None
        start = time.perf_counter()
        with open(stdout or os.devnull, "w") as out, open(output + ".log", "w") as log:
            subprocess.run(cmd, cwd=root, env=env, check=True, stdout=out, stderr=log)
        if stdout:
            os.replace(stdout, output)
        return round(time.perf_counter() - start, 1)

    lm = os.path.join(root, "lm5")
    train_s = step(["train_lm.py", f"--wordlist={wordlist}",
                    "--num-splits=1", "--warm-start-ratio=10", "text", "5", "work", "lm5"], lm)
    rows = []
    for target in (None,) + tuple(targets):
        pruned = lm if target is None else f"{lm}_prune{target}"
        prune_s = 0.0 if target is None else step(
            ["prune_lm_dir.py", f"--target-num-ngrams={target}", lm, pruned], pruned)
        arpa = pruned + ".arpa"
        format_s = step(["format_arpa_lm.py", pruned], arpa, stdout=arpa + ".tmp")
        rows.append({"model": "pocolm " + ("train_lm.py, unpruned" if target is None else
                                           f"prune_lm_dir.py --target-num-ngrams={target}"),
                     "links": arpa_ngrams(arpa),
                     "test_ppl": round(kenlm_perplexity(arpa, test_path), 2),
                     "pocolm_seconds": train_s if target is None else
                     (prune_s or 0) + (format_s or 0)})
        print(rows[-1], flush=True)
    return rows


#: Unpruned SNM 5-gram on mix, pooled (benchmarks/README.md, "Test perplexity").
MIX_5GRAM = 74.88


def trained(name, config, work):
    """The directory of an `snm train` run of ``config`` on corpus ``name`` (made once)."""
    run = os.path.join(work, f"{name}-{config}")
    if not os.path.exists(os.path.join(run, "eval.json")):
        files = corpus_files(name)
        cmd = snm("train", "--config", config, "--heldout", files["dev"],
                  "--test", files["test"], "--vocab", files["vocab"], "--out", run)
        if name == "mix":
            cmd += [arg for source, path in files["train"]
                    for arg in ("--train", f"{source}={path}")]
        else:
            cmd += ["--train", files["train"][0][1]]
        if config != "5gram":
            cmd += ["--num_buckets", "64", *MODE]
        run_measured(cmd, log=run + ".log")
    return run


def pruned_row(model, target, criterion, test_path, arpa=False, heldout_weight=None,
               heldout=None):
    """``snm prune`` to ``target`` links (with a held-out join, by default the run's,
    weighing ``heldout_weight`` if given), scored on the test text."""
    label = f"--criterion {criterion}"
    extra = []
    if criterion == "reestimate":  # its discounts are chosen on the run's held-out join
        extra = ["--heldout", heldout or os.path.join(os.path.dirname(model), "join")]
    if heldout_weight is not None:
        label += f" --heldout_weight {heldout_weight:g}"
        extra = ["--heldout", heldout or os.path.join(os.path.dirname(model), "join"),
                 "--heldout_weight", str(heldout_weight)]
    out = os.path.join(os.path.dirname(model),
                       f"pruned-{label.replace('--', '').replace(' ', '-')}-{target}")
    seconds, rss = run_measured(snm("prune", "--model", model, "--out", out, "--target_links",
                                    str(target), "--criterion", criterion, *extra, *MODE),
                                log=out + ".log")
    row = {"model": f"snm prune {label} --target_links {target:,}", "links": links_of(out),
           "test_ppl": round(snm_perplexity(out, test_path), 2),
           "prune_seconds": round(seconds, 1), "prune_peak_rss_mib": round(rss)}
    if arpa:
        path = out + ".arpa"
        subprocess.run(snm("export-arpa", "--model", out, "--out", path), check=True,
                       capture_output=True)
        row["arpa_ppl_kenlm"] = round(kenlm_perplexity(path, test_path), 2)
        os.remove(path)
    print(row, flush=True)
    return row


def links_of(model):
    with open(os.path.join(model, "manifest.json")) as f:
        return json.load(f)["totals"]["links"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="5gram", choices=("5gram", "skip10gram"))
    parser.add_argument("--corpus", default="kernel", choices=("kernel", "mix", "man"),
                        help="man: the 5-gram beside pocolm on mix's man pages alone")
    parser.add_argument("--pocolm_targets",
                        help="with POCOLM: comma-separated n-gram counts pocolm prunes to "
                             "(default POCOLM_TARGETS), the SNM then pruned to the counts "
                             "it reached only")
    parser.add_argument("--targets", help="comma-separated link counts (default: the "
                                          "fractions 50 .. 1%% of the model's links)")
    parser.add_argument("--criteria", default="backoff,reestimate,count,mass",
                        help="5-gram: the criteria each target is pruned by (comma-separated)")
    parser.add_argument("--heldout_weights", default="",
                        help="skip-gram configurations: also prune by mass with the run's "
                             "held-out join weighing these (comma-separated)")
    parser.add_argument("--choose_weight", action="store_true",
                        help="with --heldout_weights: score each weight on the second half "
                             "of dev instead, the fit and the join on the first half")
    args = parser.parse_args(argv)
    work = os.path.join(WORK, "prune")
    os.makedirs(work, exist_ok=True)
    if args.choose_weight:
        return choose_weight(args, work)
    if args.config != "5gram" or args.corpus == "mix":
        return skipgram_main(args, work)
    name = args.corpus
    test_path = corpus_files(name)["test"]
    model = os.path.join(trained(name, "5gram", work), "model")
    total = links_of(model)
    rows = [{"model": f"snm 5-gram ({name}), unpruned", "links": total,
             "test_ppl": round(snm_perplexity(model, test_path), 2)}]
    pocolm = os.environ.get("POCOLM")
    if name != "kernel" and not pocolm:
        raise SystemExit(f"--corpus {name} compares with pocolm in the same run: set POCOLM "
                         "to its built checkout")
    if pocolm:
        pocolm_targets = ([int(t) for t in args.pocolm_targets.split(",")]
                          if args.pocolm_targets else POCOLM_TARGETS[name])
        pocolm_built = pocolm_rows(pocolm, work, name, test_path, pocolm_targets)
        reached = {r["links"]: r["test_ppl"] for r in pocolm_built[1:]}
        goals = {links: round(ppl * 0.9, 2) for links, ppl in reached.items()}
    else:
        reached, goals = POCOLM, GOALS
    targets = ([int(t) for t in args.targets.split(",")] if args.targets
               else [round(total * f) for f in FRACTIONS
                     if name == "kernel" and not args.pocolm_targets] + sorted(reached))
    for target in sorted(set(targets), reverse=True):
        for criterion in args.criteria.split(","):
            row = pruned_row(model, target, criterion, test_path,
                             arpa=criterion in ("backoff", "reestimate"))
            if target in reached:
                row["pocolm_ppl"] = reached[target]
                row["goal_ppl"] = goals[target]
            rows.append(row)
    lmplz = os.environ.get("LMPLZ")
    if name != "kernel":
        baseline = []
    elif lmplz:
        baseline = lmplz_rows(lmplz, work, test_path)
    else:
        baseline = [{"model": f"lmplz --prune 0 {n} {n} {n} {n} (reference.md)", "links": c,
                     "test_ppl": p} for n, (c, p) in LMPLZ_REFERENCE.items()]
    if pocolm:
        baseline += pocolm_built
    else:
        baseline += [{"model": "pocolm prune_lm_dir.py (reference.md)", "links": c,
                      "test_ppl": p} for c, p in POCOLM.items()]
    print_table(rows + baseline, ["model", "links", "test_ppl", "arpa_ppl_kenlm", "pocolm_ppl",
                                  "goal_ppl", "prune_seconds", "prune_peak_rss_mib",
                                  "pocolm_seconds"])
    record("prune", [dict(r, corpus=name) for r in rows + baseline])
    if not args.targets and name == "kernel":  # the plot shows the whole sweep
        plot(rows, baseline, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                          "prune_kernel_5gram.png"))


def choose_weight(args, work):
    """The held-out weight chosen on held-out text only: dev split into halves in
    line order, the run's counts joined with the first half and fitted on it (the
    run's variant and epochs), the applied model pruned by mass with that join
    weighing each weight, and the second half scored."""
    run = trained(args.corpus, args.config, work)
    base = os.path.join(work, f"{args.corpus}-{args.config}-halves")
    os.makedirs(base, exist_ok=True)
    with open(corpus(args.corpus, "dev.txt"), encoding="utf-8") as f:
        lines = f.readlines()
    first, second = os.path.join(base, "dev-1.txt"), os.path.join(base, "dev-2.txt")
    for path, part in ((first, lines[:len(lines) // 2]), (second, lines[len(lines) // 2:])):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(part)
    with open(os.path.join(run, "fit", "manifest.json")) as f:
        fit = json.load(f)
    join, theta, model = (os.path.join(base, name) for name in ("heldout", "adjust", "model"))
    counts = os.path.join(run, "count")
    for cmd, out in ((snm("join", "--count", counts, "--heldout", first, "--out", join), join),
                     (snm("fit", "--join", join, "--out", theta, "--variants",
                          fit["metafeatures"]["variant"], "--epochs",
                          str(fit["training"]["epochs"])), theta),
                     (snm("apply", "--count", counts, "--fit", theta, "--out", model, *MODE),
                      model)):
        if not os.path.exists(os.path.join(out, "manifest.json")):
            run_measured(cmd, log=out + ".log")
    rows = [{"model": f"snm {args.config} ({args.corpus}), fitted on dev half 1, unpruned",
             "links": links_of(model), "test_ppl": round(snm_perplexity(model, second), 2)}]
    target = int(args.targets.split(",")[0])
    for weight in [float(w) for w in args.heldout_weights.split(",")]:
        rows.append(pruned_row(model, target, "mass", second, heldout_weight=weight,
                               heldout=join))
    print_table(rows, ["model", "links", "test_ppl", "prune_seconds"])
    record("prune-heldout-weight", [dict(r, corpus=args.corpus, config=args.config,
                                         scored_on="dev half 2") for r in rows])


def skipgram_main(args, work):
    """A skip-gram model pruned by mass, beside the corpus's unpruned SNM 5-gram."""
    test_path = corpus(args.corpus, "test.txt")
    model = os.path.join(trained(args.corpus, args.config, work), "model")
    total = links_of(model)
    rows = [{"model": f"snm {args.config} ({args.corpus}), unpruned", "links": total,
             "test_ppl": round(snm_perplexity(model, test_path), 2)}]
    if args.corpus == "kernel":
        five = os.path.join(trained("kernel", "5gram", work), "model")
        reference = {"model": "snm 5-gram, unpruned", "links": links_of(five),
                     "test_ppl": round(snm_perplexity(five, test_path), 2)}
    else:
        reference = {"model": "snm 5-gram (mix, pooled), unpruned (benchmarks/README.md)",
                     "test_ppl": MIX_5GRAM}
    targets = ([int(t) for t in args.targets.split(",")] if args.targets
               else [round(total * f) for f in FRACTIONS])
    weights = [float(w) for w in args.heldout_weights.split(",") if w]
    for target in sorted(set(targets), reverse=True):
        for criterion, weight in ([("mass", None), ("count", None)]
                                  + [("mass", w) for w in weights]):
            row = pruned_row(model, target, criterion, test_path, heldout_weight=weight)
            row["vs_5gram"] = round(row["test_ppl"] / reference["test_ppl"], 4)
            rows.append(row)
    print_table(rows + [reference], ["model", "links", "test_ppl", "vs_5gram",
                                     "prune_seconds", "prune_peak_rss_mib"])
    record("prune", [dict(r, corpus=args.corpus, config=args.config) for r in rows]
           + [reference])
    if not args.targets:
        plot(rows, [], os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                    f"prune_{args.corpus}_{args.config}.png"))


def plot(rows, baseline, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for criterion, marker in (("backoff", "o-"), ("reestimate", "D-"), ("count", "+-"),
                              ("mass", "x-")):
        ours = sorted((r["links"], r["test_ppl"]) for r in rows
                      if f"--criterion {criterion} --target" in r["model"])
        if ours:
            ax.plot(*zip(*ours), marker, label=f"snm prune --criterion {criterion}")
    for name, marker in (("lmplz", "s--"), ("pocolm", "^")):
        points = sorted((r["links"], r["test_ppl"]) for r in baseline if name in r["model"])
        if points:
            ax.plot(*zip(*points), marker, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("n-grams (links)")
    ax.set_ylabel("test perplexity")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
