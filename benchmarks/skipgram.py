"""Skip-gram models at a size a decoder holds, beside KenLM's KN5 on the same text.

    python benchmarks/skipgram.py                                  # kernel
    python benchmarks/skipgram.py --corpora kernel,sampled-10M     # and 10M sampled words
    python benchmarks/skipgram.py --corpora mix --memory 8G --sizes 1,2,4

For each corpus, in one run: ``lmplz -o 5`` and ``build_binary trie`` (and the quantized
trie, ``-q 8 -b 8``) on the training text with the words outside vocab.txt as one
placeholder word, scored by ``query``; the SNM 5-gram (``snm train --config 5gram
--layout trie``); the skip-10-gram SNM (``snm train --config skip10gram
--layout packed`` with ``--thresholds``, by default features and links of the skip-gram
types seen once and links of the 6- to 9-grams seen once left out), then the same
``snm train`` with ``--prune_to`` each of ``--sizes`` times the KN5 trie's bytes (its
counts thresholded again for the size, then fitted: pipelines/select.py).  Each row:
seconds, peak RSS of the process tree, peak disk of what it writes, the bytes of the
model a decoder loads (the KenLM binary; SNM's scoring directory, ``snm compact --out``)
and test perplexity.
``sampled-N`` corpora are N words of ``snm sample`` from the kernel skip-10-gram model
``--sampler`` (dev and test sampled too), made once under benchmarks/work/.

Appends to results.jsonl and draws benchmarks/plots/skipgram_CORPUS.png: test perplexity
against model bytes.
"""

import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (HERE, WORK, corpus, kenlm_binary,  # noqa: E402
                               placeholder_text, print_table, record, run_measured)

SNM = [sys.executable, "-m", "snm"]
#: The skip-10-gram model's count thresholds: skip-gram features and links seen once, and
#: the links of 6- to 9-grams seen once (benchmarks/README.md, "Count thresholds"); the
#: 6- to 9-grams' feature thresholds leave out nothing more (such a feature seen once has
#: one link, seen once) but let the feature sketch drop them before the scratch.
THRESHOLDS = ("--min_feature_count skip=2 --min_link_count skip=2 " + " ".join(
    f"--min_link_count {n}-gram=2 --min_feature_count {n}-gram=2" for n in range(6, 10)))
#: Seeds of the sampled corpora's train, dev and test text.
SAMPLE_SEEDS = (11, 911, 912)
SAMPLE_HELDOUT_WORDS = (60_000, 120_000)


def sampled_corpus(words, sampler):
    """``{"train": [paths], "dev", "test", "vocab"}`` of ``words`` words sampled from the
    model ``sampler`` (made once)."""
    root = os.path.join(WORK, f"sampled-{words}")
    done = os.path.join(root, "done")
    if not os.path.exists(done):
        shutil.rmtree(root, ignore_errors=True)
        for name, n, seed in (("train", words, SAMPLE_SEEDS[0]),
                              ("dev", SAMPLE_HELDOUT_WORDS[0], SAMPLE_SEEDS[1]),
                              ("test", SAMPLE_HELDOUT_WORDS[1], SAMPLE_SEEDS[2])):
            subprocess.run(SNM + ["sample", "--model", sampler, "--words", str(n), "--out",
                                  os.path.join(root, name), "--seed", str(seed)], check=True,
                           stdout=subprocess.DEVNULL)
        shutil.copy(os.path.join(sampler, "vocab.txt"), os.path.join(root, "vocab.txt"))
        open(done, "w").close()
    shards = lambda name: sorted(glob.glob(os.path.join(root, name, "*.txt*")))  # noqa: E731
    dev, test = (_one_file(shards(name), os.path.join(root, f"{name}.txt"))
                 for name in ("dev", "test"))
    return {"train": shards("train"), "dev": dev, "test": test,
            "vocab": os.path.join(root, "vocab.txt")}


def _one_file(paths, target):
    if not os.path.exists(target):
        with open(target, "w", encoding="utf-8") as out:
            for path in paths:
                out.write(_read(path))
    return target


