"""``snm train``: from training text to an evaluated model, one command, resumable.

    snm train --config 5gram --train 'corpus/*.gz' --heldout dev.txt --test test.txt \\
        --out run/ [--vocab FILE | --min_count N | --add_to OLD/count] [--tagged]
        [fit options] [Beam options]
    snm train --family loglinear --penalty wt2 --config 5gram ... (the same inputs)

Stages, each in its own directory under ``--out`` (the table is
:data:`snm.chain.STAGES`)::

    1 vocab   vocab/      word counts and vocabulary (skipped with --vocab, --add_to)
    2 count   count/      C(f,w), C(f,*), continuation counts        (Beam)
                          (with --add_to: of the new --train files, plus OLD's)
   (+ select  selected/   with --prune_to, a skip-gram configuration: the count
                          thresholded again so that the model fits; join and apply
                          read it, and apply's model is the final one)  (Beam)
    3 join    join/       held-out events and small M                 (Beam)
    4 fit     fit/        theta, train_log.jsonl                      (one worker)
    5 apply   model/      the adjusted model, compact arrays          (Beam)
   (+ prune   pruned/     with --prune_to N|SIZE, an n-gram configuration: the model
                          pruned to N links or SIZE bytes)
    6 eval    eval.json, heldout_perplexity.png, the final model's model_card.md

With ``--family loglinear`` (a log-linear model with a tree-structured
penalty, Nelakanti et al. 2013, on the same counts) the stages are vocab,
count, loglinear (``loglinear/``: λ and α chosen on --heldout, by default within
``--time_budget`` seconds, 600 unless given) and eval.

A stage is skipped when its complete output (its manifest) exists and was
made from the same inputs and settings (``stages.json``).  So a killed run
resumes where it stopped, and changing e.g. the fit options re-runs fit,
apply and eval only.  ``--force`` redoes every stage.  Beam options
(``--runner``, ``--direct_num_workers``, ...) go to the Beam stages.
``snm validate RUN`` checks every stage directory of a run.
"""

import argparse

from pipelines import training_sources
from pipelines import vocab as vocab_stage
from pipelines.count import vocab_file
from snm import chain
from snm.commands import arguments
from snm.commands.fit import add_fit_args, options_from
from snm_core.count import continuation, thresholds
from snm_core.count.budget import BUCKET_OCCURRENCES, DEFAULT_NUM_BUCKETS
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import parse_size
from snm_core.io.runlock import run_lock
from snm_core.io.textfile import check_encoding
from snm_core.loglinear import family as loglinear_family
from snm_core.loglinear.family import LogLinearOptions
from snm_core.scoring.compact import HASHED_LAYOUTS
from snm_core.scoring.layouts import ngram_trie
from snm_core.stages import manifests
from snm_core.text.config import load_config


