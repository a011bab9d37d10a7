"""``snm train``: from training text to an evaluated model, one command, resumable.

    snm train --config 5gram --train 'corpus/*.gz' --heldout dev.txt --test test.txt \\
        --out run/ [--vocab FILE | --min_count N | --add_to OLD/counts] [--tagged]
        [fit options] [Beam options]
    snm train --family loglinear --penalty wt2 --config 5gram ... (the same inputs)

Stages, each in its own directory under ``--out``::

    1 vocab   vocab/      word counts and vocabulary (skipped with --vocab, --add_to)
    2 count   counts/     C(f,w), C(f,*), continuation counts        (Beam)
                          (with --add_to: of the new --train files, plus OLD's)
    3 join    heldout/    held-out events and small M                 (Beam)
    4 fit     adjust/     theta, train_log.jsonl                      (one worker)
    5 apply   model/      the adjusted model, compact arrays          (Beam)
   (+ prune   pruned/     with --prune_to N: the model pruned to N links)
    6 eval    eval.json, heldout_perplexity.png, model/model_card.md
              (of pruned/ with --prune_to)

With ``--family loglinear`` (a log-linear model with a tree-structured
penalty, Nelakanti et al. 2013, on the same counts) the stages are vocab,
count, fit (``loglinear/``: λ and α chosen on --heldout) and eval.

A stage is skipped when its complete output (its manifest) exists and was
made from the same inputs and settings: ``stages.json`` keeps, per stage, a
digest of its settings, its input files (path, size, time) and the manifests
of the stages it reads.  So a killed run resumes where it stopped, and changing
e.g. the fit options re-runs fit, apply and eval only.  ``--force`` redoes
every stage.  Beam options (``--runner``, ``--direct_num_workers``, ...) go to
the Beam stages.
"""

import argparse
import dataclasses
import hashlib
import io
import json
import resource
import sys
import time

from pipelines import apply as apply_stage
from pipelines import count as count_stage
from pipelines import join as join_stage
from pipelines import prune as prune_stage
from pipelines import runners, running, training_sources
from pipelines import vocab as vocab_stage
from snm.eval_cmd import evaluate as evaluate_text
from snm.eval_cmd import format_report
from snm.fit_cmd import Progress, add_fit_args, options_from
from snm_core.fit.selection import fit_directory
from snm_core.io import memory, storage, tables
from snm_core.io.checkpoints import checkpoint
from snm_core.io.errors import SnmInputError, SnmStageError
from snm_core.io.runlock import run_lock
from snm_core.loglinear import penalties
from snm_core.loglinear.directory import LogLinearOptions
from snm_core.loglinear.directory import train as train_loglinear
from snm_core.model.card import write_model_card
from snm_core.model.layouts import ngram_trie
from snm_core.text.config import load_config

STAGES = ("vocab", "count", "join", "fit", "apply", "eval")
#: With --family loglinear.
LOGLINEAR_STAGES = ("vocab", "count", "fit", "eval")
#: With --prune_to, between apply and eval.
PRUNE_STAGES = ("vocab", "count", "join", "fit", "apply", "prune", "eval")
STATE = "stages.json"


def _manifest_digest(directory):
    return hashlib.sha256(storage.read_bytes(storage.join(directory, tables.MANIFEST))).hexdigest()


def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


