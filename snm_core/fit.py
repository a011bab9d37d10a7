"""The fit stage (``snm fit``): small M + held-out events -> theta.

Reads a ``snm join`` directory.  Writes to the output directory:

* ``theta.npy``: float32 (hash_size,), the hashed meta-feature weights;
* ``train_log.jsonl``: one JSON object per epoch and run (loss, held-out
  perplexity, seconds), including the selection runs;
* ``manifest.json`` (last): meta-feature settings, training settings, the
  chosen variant and epochs and why, final held-out perplexity.

Choosing defaults without test text.  With ``metafeatures="auto"`` and/or
``epochs="auto"`` a tenth of the held-out sentences (a fixed hash of each
sentence's position) is held back; every candidate variant trains on the
rest for up to ``max_epochs`` epochs, stopping once validation perplexity has
not improved for ``PATIENCE`` epochs; the (variant, epochs) pair with the lowest
validation perplexity wins and is retrained on all the held-out data.  This
is how the paper's observation plays out here: lexicalized meta-features
over-train after one epoch, unlexicalized ones keep improving for several.
"""

import dataclasses
import os
import time

import numpy as np
import pyarrow as pa

from snm_core import io, tables, trainer
from snm_core import metafeatures as mf
from snm_core.errors import SnmInputError

AUTO = "auto"
#: Epochs without improvement of validation perplexity before a candidate stops.
PATIENCE = 2
DEFAULT_MAX_EPOCHS = 10


@dataclasses.dataclass
class FitOptions:
    """What ``snm fit`` takes; see :func:`fit_directory`."""

    metafeatures: str = AUTO
    epochs: object = AUTO  # int or "auto"
    max_epochs: int = DEFAULT_MAX_EPOCHS
    hash_size: int = mf.DEFAULT_HASH_SIZE
    diversity: bool = True
    continuation: bool = True
    batch_size: int = trainer.BATCH_SIZE
    gamma: float = trainer.GAMMA
    delta0: float = trainer.DELTA0
    renormalize: str = "batch"
    seed: int = 0
    cache_bytes: int = trainer.ENTRY_CACHE_BYTES  # speed only: results do not depend on it

    def candidates(self):
        variants = mf.VARIANTS if self.metafeatures == AUTO else (self.metafeatures,)
        # Continuation counts go with unlexicalized meta-features: feature-only
        # ones have no link meta-features, and lexicalized ones would carry
        # ~40 more entries a link (an epoch 3.7x slower on kernel) to refine
        # weights that are already per link.
        return [mf.MetaFeatureSpec(v, self.hash_size, self.diversity,
                                   self.continuation and v == "unlexicalized")
                for v in variants]

    def settings(self, epochs):
        return trainer.TrainSettings(epochs=epochs, batch_size=self.batch_size, gamma=self.gamma,
                                     delta0=self.delta0, renormalize=self.renormalize,
                                     seed=self.seed)


def _select(problem, options, epochs_cap, say, log_entries, spec):
    """Train on 90% of the held-out data; return (best epochs, best validation perplexity)."""
    train_events, valid_events = problem.split_events()
    if not len(valid_events) or not len(train_events):
        raise SnmInputError("the held-out set is too small to hold a tenth back; give "
                            "--epochs N and --metafeatures VARIANT explicitly")

    def log(entry):
        log_entries.append({"run": "select", "metafeatures": spec.variant, **entry})
        say(f"  select {spec.variant:<14} epoch {entry['epoch']:>2}: validation perplexity "
            f"{entry['valid_perplexity']:.3f}")

    def no_recent_gain(history):
        best = min(range(len(history)), key=lambda i: history[i]["valid_perplexity"])
        return len(history) - 1 - best >= PATIENCE

    _, history = trainer.train(problem, options.settings(epochs_cap), train_events, valid_events,
                               log=log, stop=no_recent_gain)
    best = min(history, key=lambda h: h["valid_perplexity"])
    return best["epoch"], best["valid_perplexity"]


