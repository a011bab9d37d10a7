"""The fit stage (``snm fit``): small M + held-out events -> theta.

Reads a ``snm join`` directory.  Writes to the output directory:

* ``theta.npy``: float32 (hash_size,), the hashed meta-feature weights;
* ``train_log.jsonl``: one JSON object per epoch and run (loss, held-out
  perplexity, seconds), including the selection runs;
* ``manifest.json`` (last): meta-feature settings, training settings, the
  chosen variant and epochs and why, final held-out perplexity.

Choosing the variant and the epochs without test text (as scikit-learn's
early stopping does): a share of the held-out sentences
(``validation_fraction``, a fixed hash of each sentence's position) is held
back, and the candidates train on the rest.

* ``selection="race"`` (default): first a probe, every candidate trained on
  ``race_probe`` of the training share, those more than :data:`PROBE_MARGIN`
  behind the best stop (successive halving's first rung: a variant that loses
  by a wide margin is not trained a whole epoch); then the survivors, from
  scratch, train one epoch each; those
  more than ``race_margin`` behind the best validation perplexity stop; after
  ``race_epochs`` epochs only the leader goes on, until validation perplexity
  has not improved for ``patience`` epochs (or ``max_epochs``).  The cost is
  about one epoch of each variant plus the leader's run, where training every
  candidate to its own best costs each one's run.
* ``selection="each"``: every candidate trains until it stops improving.

The (variant, epochs) with the lowest validation perplexity wins and is
retrained from scratch on all the held-out data.  This is how the paper's
observation plays out here: lexicalized meta-features over-train after an
epoch or two, unlexicalized ones keep improving for several.
"""

import dataclasses
import json
import time

import numpy as np

from snm_core.fit import kernels, trainer
from snm_core.fit import metafeatures as mf
from snm_core.fit.heldout import load_join
from snm_core.fit.problem import VALIDATION_SHARE
from snm_core.io import memory, storage, tables
from snm_core.io.memory import MemoryBudget
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests, validation

AUTO = "auto"
#: Epochs without improvement of validation perplexity before a candidate stops.
PATIENCE = 2
DEFAULT_MAX_EPOCHS = 10
#: After the first epoch, candidates this far (relative) behind the best stop.
RACE_MARGIN = 0.01
#: Epochs after which only the leading candidate trains on.
RACE_EPOCHS = 2
#: The share of the training events the race's probe trains on (0: no probe).
RACE_PROBE = 0.125
#: After the probe, candidates this far behind the best stop: wider than
#: RACE_MARGIN because a small share favours the variant with fewer weights
#: (benchmarks/README.md, "The race's probe").
PROBE_MARGIN = 0.02
SELECTIONS = ("race", "each")
#: The order candidates train in.  One compiled problem is held at a time, so a round
#: starts with the candidate whose problem is loaded (the previous round's last), then
#: the others in this order; the probe ends with unlexicalized, the usual winner on
#: matched data, whose problem then serves the first round.
TRAINING_ORDER = ("lexicalized", "feature-only", "unlexicalized")