class Runner:
    """Runs the stages in order, skipping those whose output is complete and current."""

    def __init__(self, out, force, stages=STAGES):
        self.out = out
        self.force = force
        self.total = len(stages)
        self.state_path = storage.join(out, STATE)
        self.state = {}
        if storage.isfile(self.state_path) and not force:
            self.state = storage.read_json(self.state_path)
        self.rows = []

    def stage(self, number, name, inputs, done_marker, run, describe):
        """Run stage ``name`` unless ``done_marker`` exists and ``inputs`` are unchanged."""
        signature = _digest(inputs)
        previous = self.state.get(name, {})
        if (not self.force and storage.exists(done_marker)
                and previous.get("signature") == signature):
            self.rows.append((name, "skipped", previous.get("seconds"), describe()))
            print(f"=== {number}/{self.total} {name}: up to date, skipped "
                  f"({describe()}) ===", flush=True)
            return
        print(f"=== {number}/{self.total} {name} ===", flush=True)
        start = time.perf_counter()
        try:
            run()
        except SnmStageError as e:  # a fault: name the stage it stopped
            message = str(e)
            raise SnmStageError(message if message.startswith(f"{name}: ")
                                else f"{name}: {message}") from None
        memory.release_memory()  # what the stage left in the allocators, before the next
        seconds = round(time.perf_counter() - start, 3)
        summary = describe()
        self.state[name] = {"signature": signature, "seconds": seconds, "summary": summary}
        storage.write_json(self.state, self.state_path)
        self.rows.append((name, "ran", seconds, summary))
        print(f"=== {number}/{self.total} {name}: {summary} ({seconds:.1f} s) ===", flush=True)

    def summary(self):
        print("\n== snm train summary ==")
        print(f"{'stage':<7} {'status':<8} {'seconds':>9}  result")
        for name, status, seconds, text in self.rows:
            shown = "-" if seconds is None else f"{seconds:.1f}"
            print(f"{name:<7} {status:<8} {shown:>9}  {text}")
        peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
        print(f"peak RSS of one process: {peak:,.0f} MiB")


