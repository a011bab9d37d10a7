"""What the commands share about models and their evaluation: loading any model directory,
evaluating a text, the KenLM-style report, the fit's progress line (its plot:
:mod:`snm.plot`)."""

from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import PROCESS_BYTES, MemoryBudget
from snm_core.io.progress import Progress, Status
from snm_core.io.textfile import read_text
from snm_core.loglinear.family import is_loglinear
from snm_core.scoring.compact import load_model


def format_report(name, report):
    """A report in the spirit of KenLM's ``query`` summary."""
    return "\n".join([
        f"{name} model:",
        f"  Perplexity including OOVs:\t{report['perplexity']:.4f}",
        f"  Perplexity excluding OOVs:\t{report['perplexity_excluding_oov']:.4f}",
        f"  OOVs:\t{report['oov']}",
        f"  Tokens:\t{report['words']}",
        f"  Sentences:\t{report['sentences']}",
    ] + ([f"  Zero-probability tokens:\t{report['zero_probability']} (perplexity is infinite: "
          "the model never saw <UNK>; build the vocabulary with --min_count 2 or more)"]
         if report["zero_probability"] else [])
      + ([f"  Lines skipped:\t{report['invalid_lines']} that do not decode or hold a NUL "
          f"byte (the first named in a warning), {report['empty_lines']} empty; the figures "
          f"are over the other {report['sentences']} lines"]
         if report.get("invalid_lines") or report.get("empty_lines") else []))


#: What marks a run directory (``snm train --out``; :data:`snm.chain.STATE`).
RUN_STATE = "stages.json"
#: A run's model directories, in the order ``--model RUN`` takes the first there: the
#: pruned model, the log-linear one, the model (:data:`snm.chain.STAGES`' directories).
RUN_MODELS = ("pruned", "loglinear", "model")
#: The key of ``stages.json`` naming the run's final model directory
#: (:data:`snm.chain.FINAL_MODEL`); a run written before it has none.
RUN_FINAL_MODEL = "final_model"


def model_help(reads_tables=False):
    """The help of a command's ``--model``; ``reads_tables``: the command's (export-arpa,
    prune, compact, sample), which a scoring directory cannot serve."""
    models = ("snm apply or snm prune --out; not a scoring directory of snm compact --out"
              if reads_tables else "snm apply, snm prune or snm compact --out; any family "
              "or layout")
    return (f"model directory ({models}), or a run directory (snm train --out), which "
            "stands for its pruned/ if the run pruned, else its loglinear/ for a log-linear "
            "run, else its model/")


def model_directory(path, command=None):
    """The model directory ``--model PATH`` names: ``path`` itself, or for a run directory
    (``snm train --out``: ``stages.json`` and no manifest of its own) the run's final model:
    the one ``stages.json`` names (the last run's), else the first of :data:`RUN_MODELS`
    there.

    ``command`` (``"snm sample"``): a command that reads the model's tables, which a
    scoring directory (``snm compact --out``) does not hold; such a directory is then
    refused with one line naming the model it came from.
    """
    state = storage.join(path, RUN_STATE)
    if storage.isfile(state) and not storage.isfile(storage.join(path, tables.MANIFEST)):
        try:
            final = storage.read_json(state).get(RUN_FINAL_MODEL)
        except (ValueError, AttributeError):
            final = None  # not the JSON object snm train writes: the directories decide
        names = ([final] if isinstance(final, str) and final in RUN_MODELS else []) + list(
            RUN_MODELS)
        path = next((storage.join(path, name) for name in names
                     if storage.isdir(storage.join(path, name))),
                    storage.join(path, RUN_MODELS[-1]))
    if command is not None and storage.isfile(storage.join(path, tables.MANIFEST)):
        try:
            manifest = storage.read_json(storage.join(path, tables.MANIFEST))
        except ValueError:
            return path  # not JSON: the command's own check says so
        scoring = manifest.get("scoring_only") if isinstance(manifest, dict) else None
        if isinstance(scoring, dict):
            raise SnmInputError(
                f"{path}: a scoring directory ('snm compact --out' from {scoring['source']}) "
                f"cannot serve '{command}', which reads the model's tables; give the model it "
                f"came from, --model {scoring['source']}")
    return path


def load_scorer(model_dir):
    """The scorer of any model directory, by its manifest's kind: an SNM model's
    (:func:`snm_core.scoring.compact.load_model`) or a log-linear one's; a run directory
    gives its final model's (:func:`model_directory`)."""
    model_dir = model_directory(model_dir)
    if is_loglinear(model_dir):
        from snm_core.loglinear.directory import LogLinearScorer  # numba: this family only
        return LogLinearScorer.load(model_dir)
    return load_model(model_dir)


def load_checked(model_dir, unadjusted=False):
    """The scorer of ``model_dir``, refusing ``unadjusted`` before any text is read when the
    model has no unadjusted form."""
    model = load_scorer(model_dir)
    if unadjusted and "unadjusted" not in model.REPORTS:
        raise SnmInputError(f"{model_dir}: {model.WITHOUT_UNADJUSTED}")
    return model


#: What scoring holds besides the memory-mapped model: numba's compiled code (a log-linear
#: model's scoring; an SNM's is C), and a text read whole (its lines as Python strings,
#: about this many times its bytes).
NUMBA_BYTES = 150 << 20
TEXT_BYTES_FACTOR = 4


def check_scoring_memory(command, memory, path):
    """Raise :class:`SnmInputError` unless ``--memory`` holds what ``command`` (eval,
    score) holds besides the memory-mapped model: the process, numba and the text."""
    size = storage.file_stamp(path)[1] if path != "-" and storage.isfile(path) else 0
    MemoryBudget.of(memory).require(command, {
        "the process": PROCESS_BYTES, "numba": NUMBA_BYTES,
        "the text": size * TEXT_BYTES_FACTOR})


def evaluate(model_dir, path, encoding="utf-8", skip_invalid=False):
    """A report per model of a text file: ``{"adjusted": .., "unadjusted": ..}`` for an SNM,
    ``{"loglinear": ..}`` for a log-linear model.  Lines that do not decode:
    :func:`snm_core.io.textfile.check_invalid_lines`."""
    return load_scorer(model_dir).evaluate_lines(read_text(path, encoding, skip_invalid))


class FitProgress:
    """The fit's epochs as progress (:class:`snm_core.io.progress.Progress`: a bar on a
    terminal, log lines otherwise), for ``fit_directory(progress=...)``; ``say``, for
    ``fit_directory(say=...)``, shows the steps it tells before them (the candidates'
    epochs while it chooses) in place on a terminal (:class:`~snm_core.io.progress.Status`);
    ``close()`` at the end."""

    def __init__(self):
        self.epoch, self.progress, self.status = None, None, None

    def say(self, line):
        if self.epoch is None:
            self.status = self.status or Status()
            self.status.show(f"fit: {line.strip()}")

    def close(self):
        for shown in (self.status, self.progress):
            if shown is not None:
                shown.close()

    def __call__(self, epoch, done, total):
        if self.status is not None:
            self.status.close()
        if epoch != self.epoch:
            if self.progress is not None:
                self.progress.close()
            self.epoch = epoch
            self.progress = Progress(f"fit: epoch {epoch}", total=total, unit="event")
        self.progress.update(done - self.progress.done)
        if done >= total:
            self.progress.close()
