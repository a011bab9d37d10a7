"""``snm fit``: learn the adjustment model's weights on small M (one worker, no Beam)."""

import argparse
import sys
import time

from snm_core.fit import metafeatures, trainer
from snm_core.fit.problem import VALIDATION_SHARE
from snm_core.fit.selection import (
    AUTO,
    DEFAULT_MAX_EPOCHS,
    PATIENCE,
    RACE_EPOCHS,
    RACE_MARGIN,
    SELECTIONS,
    FitOptions,
    fit_directory,
)
from snm_core.io.runlock import run_lock


def _epochs(text):
    if text == AUTO:
        return AUTO
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("epochs must be >= 0 or 'auto'")
    return value


def _variants(text):
    variants = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in variants if v not in metafeatures.VARIANTS]
    if unknown or not variants:
        raise argparse.ArgumentTypeError(
            f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from "
            f"{', '.join(metafeatures.VARIANTS)}, comma-separated")
    return variants


def _fraction(text):
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1 (exclusive)")
    return value


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


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
    group.add_argument("--max_epochs", type=_positive, default=DEFAULT_MAX_EPOCHS)
    group.add_argument("--validation_fraction", type=_fraction,
                       default=VALIDATION_SHARE,
                       help="share of the held-out sentences held back to choose the variant "
                            "and the epochs (default %(default)s)")
    group.add_argument("--patience", type=_positive, default=PATIENCE,
                       help="epochs without a better validation perplexity before a candidate "
                            "stops (default %(default)s)")
    group.add_argument("--selection", choices=SELECTIONS, default="race",
                       help="race (default): one epoch each, those more than --race_margin "
                            f"behind stop, after {RACE_EPOCHS} epochs only the leader goes on; "
                            "each: every candidate trains until it stops improving")
    group.add_argument("--race_margin", type=float, default=RACE_MARGIN,
                       help="relative validation perplexity behind the leader at which a "
                            "candidate stops racing (default %(default)s)")
    group.add_argument("--hash_size", type=int, default=metafeatures.DEFAULT_HASH_SIZE,
                       help="size of the hashed weight table (default %(default)s)")
    group.add_argument("--no_diversity", action="store_true",
                       help="leave out the diversity-count meta-features")
    group.add_argument("--no_continuation", action="store_true",
                       help="leave out the continuation-count meta-features (N1+(. f w)) "
                            "of the unlexicalized variant")
    group.add_argument("--batch_size", type=_positive, default=trainer.BATCH_SIZE)
    group.add_argument("--gamma", type=float, default=trainer.GAMMA)
    group.add_argument("--delta0", type=float, default=trainer.DELTA0)
    group.add_argument("--renormalize", choices=("batch", "epoch"), default="batch",
                       help="exact M_f* per mini-batch (default) or once per epoch (paper)")
    group.add_argument("--seed", type=int, default=0, help="shuffles the events each epoch")
    group.add_argument("--threads", type=int, default=0,
                       help="threads of the fit (default: one per core); theta does not "
                            "depend on it")


def options_from(args):
    variants = args.variants
    if args.metafeatures:
        variants = metafeatures.VARIANTS if args.metafeatures == AUTO else (args.metafeatures,)
    return FitOptions(variants=variants, epochs=args.epochs, max_epochs=args.max_epochs,
                      validation_fraction=args.validation_fraction, patience=args.patience,
                      selection=args.selection, race_margin=args.race_margin,
                      hash_size=args.hash_size, diversity=not args.no_diversity,
                      continuation=not args.no_continuation, batch_size=args.batch_size,
                      gamma=args.gamma, delta0=args.delta0, renormalize=args.renormalize,
                      seed=args.seed, threads=args.threads)


class Progress:
    """A progress line for long epochs, at most every 2 s (stderr)."""

    def __init__(self):
        self.epoch, self.last = None, 0.0

    def __call__(self, epoch, done, total):
        now = time.monotonic()
        if epoch != self.epoch:
            self.epoch, self.last = epoch, now
        elif now - self.last >= 2 and done < total:
            self.last = now
            print(f"  epoch {epoch}: {done:,}/{total:,} events ({100 * done / total:.0f}%)",
                  file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="snm fit", description=__doc__)
    parser.add_argument("--small_m", required=True, help="snm join output directory")
    parser.add_argument("--out", required=True, help="output directory (theta.npy, ...)")
    add_fit_args(parser)
    args = parser.parse_args(argv)
    with run_lock(args.out, "snm fit"):
        manifest = fit_directory(args.small_m, args.out, options_from(args),
                                 progress=Progress())
    print(f"== snm fit: {manifest['metafeatures']['variant']}, "
          f"{manifest['training']['epochs']} epoch(s): held-out perplexity "
          f"{manifest['heldout_perplexity_unadjusted']:.3f} unadjusted -> "
          f"{manifest['heldout_perplexity']:.3f} adjusted; theta -> {args.out}/theta.npy ==")
    return 0
