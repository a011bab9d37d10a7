"""Corpus-tagged mixing on mix (paper, sections 4.2-4.3): pooled vs tagged `snm train` runs.

    python benchmarks/mixing.py                        # 5gram and skip5gram, pooled and tagged
    python benchmarks/mixing.py --configs 5gram

The four mix/train sources (man pages: in-domain, 400K words; kernel docs,
dictionary definitions and fortunes: out of domain) are either pooled into
one source or kept apart with one tag each (``--tagged``, every feature
becomes (source, feature)); dev and test are man pages.  Each cell is one
`snm train` from scratch with the default fit rule (variant and epochs chosen
on a held-back tenth of dev), timed with the peak summed RSS of its process
tree.  Next to them: KN5 pooled and the tuned linear mixture of per-source KN5
models from ../shared/benchmarks/reference.md.  Appends to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (  # noqa: E402
    MIX_SOURCES,
    MODE,
    WORK,
    corpus,
    print_table,
    read_train_run,
    record,
    run_measured,
)

KN5_POOLED = 93.63
KN5_LINEAR_MIXTURE = 68.40
BUCKETS = {"5gram": 16, "skip5gram": 32, "skip10gram": 64}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="5gram,skip5gram")
    parser.add_argument("--trainings", default="pooled,tagged")
    parser.add_argument("--train_args", default="", help="more `snm train` arguments")
    args = parser.parse_args(argv)
    trainings = [t == "tagged" for t in args.trainings.split(",")]
    train_dir = corpus("mix", "train")
    rows = []
    for config in args.configs.split(","):
        results = {}
        for tagged in trainings:
            out = os.path.join(WORK, "mixing", f"{config}-{'tagged' if tagged else 'pooled'}")
            shutil.rmtree(out, ignore_errors=True)  # from scratch, not resumed
            cmd = [sys.executable, "-m", "snm", "train", "--config", config,
                   "--heldout", corpus("mix", "dev.txt"), "--test", corpus("mix", "test.txt"),
                   "--vocab", corpus("mix", "vocab.txt"), "--out", out,
                   "--num_buckets", str(BUCKETS[config]), *MODE, *args.train_args.split()]
            for source in MIX_SOURCES:
                cmd += ["--train", f"{source}={os.path.join(train_dir, source + '.txt.gz')}"]
            if tagged:
                cmd.append("--tagged")
            seconds, rss = run_measured(cmd, log=out + ".log")
            stages, fit, report = read_train_run(out)
            stages = {name: stage["seconds"] for name, stage in stages.items()}
            results[tagged] = report
            for bulky in ("count", "model"):  # tens of GB for the skip-gram configurations
                shutil.rmtree(os.path.join(out, bulky), ignore_errors=True)
            rows.append({
                "config": config, "training": "tagged" if tagged else "pooled",
                "unadjusted_ppl": report["unadjusted"]["perplexity"],
                "adjusted_ppl": report["adjusted"]["perplexity"],
                "metafeatures": fit["metafeatures"]["variant"],
                "epochs": fit["training"]["epochs"],
                "dev_ppl": fit["heldout_perplexity"],
                "vs_kn5_pooled": report["adjusted"]["perplexity"] / KN5_POOLED,
                "vs_linear_mixture": report["adjusted"]["perplexity"] / KN5_LINEAR_MIXTURE,
                "wall_s": seconds, "peak_rss_mib": rss, "stage_s": stages,
                "fit_select_s": fit["seconds"]["selection"], "fit_final_s": fit["seconds"]["final"],
                "small_m_links": fit["small_m"]["links"],
            })
            print(json.dumps(rows[-1]), flush=True)
        if len(results) == 2:
            rows[-1]["tagged_vs_pooled"] = (results[True]["adjusted"]["perplexity"]
                                            / results[False]["adjusted"]["perplexity"])
    print_table(rows, ["config", "training", "unadjusted_ppl", "adjusted_ppl", "metafeatures",
                       "epochs", "vs_kn5_pooled", "vs_linear_mixture", "tagged_vs_pooled",
                       "wall_s", "peak_rss_mib"])
    record("mixing", rows)


if __name__ == "__main__":
    main()