def build_parser():
    """The parser of ``snm train``."""
    parser = arguments.parser("train", __doc__, beam=True)
    arguments.config_arguments(parser)
    parser.add_argument("--train", action="append", required=True, metavar="[TAG=]GLOB",
                        help="training text (one sentence a line, plain or .gz; a glob "
                             "takes many files; - reads standard input, as lmplz does, "
                             "copied once to OUT/_stdin/train.txt); repeat for several "
                             "sources, TAG=GLOB naming each (pooled unless --tagged)")
    parser.add_argument("--heldout", required=True, help="held-out text (trains theta)")
    parser.add_argument("--test", required=True, help="test text (evaluation only)")
    parser.add_argument("--out", required=True, help="run directory")
    vocab_group = parser.add_mutually_exclusive_group()
    vocab_group.add_argument("--vocab", metavar="FILE|DIR",
                             help="vocabulary: a file, one word a line, or a vocab directory")
    vocab_group.add_argument("--min_count", type=int, default=vocab_stage.DEFAULT_MIN_COUNT,
                             help="build the vocabulary: words seen this often (default "
                                  "%(default)s)")
    vocab_group.add_argument("--add_to", metavar="DIR",
                             help="a finished count directory (a previous run's count/): "
                                  "count only the --train files and train on their sum with "
                                  "it (its configuration, vocabulary, tags and buckets)")
    parser.add_argument("--tagged", action="store_true",
                        help="keep the sources' tags in the features (corpus-tagged SNM); "
                             "without it the sources are pooled")
    parser.add_argument("--num_buckets", type=int,
                        help="the count's key-range buckets "
                             f"(default: one per {BUCKET_OCCURRENCES:,} feature occurrences of "
                             "the text, more if the memory budget needs them, at least "
                             f"{DEFAULT_NUM_BUCKETS})")
    arguments.threshold_arguments(parser)
    arguments.text_arguments(parser)
    arguments.memory_argument(parser)
    parser.add_argument("--force", action="store_true", help="redo every stage (and write "
                        "into an --out that holds a stage's output, not a run's)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print each stage's totals (and Beam metrics), the fit's "
                             "candidates and epochs and the test reports (default: a line a "
                             "stage; stages.json and the manifests keep them either way)")
    parser.add_argument("--prune_to", metavar="LINKS|SIZE",
                        help="also prune the model (snm prune, its default criterion) into "
                             "pruned/, which eval then evaluates: to this many links, or to "
                             "a size of its scoring directory such as 200M or 2G; a model "
                             "that is not an n-gram model is fitted on counts selected for "
                             "that size (snm select) instead, into model/")
    parser.add_argument("--prune_criterion", choices=("backoff", "reestimate"),
                        help="with --prune_to, an n-gram configuration: backoff (the "
                             "default: relative entropy, partitioned, seconds) or "
                             "reestimate (estimated again from the counts and pruned as "
                             "pocolm prunes, its discounts chosen on --heldout's join: "
                             "better at small sizes, minutes, in one process; snm prune "
                             "--criterion)")
    arguments.layout_argument(parser)
    add_fit_args(parser)
    family = parser.add_argument_group("log-linear family (--family loglinear)")
    family.add_argument("--family", choices=("snm", "loglinear"), default="snm",
                        help="snm (default) or loglinear: a log-linear n-gram model with a "
                             "tree-structured penalty on the same counts")
    family.add_argument("--penalty", default="t2", choices=loglinear_family.PENALTIES,
                        help="the penalty (default %(default)s); w* weight depth d by alpha^d")
    family.add_argument("--lam", type=_floats, default=None, metavar="L[,L..]",
                        help="penalty strength(s) lambda; each is fitted and the best on "
                             "--heldout kept (default: with --optimizer auto "
                             f"{', '.join(f'{s:g}' for s in loglinear_family.LAM_SCALES)}, "
                             "otherwise "
                             "0.1, 0.3 and 1, over the number of training words and "
                             "sentence ends)")
    family.add_argument("--alpha", type=_floats, default=None, metavar="A[,A..]",
                        help="depth weight(s) of wl2 wl1 wt2 wtinf (depth d weighted "
                             "alpha^d; default with --optimizer auto: "
                             + ", ".join(f"{p} {','.join(f'{v:g}' for v in a)}"
                                         for p, a in loglinear_family.ALPHAS.items())
                             + "; otherwise 1.4)")
    family.add_argument("--optimizer", choices=("auto", "adagrad", "fista", "pgd", "lbfgs",
                                                "apg"),
                        default="auto",
                        help="auto (default): start at the interpolated modified "
                             "Kneser-Ney model of the counts (exactly), then accelerated "
                             "proximal gradient along a "
                             "warm-started lambda path, strongest first, for at most "
                             f"{loglinear_family.ITERATIONS} iterations a lambda, keeping the best "
                             "held-out iterate and stopping when held-out perplexity turns "
                             "up or --time_budget is spent.  Or a stochastic proximal "
                             "gradient variant (adagrad, fista, pgd; early stopping on "
                             "--heldout), or to the penalised optimum, full batch: lbfgs "
                             "(L-BFGS-B, for l2 l1 wl2 wl1; an epoch is 10 iterations) or "
                             "apg (accelerated proximal gradient, any penalty, until its "
                             "certificate is below --tol; an epoch is 50 iterations)")
    family.add_argument("--time_budget", type=float, default=loglinear_family.DEFAULT_SECONDS,
                        metavar="SECONDS",
                        help="--optimizer auto: seconds for choosing lambda and alpha "
                             "(default %(default)g; counting, loading the counts and eval "
                             "come on top); the best "
                             "weights seen when it is spent are kept")
    family.add_argument("--tol", type=float, default=LogLinearOptions.tol,
                        help="apg: stop when no pair's proximal-gradient residual exceeds this "
                             "fraction of one training occurrence (default %(default)s)")
    family.add_argument("--batches_per_epoch", type=int,
                        default=LogLinearOptions.batches_per_epoch,
                        help="adagrad, fista, pgd: mini-batches an epoch is cut into (default "
                             "%(default)s)")
    family.add_argument("--step", type=float, default=LogLinearOptions.step,
                        help="the optimizer's base step size: pgd and apg its first step, "
                             "then backtracking; adagrad divided per weight by the root of "
                             "its summed squared gradients; fista 1/L (default %(default)s)")
    return parser


def main(argv=None):
    flags, beam_args = arguments.parse(build_parser(), argv, beam=True)
    args = argparse.Namespace(**flags)
    # resuming its own run is what snm train does: a stage's output there is refused
    manifests.check_output(storage.absolute(args.out), "snm train", args.force)
    with run_lock(storage.absolute(args.out), "snm train"):
        plan = _plan(args, beam_args)
        chain.Runner(plan, args.force).run()
    return 0


def _floats(text):
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")
    return values


