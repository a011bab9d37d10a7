"""Mini-batch AdaGrad over an :class:`snm_core.fit.problem.AdjustmentProblem` (paper, section 3.1).

AdaGrad (eq. 6-7), as ascent on the log-likelihood (the paper writes the
descent form): acc_k += g_k**2 (starting at Delta_0); theta_k += gamma g_k /
sqrt(acc_k).  A batch is one call into the compiled loops
(:meth:`AdjustmentProblem.step`); the events of epoch k are shuffled by a
generator seeded with (seed, k), so a resumed run equals a straight one.
"""

import dataclasses
import time

import numpy as np

from snm_core.io.checkpoints import checkpoint
from snm_core.io.errors import SnmInputError

GAMMA = 0.1
DELTA0 = 1.0
BATCH_SIZE = 2048


@dataclasses.dataclass
class TrainSettings:
    """AdaGrad settings (paper, section 4.1 defaults)."""

    epochs: int = 1
    batch_size: int = BATCH_SIZE
    gamma: float = GAMMA
    delta0: float = DELTA0
    renormalize: str = "batch"
    seed: int = 0

    def __post_init__(self):
        if self.renormalize not in ("batch", "epoch"):
            raise SnmInputError(f"renormalize must be 'batch' or 'epoch', got {self.renormalize!r}")
        for name, value, low in (("epochs", self.epochs, 0), ("batch_size", self.batch_size, 1)):
            if value < low:
                raise SnmInputError(f"{name} must be at least {low}, got {value}")
        for name, value in (("gamma", self.gamma), ("delta0", self.delta0)):
            if not value > 0:
                raise SnmInputError(f"{name} must be positive, got {value}")


def perplexity(loglik, n):
    return float(np.exp(-loglik / n)) if n else float("nan")


@dataclasses.dataclass
class TrainState:
    """What a training run carries between epochs: theta, AdaGrad's sums, the epoch reached."""

    theta: np.ndarray
    acc: np.ndarray
    epoch: int = 0

    @classmethod
    def start(cls, problem, settings):
        # float32 halves the memory of the long vectors; updates are computed in float64.
        return cls(np.zeros(problem.num_params, np.float32),
                   np.full(problem.num_params, settings.delta0, np.float32))

    def copy(self):
        return TrainState(self.theta.copy(), self.acc.copy(), self.epoch)


def evaluate(problem, theta, train_events, valid_events, train=True):
    """``{train_loss, train_perplexity, valid_...}`` at ``theta``.

    With ``train=False`` only the validation figures (a selection run reads
    nothing else): M_f* of the rows the validation events touch, not all.
    """
    entry = {}
    if train:
        m_star = problem.m_star(theta)
        loglik = problem.log_likelihood(theta, train_events, m_star)
        entry = {"train_events": int(len(train_events)),
                 "train_loss": -loglik / max(len(train_events), 1),
                 "train_perplexity": perplexity(loglik, len(train_events))}
    else:
        m_star = problem.m_star(theta, valid_events)
    if valid_events is not None and len(valid_events):
        valid = problem.log_likelihood(theta, valid_events, m_star)
        entry.update(valid_events=int(len(valid_events)),
                     valid_loss=-valid / len(valid_events),
                     valid_perplexity=perplexity(valid, len(valid_events)))
    return entry


def run_epochs(problem, settings, state, epochs, train_events, valid_events=None, log=None,
               progress=None, stop=None, history=None, train_metrics=True,
               evaluate_start=True):
    """Train ``state`` for up to ``epochs`` more epochs (in place); returns the history.

    ``train_metrics=False`` logs the validation figures only (see :func:`evaluate`);
    ``evaluate_start=False`` leaves out epoch 0 (the figures before training).

    The events of epoch k are shuffled by a generator seeded with (seed, k), so
    a run continued from a saved state is the same as one run straight through.
    """
    history = [] if history is None else history

    def record(seconds):
        entry = {"epoch": state.epoch, "seconds": round(seconds, 3),
                 **evaluate(problem, state.theta, train_events, valid_events, train_metrics),
                 "nonzero_params": int(np.count_nonzero(state.theta))}
        history.append(entry)
        if log:
            log(entry)

    if not history and evaluate_start:
        record(0.0)
    grad = np.zeros(problem.num_params)
    for _ in range(epochs):
        start = time.perf_counter()
        state.epoch += 1
        order = np.random.default_rng([settings.seed, state.epoch]).permutation(train_events)
        stale = problem.m_star(state.theta) if settings.renormalize == "epoch" else None
        for b in range(0, len(order), settings.batch_size):
            problem.step(state.theta, state.acc, grad, order[b:b + settings.batch_size],
                         settings.gamma, stale)
            checkpoint("fit.batch")  # fault tests stop the fit here, mid-epoch
            if progress:
                progress(state.epoch, min(b + settings.batch_size, len(order)), len(order))
        record(time.perf_counter() - start)
        if stop is not None and stop(history):
            break
    return history


def train(problem, settings, train_events=None, valid_events=None, log=None, progress=None,
          stop=None):
    """Mini-batch AdaGrad on ``train_events``; returns compact theta and the per-epoch log.

    Parameters
    ----------
    problem : AdjustmentProblem
    settings : TrainSettings
    train_events, valid_events : int arrays (default: all events, none)
    log : callable(dict), called once per epoch (and for epoch 0, before training)
    progress : callable(epoch, done_events, total_events), called after each batch
    stop : callable(history) -> bool, asked after each epoch whether to stop early

    Returns
    -------
    theta : float32 (num_params,)
    history : list of dicts, one per epoch (0 = untrained): loss, perplexities, seconds
    """
    train_events = np.arange(problem.num_events) if train_events is None else train_events
    state = TrainState.start(problem, settings)
    history = run_epochs(problem, settings, state, settings.epochs, train_events, valid_events,
                         log, progress, stop)
    return state.theta, history