@dataclasses.dataclass
class FitOptions:
    """What ``snm fit`` takes; see :func:`fit_directory`.

    ``variants``: the candidate meta-feature variants (one: no choice);
    ``epochs``: an int or "auto" (chosen on the validation share, at most
    ``max_epochs``).  ``threads`` changes speed only, never theta.
    """

    variants: tuple = mf.VARIANTS
    epochs: object = AUTO
    max_epochs: int = DEFAULT_MAX_EPOCHS
    validation_fraction: float = VALIDATION_SHARE
    patience: int = PATIENCE
    selection: str = "race"
    race_margin: float = RACE_MARGIN
    race_probe: float = RACE_PROBE
    hash_size: int = mf.DEFAULT_HASH_SIZE
    diversity: bool = True
    continuation: bool = True
    batch_size: int = trainer.BATCH_SIZE
    gamma: float = trainer.GAMMA
    delta0: float = trainer.DELTA0
    renormalize: str = "batch"
    seed: int = 0
    threads: int = 0  # 0: one per core
    memory: MemoryBudget = None  # --memory (a text is parsed); None: the default

    def __post_init__(self):
        self.variants = tuple(self.variants)
        unknown = [v for v in self.variants if v not in mf.VARIANTS]
        if unknown or not self.variants:
            raise SnmInputError(f"unknown meta-feature variant(s) {', '.join(unknown) or '(none)'}"
                                f"; choose from {', '.join(mf.VARIANTS)}, comma-separated")
        if self.selection not in SELECTIONS:
            raise SnmInputError(f"selection must be one of {', '.join(SELECTIONS)}, "
                                f"got {self.selection!r}")
        if self.epochs != AUTO and not (isinstance(self.epochs, int) and self.epochs >= 0):
            raise SnmInputError(f"epochs must be a number >= 0 or 'auto', got {self.epochs!r}")
        if not 0 < self.validation_fraction < 1:
            raise SnmInputError("validation_fraction must be between 0 and 1 (exclusive), got "
                                f"{self.validation_fraction}")
        if self.patience < 1 or self.max_epochs < 1:
            raise SnmInputError("patience and max_epochs must be at least 1")
        if not 0 <= self.threads <= kernels.MAX_THREADS:
            raise SnmInputError(f"threads must be between 0 (one per core) and "
                                f"{kernels.MAX_THREADS}, got {self.threads}")
        if self.race_margin < 0:
            raise SnmInputError(f"race_margin must be >= 0, got {self.race_margin}")
        if not 0 <= self.race_probe < 1:
            raise SnmInputError(f"race_probe must be at least 0 (no probe) and below 1, got "
                                f"{self.race_probe}")
        self.settings(0)  # batch_size, gamma, delta0, renormalize: checked there
        self.memory = MemoryBudget.of(self.memory)

    @property
    def choosing(self):
        return len(self.variants) > 1 or self.epochs == AUTO

    def candidates(self):
        """The candidates' specs, in training order (:data:`TRAINING_ORDER`)."""
        # Continuation counts go with unlexicalized meta-features: feature-only
        # ones have no link meta-features, and lexicalized ones would carry
        # ~40 more entries a link to refine weights that are already per link.
        variants = sorted(self.variants, key=TRAINING_ORDER.index)
        return [mf.MetaFeatureSpec(v, self.hash_size, self.diversity,
                                   self.continuation and v == "unlexicalized")
                for v in variants]

    def settings(self, epochs):
        return trainer.TrainSettings(epochs=epochs, batch_size=self.batch_size, gamma=self.gamma,
                                     delta0=self.delta0, renormalize=self.renormalize,
                                     seed=self.seed)

    def signature(self):
        """The options that change theta (not ``threads`` nor ``memory``)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("threads", "memory")}


@dataclasses.dataclass
class Candidate:
    """One variant in the selection: its training state and validation history."""

    spec: mf.MetaFeatureSpec
    state: trainer.TrainState = None
    history: list = dataclasses.field(default_factory=list)
    stopped: str = None  # why it stopped, once it has
    probe_perplexity: float = None  # validation perplexity after the race's probe

    @property
    def best(self):
        """The epoch of lowest validation perplexity (None if stopped by the probe)."""
        return min(self.history, key=lambda h: h["valid_perplexity"], default=None)

    def stalled(self, patience):
        return len(self.history) - 1 - self.best["epoch"] >= patience


class Selection:
    """Trains candidates on the training share, one epoch at a time, one problem in memory."""

    def __init__(self, problem_for, options, cap, say, log_entries):
        self.problem_for = problem_for
        self.options = options
        self.cap = cap
        self.say = say
        self.log_entries = log_entries
        self.split = None
        self.loaded = None  # the spec of the problem problem_for holds

    def problem(self, candidate):
        """``candidate``'s compiled problem; the (train, validation) split on the first call."""
        problem = self.problem_for(candidate.spec)
        self.loaded = candidate.spec
        if self.split is None:
            train_events, valid_events = problem.split_events(self.options.validation_fraction)
            if not len(valid_events) or not len(train_events):
                raise SnmInputError(
                    "the held-out set is too small to hold a share back; give --epochs N and a "
                    "single --variants VARIANT, or raise --validation_fraction")
            self.split = train_events, valid_events
        return problem

    def logger(self, candidate, run):
        def log(entry):
            self.log_entries.append({"run": run, "metafeatures": candidate.spec.variant,
                                     **entry})
            trained = (f"epoch {entry['epoch']:>2}" if run == "select"
                       else f"{self.options.race_probe:.1%} of an epoch")
            self.say(f"  {run} {candidate.spec.variant:<14} {trained}: validation perplexity "
                     f"{entry['valid_perplexity']:.3f} ({entry['seconds']:.2f} s)")
        return log

    def probe(self, candidates):
        """Train each candidate one epoch on the probe's events; stop those more than
        :data:`PROBE_MARGIN` behind the best.  The survivors start the race from scratch,
        so their epochs are the ones a race without the probe trains."""
        for candidate in candidates:
            problem = self.problem(candidate)
            settings = self.options.settings(1)
            state = trainer.TrainState.start(problem, settings)
            events = probe_events(self.split[0], self.options.race_probe, self.options.seed)
            history = trainer.run_epochs(problem, settings, state, 1, events,
                                         self.split[1], log=self.logger(candidate, "probe"),
                                         train_metrics=False, evaluate_start=False)
            candidate.probe_perplexity = history[-1]["valid_perplexity"]
        best = min(candidates, key=lambda c: c.probe_perplexity)
        for candidate in candidates:
            behind = candidate.probe_perplexity / best.probe_perplexity - 1
            if behind > PROBE_MARGIN:
                candidate.stopped = (f"{behind:.1%} behind {best.spec.variant} after the probe "
                                     f"({self.options.race_probe:.1%} of an epoch)")

    def epoch(self, candidate):
        """Train ``candidate`` one more epoch (or record epoch 0 on its first call)."""
        problem = self.problem(candidate)
        log = self.logger(candidate, "select")
        settings = self.options.settings(self.cap)
        if candidate.state is None:
            candidate.state = trainer.TrainState.start(problem, settings)
            trainer.run_epochs(problem, settings, candidate.state, 0, *self.split, log=log,
                               history=candidate.history, train_metrics=False)
        trainer.run_epochs(problem, settings, candidate.state, 1, *self.split, log=log,
                           history=candidate.history, train_metrics=False)
        if candidate.state.epoch >= self.cap:
            candidate.stopped = candidate.stopped or "max_epochs"
        elif candidate.stalled(self.options.patience):
            candidate.stopped = "patience"

    def run(self, candidates):
        """Train the candidates as ``options.selection`` says; each ends with ``stopped`` set."""
        if self.options.selection == "each":
            for candidate in candidates:
                while not candidate.stopped:
                    self.epoch(candidate)
                candidate.state = None
            return
        if self.options.race_probe and len(candidates) > 1:
            self.probe(candidates)
        while True:
            running = [c for c in candidates if not c.stopped]
            if not running:
                return
            # The loaded problem's candidate first: a round that ends with it loads
            # nothing for the next one.  Each candidate's epochs do not depend on the
            # order (an epoch's shuffle is seeded with its number).
            running.sort(key=lambda c: c.spec != self.loaded)
            for candidate in running:
                self.epoch(candidate)
            leader = best_candidate(candidates)
            for candidate in running:
                if candidate is leader or candidate.stopped:
                    continue
                behind = candidate.best["valid_perplexity"] / leader.best["valid_perplexity"] - 1
                epochs = len(candidate.history) - 1
                if epochs >= RACE_EPOCHS or behind > self.options.race_margin:
                    candidate.stopped = f"{behind:.1%} behind {leader.spec.variant} after " \
                                        f"{epochs} epoch(s)"
            for candidate in candidates:
                if candidate.stopped:
                    candidate.state = None  # not needed any more


