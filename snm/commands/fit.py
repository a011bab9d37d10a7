"""``snm fit``: learn the adjustment model's weights on small M (one worker, no Beam).

The flags are parsed here and checked by :class:`snm_core.fit.selection.FitOptions`.
"""

from snm.commands import arguments
from snm.evaluation import FitProgress
from snm_core.fit import metafeatures, trainer
from snm_core.fit.problem import VALIDATION_SHARE
from snm_core.fit.selection import (
    AUTO,
    DEFAULT_MAX_EPOCHS,
    PATIENCE,
    PROBE_MARGIN,
    RACE_EPOCHS,
    RACE_MARGIN,
    RACE_PROBE,
    SELECTIONS,
    FitOptions,
    fit_directory,
)
from snm_core.io.runlock import run_lock
from snm_core.stages import manifests


def _epochs(text):
    """A number of epochs or ``auto``."""
    return AUTO if text == AUTO else int(text)


def _variants(text):
    """Comma-separated variants."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_fit_args(parser):
    """The fit options, shared with ``snm train``."""
    group = parser.add_argument_group("fit (meta-features, AdaGrad, choosing variant and epochs)")
    chosen = group.add_mutually_exclusive_group()
    chosen.add_argument("--variants", type=_variants, default=metafeatures.VARIANTS,
                        help="candidate meta-feature variants, comma-separated (default: all "
                             "three); the one with the lowest validation perplexity wins")
    chosen.add_argument("--metafeatures", choices=(AUTO,) + metafeatures.VARIANTS,
                        help="one variant (the same as --variants VARIANT), or 'auto' (all)")
    group.add_argument("--epochs", type=_epochs, default=AUTO,
                       help="AdaGrad epochs, or 'auto' (default): chosen on the validation "
                            f"share, at most --max_epochs ({DEFAULT_MAX_EPOCHS})")
    group.add_argument("--max_epochs", type=int, default=DEFAULT_MAX_EPOCHS,
                       help="most epochs --epochs auto trains a candidate (default "
                            "%(default)s)")
    group.add_argument("--validation_fraction", type=float,
                       default=VALIDATION_SHARE,
                       help="share of the held-out sentences held back to choose the variant "
                            "and the epochs (default %(default)s)")
    group.add_argument("--patience", type=int, default=PATIENCE,
                       help="epochs without a better validation perplexity before a candidate "
                            "stops (default %(default)s)")
    group.add_argument("--selection", choices=SELECTIONS, default="race",
                       help="race (default): a probe on --race_probe of an epoch, then one "
                            "epoch each, those more than --race_margin behind stop, after "
                            f"{RACE_EPOCHS} epochs only the leader goes on; each: every "
                            "candidate trains until it stops improving")
    group.add_argument("--race_margin", type=float, default=RACE_MARGIN,
                       help="relative validation perplexity behind the leader at which a "
                            "candidate stops racing (default %(default)s)")
    group.add_argument("--race_probe", type=float, default=RACE_PROBE,
                       help="share of an epoch every candidate trains on first; those more "
                            f"than {PROBE_MARGIN * 100:g}%% behind the best then stop (0: no probe; "
                            "default %(default)s)")
    group.add_argument("--hash_size", type=int, default=metafeatures.DEFAULT_HASH_SIZE,
                       help="size of the hashed weight table (default %(default)s)")
    group.add_argument("--no_diversity", action="store_true",
                       help="leave out the diversity-count meta-features")
    group.add_argument("--no_continuation", action="store_true",
                       help="leave out the continuation-count meta-features (N1+(. f w)) "
                            "of the unlexicalized variant")
    group.add_argument("--batch_size", type=int, default=trainer.BATCH_SIZE,
                       help="held-out events in an AdaGrad mini-batch (default %(default)s)")
    group.add_argument("--gamma", type=float, default=trainer.GAMMA,
                       help="AdaGrad's learning rate: theta_k += gamma g_k / sqrt(acc_k) "
                            "(default %(default)s)")
    group.add_argument("--delta0", type=float, default=trainer.DELTA0,
                       help="AdaGrad's initial accumulator acc_k, which the squared "
                            "gradients add to (default %(default)s)")
    group.add_argument("--renormalize", choices=("batch", "epoch"), default="batch",
                       help="exact M_f* per mini-batch (default) or once per epoch (paper)")
    group.add_argument("--seed", type=int, default=0, help="shuffles the events each epoch "
                       "(default %(default)s)")
    group.add_argument("--threads", type=int, default=0,
                       help="threads of the fit (default: one per core); theta does not "
                            "depend on it")


def options_from(flags):
    """The :class:`FitOptions` of the parsed flags of :func:`add_fit_args` (a dict)."""
    variants = flags["variants"]
    if flags["metafeatures"]:
        variants = (metafeatures.VARIANTS if flags["metafeatures"] == AUTO
                    else (flags["metafeatures"],))
    return FitOptions(variants=variants, epochs=flags["epochs"], max_epochs=flags["max_epochs"],
                      validation_fraction=flags["validation_fraction"],
                      patience=flags["patience"], selection=flags["selection"],
                      race_margin=flags["race_margin"],
                      race_probe=flags["race_probe"], hash_size=flags["hash_size"],
                      diversity=not flags["no_diversity"],
                      continuation=not flags["no_continuation"], batch_size=flags["batch_size"],
                      gamma=flags["gamma"], delta0=flags["delta0"],
                      renormalize=flags["renormalize"], seed=flags["seed"],
                      threads=flags["threads"], memory=flags.get("memory"))


def build_parser():
    """The parser of ``snm fit``."""
    parser = arguments.parser("fit", __doc__)
    arguments.stage_input(parser, "join", renamed_from="small_m")
    parser.add_argument("--out", required=True, help="output directory (a fit/ directory: "
                                                     "theta.npy, train_log.jsonl)")
    add_fit_args(parser)
    arguments.memory_argument(parser)
    arguments.force_argument(parser)
    return parser


def main(argv=None):
    flags, _ = arguments.parse(build_parser(), argv)
    manifests.check_output(flags["out"], "snm fit", flags["force"])
    with run_lock(flags["out"], "snm fit"):
        manifest = fit_directory(flags["join"], flags["out"], options_from(flags),
                                 progress=FitProgress())
    print(f"== snm fit: {manifest.metafeatures['variant']}, "
          f"{manifest.training['epochs']} epoch(s): held-out perplexity "
          f"{manifest.heldout_perplexity_unadjusted:.3f} unadjusted -> "
          f"{manifest.heldout_perplexity:.3f} adjusted; theta -> {flags['out']}/theta.npy ==")
    return 0