def _read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read()


def shared_corpus(name):
    if name == "kernel":
        train = [corpus("kernel", "train.txt.gz")]
    else:
        train = sorted(glob.glob(os.path.join(corpus("mix", "train"), "*.txt.gz")))
    return {"train": train, "dev": corpus(name, "dev.txt"), "test": corpus(name, "test.txt"),
            "vocab": corpus(name, "vocab.txt")}


def directory_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files if f != "model_card.md")


def snm_perplexity(model, test, log):
    out = subprocess.run(SNM + ["eval", "--model", model, "--json", test], check=True,
                         capture_output=True, text=True).stdout
    import json
    with open(log, "a", encoding="utf-8") as f:
        f.write(out)
    return json.loads(out)["adjusted"]["perplexity"]


def kenlm_perplexity(binary, test):
    out = subprocess.run([kenlm_binary("query"), "-v", "summary", binary], stdin=open(test),
                         check=True, capture_output=True, text=True).stdout
    return float(next(line for line in out.splitlines()
                      if line.startswith("Perplexity including OOVs:")).split()[-1])


def run_corpus(name, paths, args):
    run = os.path.join(args.work, name)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    rows = []

    def measured(what, cmd, writes, **row):
        seconds, rss, disk = run_measured(cmd, log=os.path.join(run, f"{what}.log"),
                                          disk=writes)
        rows.append({"corpus": name, "model": what, "seconds": round(seconds, 2),
                     "peak_rss_mib": round(rss), "peak_disk_bytes": disk, **row})
        return rows[-1]

    # KenLM: the same text, OOVs as one word; its binaries are what a decoder loads.
    train = placeholder_text(paths["train"], paths["vocab"], os.path.join(run, "train.txt"))
    test = placeholder_text([paths["test"]], paths["vocab"], os.path.join(run, "test.txt"))
    arpa, tmp = os.path.join(run, "kn5.arpa"), os.path.join(run, "lmplz-tmp")
    os.makedirs(tmp)
    lmplz = kenlm_binary("lmplz")
    measured("lmplz -o 5", ["bash", "-c", f"{lmplz} -o 5 -S {args.memory} -T {tmp} "
                            f"--discount_fallback < {train} > {arpa}"], run)
    for what, options in (("KN5 trie", []), ("KN5 trie -q 8 -b 8", ["-q", "8", "-b", "8"])):
        binary = os.path.join(run, what.replace(" ", "_") + ".bin")
        row = measured(what, [kenlm_binary("build_binary"), "-S", args.memory, "trie", *options,
                              arpa, binary], run)
        row.update(model_bytes=os.path.getsize(binary), test_perplexity=kenlm_perplexity(
            binary, test))
    kn5_bytes = rows[1]["model_bytes"]
    os.remove(arpa)
    shutil.rmtree(tmp)

    common = ["--heldout", paths["dev"], "--test", paths["test"], "--vocab", paths["vocab"],
              "--memory", args.memory] + sum((["--train", p] for p in paths["train"]), [])
    if "5gram" in args.configs:
        out = os.path.join(run, "snm-5gram")
        row = measured("SNM 5-gram trie", SNM + ["train", "--config", "5gram", "--out", out,
                                                  "--layout", "trie", *common], out)
        row.update(model_bytes=_shipped(out + "/model", "trie", run),
                   test_perplexity=snm_perplexity(out + "/model", paths["test"],
                                                  os.path.join(run, "eval.log")))
    out = os.path.join(run, "snm-skip10")
    model = out + "/model"
    if args.full:
        row = measured("SNM skip-10 packed",
                       SNM + ["train", "--config", "skip10gram", "--out", out, "--layout",
                              "packed", *args.thresholds.split(), *common], out)
        row.update(model_bytes=_shipped(model, "packed", run), test_perplexity=snm_perplexity(
            model, paths["test"], os.path.join(run, "eval.log")))
    for times in args.sizes:
        # The same run directory: after the first train the count is up to date; select,
        # join, fit, apply and eval run again for each size (the model fits it: no prune
        # stage).
        target = int(kn5_bytes * times)
        row = measured(f"SNM skip-10 fitted at {times:g}x KN5 trie",
                       SNM + ["train", "--config", "skip10gram", "--out", out, "--layout",
                              "packed", *args.thresholds.split(), *common, "--prune_to",
                              f"{target}B"], out, target_bytes=target)
        row.update(model_bytes=_shipped(model, "packed", run), links=_links(model),
                   test_perplexity=snm_perplexity(model, paths["test"],
                                                  os.path.join(run, "eval.log")))
    for row in rows:
        if row.get("test_perplexity") and rows[1].get("test_perplexity"):
            row["vs_kn5_perplexity"] = round(row["test_perplexity"]
                                             / rows[1]["test_perplexity"], 3)
        if row.get("model_bytes"):
            row["vs_kn5_bytes"] = round(row["model_bytes"] / kn5_bytes, 3)
    return rows