def probe_events(train_events, share, seed):
    """The probe's training events: ``share`` of ``train_events``, drawn by a generator
    the epochs' shuffles never use (they are seeded with epochs >= 1)."""
    size = max(1, round(len(train_events) * share))
    order = np.random.default_rng([seed, 0]).permutation(train_events)
    return np.sort(order[:size])


def best_candidate(candidates):
    """The candidate with the lowest validation perplexity of any epoch."""
    return min((c for c in candidates if c.history), key=lambda c: c.best["valid_perplexity"])


#: What the fit holds, in bytes: a small-M link with its row and class (the lexicalized
#: variant's, the largest: DESIGN.md 5), a held-out feature occurrence, a held-out event,
#: a slot of the hashed weights (theta, AdaGrad's sums, the gradient).
FIT_LINK_BYTES, FIT_OCCURRENCE_BYTES, FIT_EVENT_BYTES, FIT_SLOT_BYTES = 130, 8, 24, 16


def fit_memory(join_manifest, options):
    """The parts of the fit's memory, from its join's totals (before anything is read).

    Small M grows with the training text (about as its words^0.7, more slowly than the
    text): this is the one stage whose need grows with the corpus, so it says before it
    starts what it needs."""
    totals = join_manifest.totals
    return {"the process": memory.PROCESS_BYTES,
            "small M": totals.get("small_m_links", 0) * FIT_LINK_BYTES,
            "held-out events": (totals.get("feature_occurrences", 0) * FIT_OCCURRENCE_BYTES
                                + totals.get("events", 0) * FIT_EVENT_BYTES),
            "weights": options.hash_size * FIT_SLOT_BYTES}