def plot_perplexity(fit_dir, path):
    """PNG of held-out perplexity per epoch: the final run and each selection run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = [json.loads(line) for line in
           storage.read_text(storage.join(fit_dir, "train_log.jsonl")).splitlines()]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in sorted({e["metafeatures"] for e in log if e["run"] == "select"}):
        runs = [e for e in log if e["run"] == "select" and e["metafeatures"] == variant]
        ax.plot([e["epoch"] for e in runs], [e["valid_perplexity"] for e in runs], "--",
                marker=".", label=f"{variant}: held-back tenth (selection)")
    final = [e for e in log if e["run"] == "final"]
    ax.plot([e["epoch"] for e in final], [e["train_perplexity"] for e in final], "-",
            marker="o", color="black", label=f"{final[0]['metafeatures']}: all held-out (final)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("held-out perplexity")
    ax.set_title("SNM adjustment training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    storage.write_bytes(png.getvalue(), path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="snm train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=runners.RUNNER_HELP)
    parser.add_argument("--config", required=True, help="preset or configuration file")
    parser.add_argument("--train", action="append", required=True, metavar="[TAG=]GLOB")
    parser.add_argument("--heldout", required=True, help="held-out text (trains theta)")
    parser.add_argument("--test", required=True, help="test text (evaluation only)")
    parser.add_argument("--out", required=True, help="run directory")
    vocab_group = parser.add_mutually_exclusive_group()
    vocab_group.add_argument("--vocab", help="vocabulary file, one word a line")
    vocab_group.add_argument("--min_count", type=int, default=vocab_stage.DEFAULT_MIN_COUNT,
                             help="build the vocabulary: words seen this often (default "
                                  "%(default)s)")
    vocab_group.add_argument("--add_to", metavar="COUNTS",
                             help="a finished count directory (a previous run's counts/): "
                                  "count only the --train files and train on their sum with "
                                  "COUNTS (its configuration, vocabulary, tags and buckets)")
    parser.add_argument("--tagged", action="store_true",
                        help="keep the sources' tags in the features (corpus-tagged SNM); "
                             "without it the sources are pooled")
    parser.add_argument("--num_buckets", type=int, default=count_stage.DEFAULT_NUM_BUCKETS)
    parser.add_argument("--force", action="store_true", help="redo every stage")
    parser.add_argument("--prune_to", type=int, metavar="LINKS",
                        help="also prune the model to this many links (snm prune, its default "
                             "criterion) into pruned/, which eval then evaluates")
    running.add_layout_argument(parser)
    add_fit_args(parser)
    family = parser.add_argument_group("log-linear family (--family loglinear)")
    family.add_argument("--family", choices=("snm", "loglinear"), default="snm",
                        help="snm (default) or loglinear: a log-linear n-gram model with a "
                             "tree-structured penalty on the same counts")
    family.add_argument("--penalty", default="t2", choices=penalties.PENALTIES,
                        help="the penalty (default %(default)s); w* weight depth d by alpha^d")
    family.add_argument("--lam", type=_floats, default=None, metavar="L[,L..]",
                        help="penalty strength(s) lambda; each is fitted and the best on "
                             "--heldout kept (default: 0.1, 0.3 and 1 over the number of "
                             "training words and sentence ends)")
    family.add_argument("--alpha", type=_floats, default=None, metavar="A[,A..]",
                        help="depth weight(s) of wl2 wl1 wt2 wtinf (default 1.4, the best of "
                             "0.7 and 1.4 on kernel-100k: deeper suffixes penalised more)")
    family.add_argument("--optimizer", choices=("adagrad", "fista", "pgd", "lbfgs"),
                        default="adagrad",
                        help="stochastic proximal gradient variant (default %(default)s), or "
                             "lbfgs: full-batch L-BFGS-B to the penalised optimum, for l2 l1 "
                             "wl2 wl1 (an epoch is then 10 iterations)")
    family.add_argument("--batches_per_epoch", type=int, default=25)
    family.add_argument("--step", type=float, default=1.0, help="base step size")
    args, beam_args = parser.parse_known_args(argv)
    runners.check_options(beam_args, parser)
    with run_lock(storage.absolute(args.out), "snm train"):
        return _train(args, beam_args)


def _floats(text):
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")
    return values


def _loglinear_options(args):
    weighted = args.penalty.startswith("w")
    alphas = args.alpha if args.alpha is not None else ((1.4,) if weighted else (1.0,))
    epochs = args.epochs if isinstance(args.epochs, int) else LogLinearOptions.epochs
    return LogLinearOptions(penalty=args.penalty, lams=args.lam, alphas=alphas,
                            optimizer=args.optimizer, epochs=epochs,
                            batches_per_epoch=args.batches_per_epoch, step=args.step,
                            patience=args.patience, seed=args.seed)


def _train(args, beam_args):
    """The stages of ``snm train``, in order, each skipped when current."""
    config = load_config(args.config)
    loglinear = args.family == "loglinear"
    if loglinear:
        options = _loglinear_options(args)
        if config.ngram_order is None:
            raise SnmInputError("--family loglinear takes n-gram configurations (5gram, or a "
                                "file with one ngram_extractor); skip-grams are SNM only")
        if args.tagged or args.prune_to or args.layout != "hashed":
            raise SnmInputError("--family loglinear trains on pooled sources, unpruned, "
                                "stored its own way: drop --tagged, --prune_to and --layout")
    sources = training_sources.parse_sources(args.train, pooled=not args.tagged)
    if args.tagged and training_sources.source_tags(sources) == [""]:
        raise SnmInputError("--tagged needs tagged sources: --train TAG=GLOB")
    if args.layout != "hashed":  # refused before any stage runs
        ngram_trie.ngram_span({"config": config.to_text(),
                               "tags": training_sources.source_tags(sources)}, args.config,
                              args.layout)
    files = training_sources.expand_sources(sources)
    for path in (args.heldout, args.test) + ((args.vocab,) if args.vocab else ()):
        if not storage.isfile(path):
            raise SnmInputError(f"{path}: no such file")
    out = storage.absolute(args.out)
    add_to = storage.absolute(args.add_to) if args.add_to else None
    if add_to:
        tables.read_manifest(add_to, "count")  # a finished count, before anything is written
        if add_to == storage.join(out, "counts"):
            raise SnmInputError("--add_to must not be this run's own counts/ (they are "
                                "rewritten); give the previous run's")
    storage.makedirs(out)
    dirs = {name: storage.join(out, name) for name in ("vocab", "counts", "heldout", "adjust",
                                                       "model", "pruned", "loglinear")}
    train_specs = [f"{s.tag}={s.glob}" if s.tag else s.glob for s in sources]
    stamps = [storage.file_stamp(p) for _, p in files]
    if args.prune_to is not None:
        if args.prune_to < 1:
            raise SnmInputError("--prune_to must be at least 1")
    stage_names = (LOGLINEAR_STAGES if loglinear else PRUNE_STAGES if args.prune_to
                   else STAGES)
    runner = Runner(out, args.force, stage_names)

    def manifest(name):
        return storage.read_json(storage.join(dirs[name], tables.MANIFEST))

    vocab_path = args.vocab or storage.join(add_to or dirs["vocab"], "vocab.txt")
    if args.vocab or add_to:
        runner.rows.append(("vocab", "given", None, vocab_path))
    else:
        runner.stage(1, "vocab", {"train": stamps, "min_count": args.min_count},
                     storage.join(dirs["vocab"], tables.MANIFEST),
                     lambda: vocab_stage.run(vocab_stage.VocabOptions(
                         train=train_specs, out=dirs["vocab"], min_count=args.min_count),
                         beam_args),
                     lambda: f"{manifest('vocab')['vocabulary_size']:,} words")
    count_inputs = {"train": stamps, "tags": [s.tag for s in sources],
                    "config": config.to_text(), "vocab": storage.file_stamp(vocab_path),
                    "buckets": args.num_buckets}
    if add_to:
        count_inputs["add_to"] = _manifest_digest(add_to)
    runner.stage(2, "count", count_inputs,
                 storage.join(dirs["counts"], tables.MANIFEST),
                 lambda: count_stage.run(count_stage.CountOptions(
                     config=args.config, train=train_specs, out=dirs["counts"],
                     vocab=None if add_to else vocab_path, add_to=add_to,
                     num_buckets=args.num_buckets), beam_args),
                 lambda: f"{manifest('counts')['totals']['tokens']:,} words -> "
                         f"{manifest('counts')['totals']['links']:,} links")
    if loglinear:
        return _loglinear_stages(runner, args, dirs, out, options)
    runner.stage(3, "join", {"counts": _manifest_digest(dirs["counts"]),
                             "heldout": storage.file_stamp(args.heldout)},
                 storage.join(dirs["heldout"], tables.MANIFEST),
                 lambda: join_stage.run(join_stage.JoinOptions(
                     counts=dirs["counts"], heldout=args.heldout, out=dirs["heldout"]), beam_args),
                 lambda: f"{manifest('heldout')['totals']['events']:,} held-out events, "
                         f"{manifest('heldout')['totals']['small_m_links']:,} small-M links")
    options = options_from(args)
    runner.stage(4, "fit", {"join": _manifest_digest(dirs["heldout"]),
                            "options": options.signature()},  # threads change speed only
                 storage.join(dirs["adjust"], tables.MANIFEST),
                 lambda: fit_directory(dirs["heldout"], dirs["adjust"], options,
                                       progress=Progress()),
                 lambda: f"{manifest('adjust')['metafeatures']['variant']}, "
                         f"{manifest('adjust')['training']['epochs']} epoch(s): held-out "
                         f"perplexity {manifest('adjust')['heldout_perplexity_unadjusted']:.2f}"
                         f" -> {manifest('adjust')['heldout_perplexity']:.2f}")
    # With --prune_to the pruned model takes --layout; the model it is pruned from, hashed.
    apply_layout = "hashed" if args.prune_to else args.layout
    layout_input = {"layout": args.layout} if args.layout != "hashed" else {}  # older: hashed
    runner.stage(5, "apply", {"counts": _manifest_digest(dirs["counts"]),
                              "fit": _manifest_digest(dirs["adjust"]),
                              **({} if args.prune_to else layout_input)},
                 storage.join(dirs["model"], tables.MANIFEST),
                 lambda: apply_stage.run(apply_stage.ApplyOptions(
                     counts=dirs["counts"], theta=dirs["adjust"], out=dirs["model"],
                     layout=apply_layout), beam_args),
                 lambda: f"{manifest('model')['totals']['links']:,} links")
    final = "model"
    if args.prune_to:
        final = "pruned"
        prune_inputs = {"model": _manifest_digest(dirs["model"]), "target_links": args.prune_to,
                        **layout_input}
        if not config.ngram_order:  # mass, weighing the held-out text's features
            prune_inputs["heldout"] = _manifest_digest(dirs["heldout"])
        runner.stage(6, "prune", prune_inputs,
                     storage.join(dirs["pruned"], tables.MANIFEST),
                     lambda: prune_stage.run(prune_stage.PruneOptions(
                         model=dirs["model"], out=dirs["pruned"], target_links=args.prune_to,
                         heldout=None if config.ngram_order else dirs["heldout"],
                         layout=args.layout),
                         beam_args),
                     lambda: f"{manifest('pruned')['totals']['links']:,} of "
                             f"{manifest('model')['totals']['links']:,} links")
    eval_path = storage.join(out, "eval.json")

    def evaluate():
        reports = evaluate_text(dirs[final], args.test)
        checkpoint("eval.scored")  # fault tests stop the run here
        write_model_card(dirs[final], manifest(final),
                         {storage.basename(args.test): reports})
        plot_perplexity(dirs["adjust"], storage.join(out, "heldout_perplexity.png"))
        storage.write_json(reports, eval_path)  # last: it marks the stage done
        for name, report in reports.items():
            print(format_report(name.capitalize(), report))

    def describe_eval():
        reports = storage.read_json(eval_path)
        return "test perplexity " + ", ".join(f"{report['perplexity']:.2f} {name}"
                                              for name, report in reports.items())

    runner.stage(len(stage_names), "eval", {"model": _manifest_digest(dirs[final]),
                                            "test": storage.file_stamp(args.test),
                                            **layout_input},
                 eval_path, evaluate, describe_eval)
    runner.summary()
    print(f"model: {dirs[final]}  (card: {storage.join(dirs[final], 'model_card.md')}); "
          f"eval: {eval_path}; plot: {storage.join(out, 'heldout_perplexity.png')}")
    return 0


def _loglinear_stages(runner, args, dirs, out, options):
    """fit and eval of --family loglinear, after the shared vocab and count stages."""
    model_dir = dirs["loglinear"]

    def manifest():
        return storage.read_json(storage.join(model_dir, tables.MANIFEST))

    runner.stage(3, "fit", {"counts": _manifest_digest(dirs["counts"]),
                            "heldout": storage.file_stamp(args.heldout),
                            "options": dataclasses.asdict(options)},
                 storage.join(model_dir, tables.MANIFEST),
                 lambda: train_loglinear(dirs["counts"], args.heldout, model_dir, options),
                 lambda: f"{options.penalty} lambda {manifest()['lam']:g} alpha "
                         f"{manifest()['alpha']:g}: held-out perplexity "
                         f"{manifest()['heldout_perplexity']:.2f}, "
                         f"{manifest()['totals']['nonzero_pairs']:,} of "
                         f"{manifest()['totals']['pairs']:,} weights nonzero")
    eval_path = storage.join(out, "eval.json")

    def evaluate():
        reports = evaluate_text(model_dir, args.test)
        storage.write_json(reports, eval_path)  # last: it marks the stage done
        print(format_report("Log-linear", reports["loglinear"]))

    runner.stage(4, "eval", {"model": _manifest_digest(model_dir),
                             "test": storage.file_stamp(args.test)}, eval_path, evaluate,
                 lambda: f"test perplexity "
                         f"{storage.read_json(eval_path)['loglinear']['perplexity']:.2f}")
    runner.summary()
    print(f"model: {model_dir}; eval: {eval_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