def _links(model):
    with open(os.path.join(model, "manifest.json")) as f:
        return json.load(f)["totals"]["links"]


def _shipped(model, layout, run):
    """The bytes of ``model``'s scoring directory (snm compact --out), written and removed."""
    target = os.path.join(run, "shipped")
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(SNM + ["compact", "--model", model, "--layout", layout, "--out", target],
                   check=True, stdout=subprocess.DEVNULL)
    size = directory_bytes(target)
    shutil.rmtree(target)
    return size


def plot(name, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    groups = {"KenLM KN5": [r for r in rows if r["model"].startswith("KN5")],
              "SNM 5-gram": [r for r in rows if r["model"].startswith("SNM 5-gram")],
              "SNM skip-10": [r for r in rows if r["model"].startswith("SNM skip-10")]}
    for label, group in groups.items():
        group = sorted((r for r in group if r.get("model_bytes")), key=lambda r: r["model_bytes"])
        if group:
            ax.plot([r["model_bytes"] / 2**20 for r in group],
                    [r["test_perplexity"] for r in group], "o-", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("model bytes (MiB): KenLM binary, SNM scoring directory")
    ax.set_ylabel("test perplexity")
    ax.set_title(f"{name}: perplexity against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(HERE, "plots", f"skipgram_{name}.png")
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", default="kernel",
                        help="kernel, mix, sampled-N (N words, e.g. sampled-10M)")
    parser.add_argument("--configs", default="5gram,skip10gram")
    parser.add_argument("--thresholds", default=THRESHOLDS,
                        help="the skip-10-gram train's count thresholds (default: %(default)s)")
    parser.add_argument("--sizes", default="1,2,4",
                        type=lambda text: [float(x) for x in text.split(",")],
                        help="pruned sizes, in multiples of the KN5 trie's bytes")
    parser.add_argument("--no_full", dest="full", action="store_false",
                        help="no whole thresholded skip-10-gram: the first --sizes train "
                             "counts (what a 100M-word corpus's disk allows)")
    parser.add_argument("--memory", default="8G")
    parser.add_argument("--sampler", default=os.path.join(WORK, "kernel-skip10", "model"),
                        help="the model sampled corpora come from")
    parser.add_argument("--work", default=os.path.join(WORK, "skipgram"))
    args = parser.parse_args()
    for name in args.corpora.split(","):
        if name.startswith("sampled-"):
            words = name.split("-", 1)[1].upper().replace("M", "000000").replace("K", "000")
            paths = sampled_corpus(int(words), args.sampler)
        else:
            paths = shared_corpus(name)
        rows = run_corpus(name, paths, args)
        print_table(rows, ["corpus", "model", "seconds", "peak_rss_mib", "peak_disk_bytes",
                           "model_bytes", "vs_kn5_bytes", "test_perplexity",
                           "vs_kn5_perplexity"])
        record("skipgram", rows)
        print(plot(name, rows))


if __name__ == "__main__":
    main()
