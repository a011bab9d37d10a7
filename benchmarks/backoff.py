"""The back-off form at scale: `snm export-arpa` and `snm prune --criterion backoff`
beside lmplz on the same text, in the same run.

    LMPLZ=$KENLM_BIN/lmplz python benchmarks/backoff.py               # kernel, mix
    LMPLZ=... python benchmarks/backoff.py --setups kernel --baseline da8b183 --repeats 3
    LMPLZ=... python benchmarks/backoff.py --setups mix --config 7gram    # a bigger model

For each setup a model is trained once (`snm train --config C`, the corpus's vocab.txt,
dev.txt held out, both cores; mix pools its four sources) under
benchmarks/work/backoff/<setup>-<config>/.  Then, in turns (``--repeats``, each keeping
its best time and largest peak): `snm export-arpa` (``--memory``, default 712M: 512 MiB
of working memory beside the process's 200 MB; the cores as threads), `snm prune
--target_links T` (``--prune_to``, default a
tenth of the links, 1,100,000 on kernel; the Beam runner in process, two workers),
lmplz on the same text (``lmplz -o N -S 1G``, words outside vocab.txt as one placeholder
word, as benchmarks/count.py does; its whole run, ARPA written), and with ``--baseline
REV`` the same two snm commands from that revision (extracted with git archive under
benchmarks/work/backoff/).  Per command: wall seconds, peak RSS of the process tree,
peak disk of its output and scratch files (sampled every 50 ms), output bytes.  Then the export's test
perplexity under the kenlm module against `snm eval`'s (their relative difference),
and the ratios: export / lmplz's whole run, and each snm command / the baseline's.
Prints a table and appends to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import HERE, WORK, corpus, print_table, record, run_measured  # noqa: E402
from benchmarks.count import setup_files, unk_text  # noqa: E402

ROOT = os.path.join(WORK, "backoff")
#: Configurations beyond the presets: (text of the config file).
CONFIGS = {f"{n}gram": f"ngram_extractor {{\n  min_n: 0\n  max_n: {n - 1}\n}}\n"
           for n in (6, 7)}


def snm(src, *args):
    """`snm ARGS` from the sources in ``src`` (-P: not from the working directory)."""
    return ["env", f"PYTHONPATH={src}", sys.executable, "-P", "-m", "snm", *args]


def model_for(setup, config):
    """The setup's model (trained once); returns its directory."""
    run = os.path.join(ROOT, f"{setup}-{config}")
    if not os.path.exists(os.path.join(run, "model", "manifest.json")):
        files, vocab = setup_files(setup)
        pattern = files[0] if len(files) == 1 else os.path.join(os.path.dirname(files[0]), "*")
        if config in CONFIGS:
            os.makedirs(ROOT, exist_ok=True)
            path = os.path.join(ROOT, f"{config}.cfg")
            with open(path, "w") as f:
                f.write(CONFIGS[config])
            config = path
        run_measured(snm(os.path.dirname(HERE), "train", "--config", config, "--train", pattern,
                         "--vocab", vocab, "--heldout", corpus(setup, "dev.txt"),
                         "--test", corpus(setup, "test.txt"), "--out", run,
                         "--direct_num_workers=2"), log=run + ".log")
    return os.path.join(run, "model")


def order_of(config):
    return int(config[0])