def fit_directory(join_dir, out_dir, options, say=print, progress=None):
    """Fit theta on a join directory and write the fit directory; returns its manifest."""
    memory.configure_process("single")
    started = time.perf_counter()
    log_entries = []
    held = {}  # the one compiled problem: its spec -> it
    join_manifest = validation.validate_directory(join_dir, "join").manifest
    options.memory.require("fit", fit_memory(join_manifest, options))
    # A directory without a manifest is not a finished fit: never old settings
    # beside a new theta if this run is cut short.
    storage.remove_file(storage.join(out_dir, tables.MANIFEST))

    def problem_for(spec):
        if spec not in held:
            # One compiled problem at a time: keeping another variant's beside it slowed
            # the lexicalized epochs by more than the compile it saves (benchmarks/
            # README.md, "Fitting").
            if held:
                held.popitem()[1].close()
            memory.release_memory()
            # Reading and compiling small M frees and makes arrays of up to ~100 MB:
            # reused from the heap, not mapped and zeroed afresh (a third of the
            # compile's time); what the heap kept is given back after.
            with memory.kept_heap("single"):
                held[spec] = load_join(join_dir, spec, options.threads or None)[0]
        return held[spec]

    choice = None
    candidates = [Candidate(spec) for spec in options.candidates()]
    select_seconds = 0.0
    if options.choosing:
        cap = options.max_epochs if options.epochs == AUTO else int(options.epochs)
        say(f"choosing {'meta-features and ' if len(candidates) > 1 else ''}epochs on a "
            f"held-back {options.validation_fraction:.0%} of the held-out sentences "
            f"({options.selection}, up to {cap} epochs)")
        select_started = time.perf_counter()
        Selection(problem_for, options, cap, say, log_entries).run(candidates)
        select_seconds = time.perf_counter() - select_started
        winner = best_candidate(candidates)
        spec, epochs = winner.spec, winner.best["epoch"]
        if options.epochs != AUTO:
            epochs = int(options.epochs)
        choice = {"rule": f"lowest validation perplexity on a held-back "
                          f"{options.validation_fraction:.0%} of the held-out sentences "
                          f"({options.selection}), then retrained on all of them",
                  "validation_perplexity": winner.best["valid_perplexity"],
                  "candidates": {c.spec.variant: {
                      "epochs": c.best and c.best["epoch"],
                      "validation_perplexity": c.best and c.best["valid_perplexity"],
                      "probe_validation_perplexity": c.probe_perplexity,
                      "epochs_trained": max(len(c.history) - 1, 0), "stopped": c.stopped}
                      for c in candidates}}
        for c in candidates:
            c.state = None
    else:
        spec, epochs = candidates[0].spec, int(options.epochs)

    problem = problem_for(spec)
    say(f"training {spec.variant} meta-features (hash size {spec.hash_size:,}) for {epochs} "
        f"epoch(s) on {problem.num_events:,} held-out events")

    def log(entry):
        entry = {"run": "final", "metafeatures": spec.variant, **entry}
        log_entries.append(entry)
        say(f"  epoch {entry['epoch']:>2}: held-out perplexity {entry['train_perplexity']:.3f} "
            f"({entry['seconds']:.2f} s)")

    final_started = time.perf_counter()
    theta, history = trainer.train(problem, options.settings(epochs), log=log, progress=progress)
    final_seconds = time.perf_counter() - final_started
    problem.close()  # its batch buffers, before the hash_size-long table is made
    storage.makedirs(out_dir)
    storage.write_npy(problem.dense_theta(theta), storage.join(out_dir, "theta.npy"))
    storage.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in log_entries),
                       storage.join(out_dir, "train_log.jsonl"))
    final = history[-1]
    manifest = manifests.Fit(
        files=["theta.npy", "train_log.jsonl"], join=storage.absolute(join_dir),
        metafeatures=spec.to_dict(), training=dataclasses.asdict(options.settings(epochs)),
        choice=choice,
        small_m={"rows": problem.num_rows, "classes": problem.num_classes,
                 "links": problem.num_links},
        heldout_events=problem.num_events,
        heldout_events_unseen_target=problem.num_unseen_targets,
        weights_in_use=problem.weights_in_use(), nonzero_weights=final["nonzero_params"],
        heldout_perplexity_unadjusted=history[0]["train_perplexity"],
        heldout_perplexity=final["train_perplexity"],
        seconds={"total": round(time.perf_counter() - started, 3),
                 "selection": round(select_seconds, 3), "final": round(final_seconds, 3)},
        vocabulary_fingerprint=join_manifest.vocabulary_fingerprint).write(out_dir)
    if problem.num_unseen_targets:
        say(f"note: {problem.num_unseen_targets:,} held-out events predict a word no training "
            "feature saw (probability 0 whatever theta); they were left out")
    return manifest
