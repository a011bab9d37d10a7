"""What the rest of ``snm`` needs of the log-linear family without loading its loops
(numba's, whose start costs a process time and memory): the penalties' names, the
options of ``snm train --family loglinear`` and their defaults, whether a directory
holds a log-linear model, and numba itself, an optional dependency (the extra
``loglinear``) that only this family's loops use.
"""

import dataclasses

from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests

KIND = manifests.LogLinear.KIND
#: The penalty names, as the command line takes them.
PENALTIES = ("l2", "l1", "t2", "tinf", "wl2", "wl1", "wt2", "wtinf")
#: The default time budget of :func:`snm_core.loglinear.path.choose`, seconds (fitting only: not loading).
DEFAULT_SECONDS = 600.0
#: λ·P of the default λ path, strongest first.
LAM_SCALES = (0.8, 0.4, 0.2, 0.1)
#: α grids of the default path (the structured-penalty paper's best for wt2 and wtinf
#: first); the unweighted penalties take α = 1.
ALPHAS = {"wt2": (1.1, 1.4), "wtinf": (0.85, 1.1), "wl2": (1.4, 2.0), "wl1": (1.4, 2.0)}
#: APG iterations a λ at most (the λ path's).
ITERATIONS = 60


def numba_compiler():
    """The ``numba`` module, which compiles the family's loops; when it is not installed,
    a one-line error that says how to install it."""
    try:
        import numba
    except ImportError:
        raise SnmInputError("the log-linear family's loops need numba, which is not "
                            "installed: pip install 'snm-lm[loglinear]'") from None
    return numba


def is_loglinear(directory):
    """Whether ``directory`` holds a log-linear model (its manifest's kind; anything else,
    the SNM reader then reports what is wrong with it)."""
    return manifests.kind_of(directory) == KIND


@dataclasses.dataclass
class LogLinearOptions:
    """How ``snm train --family loglinear`` fits.

    ``optimizer`` "auto" (the default): :func:`snm_core.loglinear.path.choose`,
    a warm-started λ path by APG from the interpolated modified Kneser-Ney model,
    λ (``lams``, default :data:`LAM_SCALES` over P) and
    α (``alphas``, default :data:`ALPHAS`) chosen on
    held-out data within ``seconds``.  Any other optimizer:
    :func:`snm_core.loglinear.optimizers.fit` for every pair of the grids
    ``lams`` and ``alphas`` (:func:`select`), the one with the lowest held-out
    loss kept; ``lams`` None: :data:`snm_core.loglinear.directory.LAM_SCALES` over the number of training
    positions P (λ multiplies the *mean* loss, so its best value falls like
    1/P), ``alphas`` None: 1.4 (1 for the unweighted penalties).
    """

    penalty: str = "t2"
    lams: tuple = None
    alphas: tuple = None
    optimizer: str = "auto"
    epochs: int = 30
    batches_per_epoch: int = 25
    step: float = 1.0
    patience: int = 2
    seed: int = 0
    tol: float = 1e-2
    seconds: float = DEFAULT_SECONDS

    def __post_init__(self):
        if self.penalty not in PENALTIES:
            raise SnmInputError(f"unknown penalty {self.penalty!r}; choose one of "
                                f"{' '.join(PENALTIES)}")
        if self.alphas is None:
            self.alphas = ALPHAS.get(self.penalty, (1.0,)) if self.optimizer == "auto" \
                else ((1.4,) if self.penalty.startswith("w") else (1.0,))
        self.alphas = tuple(self.alphas)
        if not self.penalty.startswith("w") and self.alphas != (1.0,):
            raise SnmInputError(f"--alpha weights the depths of wl2 wl1 wt2 wtinf; penalty "
                                f"{self.penalty} takes none")
        if any(lam < 0 for lam in self.lams or ()) or any(a < 0 for a in self.alphas):
            raise SnmInputError("--lam and --alpha must be >= 0")
        if self.optimizer == "lbfgs" and self.penalty.lstrip("w") not in ("l2", "l1"):
            raise SnmInputError(f"--optimizer lbfgs takes the penalties that are smooth on "
                                f"W >= 0 (l2 l1 wl2 wl1); for {self.penalty} use apg (its optimum) "
                                f"or adagrad")
        if self.epochs < 1 or self.batches_per_epoch < 1 or self.step <= 0:
            raise SnmInputError("--epochs and --batches_per_epoch must be >= 1, --step > 0")
        if not self.tol > 0:
            raise SnmInputError("--tol (the apg optimality certificate) must be > 0")
        if not self.seconds > 0:
            raise SnmInputError("--time_budget must be > 0 seconds")