def baseline_source(revision):
    """The snm sources of ``revision`` (git archive, once), with this checkout's build of
    the C library (``snm_core/fit/_kernels.c``; the same source, or rebuild it there)."""
    target = os.path.join(ROOT, f"src-{revision}")
    if not os.path.exists(os.path.join(target, ".built")):
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        archive = subprocess.run(["git", "archive", revision], cwd=os.path.dirname(HERE),
                                 capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
        library = os.path.join("snm_core", "fit")
        for name in os.listdir(os.path.join(os.path.dirname(HERE), library)):
            if name.startswith("_kernels") and name.endswith(".so"):
                shutil.copy(os.path.join(os.path.dirname(HERE), library, name),
                            os.path.join(target, library, name))
        open(os.path.join(target, ".built"), "w").close()
    return target


def measured(name, cmd, directory):
    """One command writing under ``directory`` (emptied first): {wall_s, peak_rss_mib,
    disk_mib (the directory's peak: output and scratch), output_mib (what is left)}."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(os.path.join(directory, "scratch"))
    seconds, rss, disk = run_measured(cmd, log=os.path.join(ROOT, "logs", name + ".log"),
                                      disk=directory)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(directory)
               for n in names)
    return {"wall_s": seconds, "peak_rss_mib": rss, "disk_mib": disk / 2 ** 20,
            "output_mib": size / 2 ** 20}


def commands(setup, config, model, target, lmplz, baseline, memory):
    """``{name: (command, directory)}``: the run's commands, each writing under its own
    directory (its output ``out``, its scratch files under ``scratch/``)."""
    def place(name):
        return os.path.join(ROOT, "out", name)

    here = os.path.dirname(HERE)
    runs = {"export": (snm(here, "export-arpa", "--model", model, "--out",
                           os.path.join(place("export"), "out.arpa"), "--scratch",
                           os.path.join(place("export"), "scratch"), "--memory", memory),
                       place("export")),
            "prune": (snm(here, "prune", "--model", model, "--out",
                          os.path.join(place("prune"), "out"), "--target_links", str(target),
                          "--memory", memory, "--direct_num_workers=2"), place("prune"))}
    if lmplz:
        runs["lmplz"] = ([lmplz, "-o", str(order_of(config)), "-S", "1G", "-T",
                          os.path.join(place("lmplz"), "scratch") + "/", "--text",
                          unk_text(setup), "--arpa", os.path.join(place("lmplz"), "out.arpa")],
                         place("lmplz"))
    if baseline:
        src = baseline_source(baseline)
        runs["export_baseline"] = (snm(src, "export-arpa", "--model", model, "--out", os.path.join(
            place("export_baseline"), "out.arpa")), place("export_baseline"))
        runs["prune_baseline"] = (snm(src, "prune", "--model", model, "--out", os.path.join(
            place("prune_baseline"), "out"), "--target_links", str(target)),
            place("prune_baseline"))
    return runs


def perplexities(model, setup):
    """``(snm eval's test perplexity, KenLM's of the last export, relative difference)``."""
    import kenlm

    from snm_core.scoring.compact import load_model
    with open(corpus(setup, "test.txt"), encoding="utf-8") as f:
        test = [line.strip() for line in f if line.strip()]
    lm = kenlm.Model(os.path.join(ROOT, "out", "export", "out.arpa"))
    words = sum(len(line.split()) + 1 for line in test)
    kenlm_ppl = 10 ** (-sum(lm.score(line, bos=True, eos=True) for line in test) / words)
    ours = load_model(model).evaluate_lines(test)["adjusted"]["perplexity"]
    return ours, kenlm_ppl, abs(kenlm_ppl - ours) / ours


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="kernel,mix")
    parser.add_argument("--config", default="5gram", choices=("5gram", "6gram", "7gram"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--prune_to", type=int, help="links (default: a tenth; kernel 1.1M)")
    parser.add_argument("--memory", default="712M",
                        help="--memory of export-arpa and prune (default %(default)s)")
    parser.add_argument("--baseline", help="a git revision whose export-arpa and prune to run "
                                           "too (the one-process code: da8b183)")
    args = parser.parse_args(argv)
    lmplz = os.environ.get("LMPLZ")
    rows = []
    for setup in args.setups.split(","):
        model = model_for(setup, args.config)
        with open(os.path.join(model, "manifest.json")) as f:
            links = json.load(f)["totals"]["links"]
        target = args.prune_to or (1_100_000 if setup == "kernel" else links // 10)
        runs = commands(setup, args.config, model, target, lmplz, args.baseline, args.memory)
        best = {}
        for _ in range(args.repeats):
            for name, (cmd, directory) in runs.items():
                got = measured(f"{setup}-{args.config}-{name}", cmd, directory)
                if name not in best or got["wall_s"] < best[name]["wall_s"]:
                    got["peak_rss_mib"] = max(got["peak_rss_mib"],
                                              best.get(name, {}).get("peak_rss_mib", 0))
                    best[name] = got
        # after the runs: a child forked from a process this large would report its peak;
        # the kenlm module reads at most 6-grams (KENLM_MAX_ORDER)
        ours, kenlm_ppl, difference = (perplexities(model, setup)
                                       if order_of(args.config) <= 6 else (None,) * 3)
        for name, got in best.items():
            row = {"setup": setup, "config": args.config, "links": links, "command": name,
                   "repeats": args.repeats, "memory": args.memory, **got}
            if name == "prune" or name == "prune_baseline":
                row["target_links"] = target
            if name == "export":
                row.update(snm_test_ppl=ours, kenlm_test_ppl=kenlm_ppl,
                           ppl_relative_difference=difference)
                if "lmplz" in best:
                    row["vs_lmplz"] = got["wall_s"] / best["lmplz"]["wall_s"]
            if f"{name}_baseline" in best:
                row["vs_baseline_wall"] = got["wall_s"] / best[f"{name}_baseline"]["wall_s"]
                row["vs_baseline_rss"] = (got["peak_rss_mib"]
                                          / best[f"{name}_baseline"]["peak_rss_mib"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print_table(rows, ["setup", "config", "links", "command", "wall_s", "peak_rss_mib",
                       "disk_mib", "output_mib", "vs_lmplz", "vs_baseline_wall",
                       "vs_baseline_rss", "ppl_relative_difference"])
    record("backoff", rows)


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"({time.time() - started:.0f} s)")