def fit_directory(join_dir, out_dir, options, say=print, progress=None):
    """Fit theta on a join directory and write the fit directory; returns its manifest."""
    # pyarrow's default pool keeps freed memory for reuse; the system allocator
    # returns it to the OS, and reading Parquet is a small part of this stage.
    pa.set_memory_pool(pa.system_memory_pool())
    started = time.perf_counter()
    log_entries = []
    problems = {}
    join_manifest = tables.read_manifest(join_dir, "join")

    def problem_for(spec):
        if spec not in problems:
            problems.clear()  # hold one compiled problem at a time
            problems[spec] = trainer.load_join(join_dir, spec, options.cache_bytes)[0]
        return problems[spec]

    choice = None
    candidates = options.candidates()
    if options.metafeatures == AUTO or options.epochs == AUTO:
        cap = options.max_epochs if options.epochs == AUTO else int(options.epochs)
        say(f"choosing {'meta-features and ' if options.metafeatures == AUTO else ''}epochs "
            f"on a held-back tenth of the held-out sentences (up to {cap} epochs)")
        results = []
        for spec in candidates:
            epochs, ppl = _select(problem_for(spec), options, cap, say, log_entries, spec)
            results.append((ppl, spec, epochs))
        ppl, spec, epochs = min(results, key=lambda r: r[0])
        if options.epochs != AUTO:
            epochs = int(options.epochs)
        choice = {"rule": "lowest validation perplexity on a held-back tenth of the held-out "
                          "sentences, then retrained on all of them",
                  "validation_perplexity": ppl,
                  "candidates": {s.variant: {"epochs": e, "validation_perplexity": p}
                                 for p, s, e in results}}
    else:
        spec, epochs = candidates[0], int(options.epochs)

    problem = problem_for(spec)
    say(f"training {spec.variant} meta-features (hash size {spec.hash_size:,}) for {epochs} "
        f"epoch(s) on {problem.num_events:,} held-out events")

    def log(entry):
        entry = {"run": "final", "metafeatures": spec.variant, **entry}
        log_entries.append(entry)
        say(f"  epoch {entry['epoch']:>2}: held-out perplexity {entry['train_perplexity']:.3f} "
            f"({entry['seconds']:.2f} s)")

    theta, history = trainer.train(problem, options.settings(epochs), log=log, progress=progress)
    os.makedirs(out_dir, exist_ok=True)
    io.atomic_write_bytes(os.path.join(out_dir, "theta.npy"),
                          io.npy_bytes(problem.dense_theta(theta)))
    io.atomic_write_text(os.path.join(out_dir, "train_log.jsonl"),
                         "".join(_json_line(e) for e in log_entries))
    final = history[-1]
    manifest = {
        "kind": "fit", "format_version": tables.FORMAT_VERSION,
        "files": ["theta.npy", "train_log.jsonl"],
        "join": os.path.abspath(join_dir),
        "metafeatures": spec.to_dict(),
        "training": dataclasses.asdict(options.settings(epochs)),
        "choice": choice,
        "small_m": {"rows": problem.num_rows, "classes": int(len(problem.cls_count)),
                    "links": int(problem.cls_mult.sum(dtype=np.float64))},
        "heldout_events": problem.num_events,
        "heldout_events_unseen_target": problem.num_unseen_targets,
        "weights_in_use": problem.weights_in_use(),
        "nonzero_weights": final["nonzero_params"],
        "heldout_perplexity_unadjusted": history[0]["train_perplexity"],
        "heldout_perplexity": final["train_perplexity"],
        "seconds": round(time.perf_counter() - started, 3),
        "vocabulary_fingerprint": join_manifest["vocabulary_fingerprint"],
    }
    io.atomic_write_json(os.path.join(out_dir, tables.MANIFEST), manifest)
    if problem.num_unseen_targets:
        say(f"note: {problem.num_unseen_targets:,} held-out events predict a word no training "
            "feature saw (probability 0 whatever theta); they were left out")
    return manifest


def _json_line(entry):
    import json
    return json.dumps(entry, sort_keys=True) + "\n"


def load_theta(fit_dir):
    """``(theta float32 (hash_size,), MetaFeatureSpec, manifest)`` of a fit directory."""
    manifest = tables.read_manifest(fit_dir, "fit")
    theta = np.load(os.path.join(fit_dir, "theta.npy"))
    spec = mf.MetaFeatureSpec(**manifest["metafeatures"])
    if theta.shape != (spec.hash_size,):
        raise SnmInputError(f"{fit_dir}/theta.npy has shape {theta.shape}, expected "
                            f"({spec.hash_size},)")
    return theta, spec, manifest