def _loglinear_options(args):
    epochs = args.epochs if isinstance(args.epochs, int) else LogLinearOptions.epochs
    return LogLinearOptions(penalty=args.penalty, lams=args.lam, alphas=args.alpha,
                            optimizer=args.optimizer, epochs=epochs,
                            batches_per_epoch=args.batches_per_epoch, step=args.step,
                            patience=args.patience, seed=args.seed, tol=args.tol,
                            seconds=args.time_budget)


def _plan(args, beam_args):
    """The run's :class:`snm.chain.Plan`, every option checked before any stage runs."""
    config = load_config(args.config)
    loglinear = args.family == "loglinear"
    if loglinear:
        if config.ngram_order is None:
            raise SnmInputError("--family loglinear takes n-gram configurations (5gram, or a "
                                "file with one ngram_extractor); skip-grams are SNM only")
        if args.tagged or args.prune_to or args.layout != "hashed":
            raise SnmInputError("--family loglinear trains on pooled sources, unpruned, "
                                "stored its own way: drop --tagged, --prune_to and --layout")
        loglinear_family.numba_compiler()  # an optional dependency: said before any stage
    fit_options = _loglinear_options(args) if loglinear else options_from(vars(args))
    check_encoding(args.encoding)
    sources = training_sources.parse_sources(args.train, pooled=not args.tagged)
    if args.tagged and training_sources.source_tags(sources) == [""]:
        raise SnmInputError("--tagged needs tagged sources: --train TAG=GLOB")
    tags = training_sources.source_tags(sources)
    if args.layout not in HASHED_LAYOUTS:  # refused before any stage runs
        ngram_trie.ngram_span({"config": config.to_text(), "tags": tags}, args.config,
                              args.layout)
    thresholds.parse(args.min_feature_count or (), config.feature_types(),
                     continuation.parent_types(config))  # refused before any stage runs
    thresholds.parse(args.min_link_count or (), config.feature_types(),
                     continuation.parent_types(config), thresholds.LINK_OPTION)
    vocab = vocab_file(args.vocab) if args.vocab else None
    storage.check_file(args.heldout, "--heldout ")
    storage.check_file(args.test, "--test ")
    if args.prune_to is not None:
        if args.prune_to.strip().isdigit():
            args.prune_to = int(args.prune_to)
            if args.prune_to < 1:
                raise SnmInputError("--prune_to must be at least 1")
        elif parse_size(args.prune_to, "--prune_to") < 1:
            raise SnmInputError("--prune_to must be at least one byte")
    if args.prune_criterion and (args.prune_to is None or config.ngram_order is None):
        raise SnmInputError("--prune_criterion chooses how --prune_to prunes an n-gram "
                            "configuration: give --prune_to with an n-gram --config, or drop "
                            "--prune_criterion")
    if args.prune_criterion == "reestimate" and len(tags) > 1:
        raise SnmInputError("--prune_criterion reestimate needs a pooled model: drop --tagged, "
                            "or prune with backoff")
    out = storage.absolute(args.out)
    # --train -: read once, into the run directory, after every option is checked
    sources, stdin_digest = training_sources.spool_stdin(sources, out)
    files = training_sources.expand_sources(sources)
    training_sources.check_has_words(files, args.encoding)
    add_to = storage.absolute(args.add_to) if args.add_to else None
    plan = chain.Plan(
        out=out, family=args.family, beam_args=list(beam_args),
        train_specs=[f"{s.tag}={s.glob}" if s.tag else s.glob for s in sources],
        train_stamps=[_stamp(p, stdin_digest, out) for _, p in files],
        tags=[s.tag for s in sources],
        config_text=config.to_text(), config=args.config, heldout=args.heldout,
        test=args.test, vocab=vocab, add_to=add_to, min_count=args.min_count,
        min_feature_count=list(args.min_feature_count or []),
        min_link_count=list(args.min_link_count or []),
        num_buckets=args.num_buckets, memory=args.memory, layout=args.layout,
        prune_to=args.prune_to, prune_criterion=args.prune_criterion,
        fit_options=fit_options, ngram=bool(config.ngram_order), encoding=args.encoding,
        skip_invalid=args.skip_invalid, verbose=args.verbose)
    if add_to:
        manifests.Count.read(add_to)  # a finished count, before anything is written
        if add_to == plan.path("count"):
            raise SnmInputError("--add_to must not be this run's own count/ (it is "
                                "rewritten); give the previous run's")
    storage.makedirs(out)
    return plan


def _stamp(path, stdin_digest, out):
    """A training file's part of the signatures: its stamp (path, size, time), or for the
    copy of standard input its content's digest, so that a run given the same text again
    on standard input resumes."""
    if stdin_digest and path == storage.join(out, *training_sources.STDIN_SPOOL):
        return ["-", storage.file_stamp(path)[1], stdin_digest]
    return storage.file_stamp(path)
