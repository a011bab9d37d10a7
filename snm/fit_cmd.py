"""``snm fit``: learn the adjustment model's weights on small M (one worker, no Beam)."""

import argparse
import sys
import time

from snm_core import metafeatures, trainer
from snm_core.fit import AUTO, DEFAULT_MAX_EPOCHS, FitOptions, fit_directory


def _epochs(text):
    if text == AUTO:
        return AUTO
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("epochs must be >= 0 or 'auto'")
    return value


def _mebibytes(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("cache_mib must be >= 0")
    return value


def add_fit_args(parser):
    """The fit options, shared with ``snm train``."""
    parser.add_argument("--metafeatures", default=AUTO,
                        choices=(AUTO,) + metafeatures.VARIANTS,
                        help="meta-feature variant; 'auto' (default) picks the best on a "
                             "held-back tenth of the held-out set")
    parser.add_argument("--epochs", type=_epochs, default=AUTO,
                        help="AdaGrad epochs, or 'auto' (default): chosen on the held-back "
                             f"tenth, at most --max_epochs ({DEFAULT_MAX_EPOCHS})")
    parser.add_argument("--max_epochs", type=int, default=DEFAULT_MAX_EPOCHS)
    parser.add_argument("--hash_size", type=int, default=metafeatures.DEFAULT_HASH_SIZE,
                        help="size of the hashed weight table (default %(default)s)")
    parser.add_argument("--no_diversity", action="store_true",
                        help="leave out the diversity-count meta-features")
    parser.add_argument("--no_continuation", action="store_true",
                        help="leave out the continuation-count meta-features (N1+(. f w)) "
                             "of the unlexicalized variant")
    parser.add_argument("--batch_size", type=int, default=trainer.BATCH_SIZE)
    parser.add_argument("--gamma", type=float, default=trainer.GAMMA)
    parser.add_argument("--delta0", type=float, default=trainer.DELTA0)
    parser.add_argument("--renormalize", choices=("batch", "epoch"), default="batch",
                        help="exact M_f* per mini-batch (default) or once per epoch (paper)")
    parser.add_argument("--seed", type=int, default=0, help="shuffles the events each epoch")
    parser.add_argument("--cache_mib", type=_mebibytes,
                        default=trainer.ENTRY_CACHE_BYTES >> 20,
                        help="memory for precomputed meta-feature entries (default "
                             "%(default)s); more makes lexicalized epochs of a large small M "
                             "faster and changes no result")


def options_from(args):
    return FitOptions(metafeatures=args.metafeatures, epochs=args.epochs,
                      max_epochs=args.max_epochs, hash_size=args.hash_size,
                      diversity=not args.no_diversity,
                      continuation=not args.no_continuation, batch_size=args.batch_size,
                      gamma=args.gamma, delta0=args.delta0, renormalize=args.renormalize,
                      seed=args.seed, cache_bytes=args.cache_mib << 20)


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
    manifest = fit_directory(args.small_m, args.out, options_from(args), progress=Progress())
    print(f"== snm fit: {manifest['metafeatures']['variant']}, "
          f"{manifest['training']['epochs']} epoch(s): held-out perplexity "
          f"{manifest['heldout_perplexity_unadjusted']:.3f} unadjusted -> "
          f"{manifest['heldout_perplexity']:.3f} adjusted; theta -> {args.out}/theta.npy ==")
    return 0
