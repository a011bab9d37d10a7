"""``snm train``'s stage chain: one declarative table, and the runner that skips what is current.

:data:`STAGES` lists every stage a run can have, in order: its name (the
subcommand that runs it alone), the directory it writes under the run
directory, the kind of that directory's manifest
(:mod:`snm_core.stages.manifests`; the directory, the kind and the flag that
names it to its consumers are one name), the stages and files it reads, and
what runs it.  ``snm train`` runs the table's stages that apply to its
options (:func:`stages_for`); ``snm validate RUN`` checks a run directory's
stage directories by the same table; the launchers call both.

A stage is skipped when its directory holds a complete output (its done
marker: the manifest, or ``eval.json``) made from the same inputs:
``stages.json`` keeps, per stage, a digest of its settings, its input files
(path, size, time) and the manifests of the stages it reads.  A re-run stage
changes its manifest, so the stages after it run again too.  Under
:data:`FINAL_MODEL` it names the directory of the last run's final model, which
``--model RUN`` stands for (a ``pruned/`` left by an earlier run with ``--prune_to``
is not).
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import resource
import time
from typing import Callable, Optional

from pipelines import apply as apply_stage
from pipelines import count as count_stage
from pipelines import join as join_stage
from pipelines import vocab as vocab_stage
from snm import plot as plotting
from snm.evaluation import FitProgress, evaluate, format_report
from snm_core.fit.selection import fit_directory
from snm_core.io import memory, storage, tables
from snm_core.io.checkpoints import checkpoint
from snm_core.io.disk_peak import DiskPeak
from snm_core.io.errors import SnmStageError
from snm_core.scoring.card import write_model_card
from snm_core.stages import manifests

#: The run directory's record of what each stage ran on.
STATE = "stages.json"
#: The key of ``stages.json`` that names the run's final model directory (not a stage).
FINAL_MODEL = "final_model"
EVAL = "eval.json"
PLOT = "heldout_perplexity.png"


@dataclasses.dataclass(frozen=True)
class Stage:
    """A row of the chain: see the module docstring."""

    name: str
    directory: str  # under the run directory (eval: its report file)
    kind: Optional[str]  # the directory's manifest kind; None for eval's file
    reads: tuple  # the stages whose output it reads, and the run's input files ("final",
    # "counted": the plan's stage of that name)
    run: Callable  # run(plan): the stage's work, its done marker written last
    describe: Callable  # describe(plan): one line about its output
    families: tuple = ("snm",)
    when: Callable = None  # when(plan) -> bool: whether the run has the stage (default yes)


@dataclasses.dataclass
class Plan:
    """One run: where its stages write, and what they are given (``snm train``'s options)."""

    out: str
    family: str
    beam_args: list
    train_specs: list  # [TAG=]GLOB
    train_stamps: list  # storage.file_stamp of every training file
    tags: list
    config_text: str
    config: str  # the --config as given (preset name or path)
    heldout: str
    test: str
    vocab: str  # a given vocabulary file, or None
    add_to: str  # a previous count directory, or None
    min_count: int
    min_feature_count: list  # --min_feature_count [TYPES=]N specs
    min_link_count: list  # --min_link_count [TYPES=]N specs
    num_buckets: Optional[int]  # None: from the memory budget
    memory: Optional[memory.MemoryBudget]  # --memory, given to every stage
    layout: str
    prune_to: object  # None, links (int) or a size of the scoring directory (str: "200M")
    prune_criterion: Optional[str] = None  # None: snm prune's default (backoff)
    fit_options: object = None  # FitOptions (snm) or LogLinearOptions (loglinear)
    ngram: bool = True  # an n-gram configuration (pruning criterion, ARPA)
    encoding: str = "utf-8"  # --encoding of every text the run reads
    skip_invalid: bool = False  # --skip_invalid
    verbose: bool = False  # -v: each stage's totals, the fit's epochs, the eval's reports

    def path(self, stage_name):
        return storage.join(self.out, STAGE[stage_name].directory)

    def manifest(self, stage_name):
        stage = STAGE[stage_name]
        return manifests.KINDS[stage.kind].read(self.path(stage_name))

    @property
    def vocab_path(self):
        return self.vocab or storage.join(self.add_to or self.path("vocab"), "vocab.txt")

    @property
    def selects(self):
        """Whether the model is fitted on counts selected for ``--prune_to`` (a model that is
        not an n-gram model: :mod:`pipelines.select`)."""
        return bool(self.prune_to) and not self.ngram and self.family == "snm"

    @property
    def counted(self):
        """The stage whose counts join and apply read."""
        return "select" if self.selects else "count"

    @property
    def final(self):
        """The stage whose model eval evaluates."""
        return ("loglinear" if self.family == "loglinear"
                else "prune" if self.prune_to and not self.selects else "apply")


def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def manifest_digest(directory):
    return hashlib.sha256(storage.read_bytes(storage.join(directory, tables.MANIFEST))).hexdigest()


# --- what each stage reads, and runs ---------------------------------------------------------

def _inputs(plan, stage):
    """The signature inputs of ``stage``: the files and settings it reads."""
    given = {
        "train": plan.train_stamps,
        "heldout": storage.file_stamp(plan.heldout),
        "test": storage.file_stamp(plan.test),
    }
    inputs = {}
    for name in stage.reads:
        if name in given:
            inputs[name] = given[name]
        elif name in STAGE:
            inputs[name] = manifest_digest(plan.path(name))
    if stage.name == "vocab":
        inputs["min_count"] = plan.min_count
    elif stage.name == "count":
        inputs.update(tags=plan.tags, config=plan.config_text, buckets=plan.num_buckets,
                      vocab=storage.file_stamp(plan.vocab_path))
        if plan.add_to:
            inputs["add_to"] = manifest_digest(plan.add_to)
        if plan.min_feature_count:  # (runs before it: every feature, no such input)
            inputs["min_feature_count"] = plan.min_feature_count
        if plan.min_link_count:
            inputs["min_link_count"] = plan.min_link_count
    elif stage.name == "fit":
        inputs["options"] = plan.fit_options.signature()  # threads change speed only
    elif stage.name == "loglinear":
        inputs["options"] = dataclasses.asdict(plan.fit_options)
    elif stage.name in ("select", "prune"):
        if isinstance(plan.prune_to, str):
            inputs["target_size"] = memory.parse_size(plan.prune_to, "--prune_to")
        else:
            inputs["target_links"] = plan.prune_to
        if stage.name == "prune" and plan.prune_criterion:  # (none before: the default)
            inputs["criterion"] = plan.prune_criterion
    if plan.layout != "hashed" and stage.name in (plan.final, "eval"):
        inputs["layout"] = plan.layout  # (runs before --layout: hashed, no such input)
    if plan.encoding != "utf-8" and {"train", "heldout", "test"} & set(stage.reads):
        inputs["encoding"] = plan.encoding  # (runs before --encoding: utf-8, no such input)
    return inputs


def _run_vocab(plan):
    vocab_stage.run(vocab_stage.VocabOptions(train=plan.train_specs, out=plan.path("vocab"),
                                             min_count=plan.min_count, encoding=plan.encoding,
                                             skip_invalid=plan.skip_invalid), plan.beam_args,
                    summary=plan.verbose)


def _run_count(plan):
    count_stage.run(count_stage.CountOptions(
        config=plan.config, train=plan.train_specs, out=plan.path("count"),
        vocab=None if plan.add_to else plan.vocab_path, add_to=plan.add_to,
        num_buckets=plan.num_buckets, memory=plan.memory, encoding=plan.encoding,
        skip_invalid=plan.skip_invalid, min_feature_count=plan.min_feature_count,
        min_link_count=plan.min_link_count),
        plan.beam_args, summary=plan.verbose)


def _targets(plan):
    """``--prune_to`` as the select and prune stages take it: a size (a string such as
    ``200M``) or a number of links."""
    size = isinstance(plan.prune_to, str)
    return {"target_links": None if size else plan.prune_to,
            "target_size": plan.prune_to if size else None}


def _run_select(plan):
    from pipelines import select as select_stage
    select_stage.run(select_stage.SelectOptions(
        count=plan.path("count"), out=plan.path("select"), layout=plan.layout,
        memory=plan.memory, **_targets(plan)), plan.beam_args, summary=plan.verbose)


def _describe_select(plan):
    selected = plan.manifest("select")
    selection = selected["selection"]
    share = f" + {selection['partial']['share']:.0%} of a step" if selection.get("partial") else ""
    return (f"level {selection['level']}{share}: {selected.totals['links']:,} of "
            f"{plan.manifest('count').totals['links']:,} links")


def _run_join(plan):
    join_stage.run(join_stage.JoinOptions(count=plan.path(plan.counted), heldout=plan.heldout,
                                          out=plan.path("join"), memory=plan.memory,
                                          encoding=plan.encoding,
                                          skip_invalid=plan.skip_invalid),
                   plan.beam_args, summary=plan.verbose)


def _say(plan):
    """How a stage tells its steps (the fit's candidates and epochs): printed with -v."""
    return print if plan.verbose else lambda line: None


def _run_fit(plan):
    progress = FitProgress()
    try:
        fit_directory(plan.path("join"), plan.path("fit"), plan.fit_options,
                      say=print if plan.verbose else progress.say, progress=progress)
    finally:
        progress.close()


def _run_apply(plan):
    # With --prune_to the pruned model takes --layout; the model it is pruned from, hashed.
    # Fitted on selected counts, the model fits the size whole: it is the final one.
    apply_stage.run(apply_stage.ApplyOptions(
        count=plan.path(plan.counted), fit=plan.path("fit"), out=plan.path("apply"),
        layout=plan.layout if plan.final == "apply" else "hashed", memory=plan.memory),
        plan.beam_args,
        model_card=plan.final != "apply",  # the final model's card: written by eval
        summary=plan.verbose)


def _run_prune(plan):
    from pipelines import prune as prune_stage
    reestimate = plan.prune_criterion == "reestimate"  # its discounts chosen on the join
    prune_stage.run(prune_stage.PruneOptions(
        model=plan.path("apply"), out=plan.path("prune"), layout=plan.layout,
        memory=plan.memory, criterion=plan.prune_criterion,
        heldout=plan.path("join") if reestimate else None, **_targets(plan)),
        plan.beam_args, summary=plan.verbose)


def _run_loglinear(plan):
    from snm_core.loglinear.directory import train  # numba: this family only
    train(plan.path("count"), plan.heldout, plan.path("loglinear"), plan.fit_options,
          say=_say(plan), encoding=plan.encoding, skip_invalid=plan.skip_invalid)


def _run_eval(plan):
    model_dir = plan.path(plan.final)
    # The plot is drawn (by snm.plot's helper process) while the test text is scored.
    plot = plotting.draw(plan.path("fit"), storage.join(plan.out, PLOT)) \
        if plan.family == "snm" else None
    reports = evaluate(model_dir, plan.test, plan.encoding, plan.skip_invalid)
    if plot is not None:
        plot()
    checkpoint("eval.scored")  # fault tests stop the run here
    if plan.family == "snm":
        write_model_card(model_dir, plan.manifest(plan.final),
                         {storage.basename(plan.test): reports})
    storage.write_json(reports, plan.path("eval"))  # last: it marks the stage done
    for name, report in reports.items():
        _say(plan)(format_report("Log-linear" if name == "loglinear" else name.capitalize(),
                                 report))


def _describe_eval(plan):
    reports = storage.read_json(plan.path("eval"))
    return "test perplexity " + ", ".join(f"{report['perplexity']:.2f} {name}"
                                          for name, report in reports.items()) \
        + _skipped(next(iter(reports.values()), {}))


def _skipped(totals):
    """``"; N lines skipped (do not decode)"`` when a stage skipped lines of its text that
    did not decode (its totals' ``invalid_lines``), else ``""``."""
    invalid = totals.get("invalid_lines", 0)
    return f"; {invalid:,} lines skipped (do not decode)" if invalid else ""


def _describe_fit(plan):
    fit = plan.manifest("fit")
    return (f"{fit.metafeatures['variant']}, {fit.training['epochs']} epoch(s): held-out "
            f"perplexity {fit.heldout_perplexity_unadjusted:.2f} -> "
            f"{fit.heldout_perplexity:.2f}")


def _describe_loglinear(plan):
    model = plan.manifest("loglinear")
    return (f"{plan.fit_options.penalty} lambda {model['lam']:g} alpha {model['alpha']:g}: "
            f"held-out perplexity {model['heldout_perplexity']:.2f}, "
            f"{model.totals['nonzero_pairs']:,} of {model.totals['pairs']:,} weights nonzero")


#: The chain, in order (see the module docstring).
STAGES = (
    Stage("vocab", "vocab", "vocab", ("train",), _run_vocab,
          lambda p: f"{p.manifest('vocab').vocabulary_size:,} words"
                    + _skipped(p.manifest("vocab").totals),
          families=("snm", "loglinear"), when=lambda p: not (p.vocab or p.add_to)),
    Stage("count", "count", "count", ("train",), _run_count,
          lambda p: f"{p.manifest('count').totals['tokens']:,} words -> "
                    f"{p.manifest('count').totals['links']:,} links"
                    + _skipped(p.manifest("count").totals),
          families=("snm", "loglinear")),
    Stage("select", "selected", "count", ("count",), _run_select, _describe_select,
          when=lambda p: p.selects),
    Stage("join", "join", "join", ("counted", "heldout"), _run_join,
          lambda p: f"{p.manifest('join').totals['events']:,} held-out events, "
                    f"{p.manifest('join').totals['small_m_links']:,} small-M links"
                    + _skipped(p.manifest("join").totals)),
    Stage("fit", "fit", "fit", ("join",), _run_fit, _describe_fit),
    Stage("apply", "model", "model", ("counted", "fit"), _run_apply,
          lambda p: f"{p.manifest('apply').totals['links']:,} links"),
    Stage("prune", "pruned", "model", ("apply",), _run_prune,
          lambda p: f"{p.manifest('prune').totals['links']:,} of "
                    f"{p.manifest('apply').totals['links']:,} links",
          when=lambda p: p.final == "prune"),
    Stage("loglinear", "loglinear", "loglinear", ("count", "heldout"), _run_loglinear,
          _describe_loglinear, families=("loglinear",)),
    Stage("eval", EVAL, None, ("final", "test"), _run_eval, _describe_eval,
          families=("snm", "loglinear")),
)
STAGE = {stage.name: stage for stage in STAGES}


def stages_for(plan):
    """The stages a run has, in order."""
    return [s for s in STAGES
            if plan.family in s.families and (s.when is None or s.when(plan))]


def done_marker(plan, stage):
    path = plan.path(stage.name)
    return storage.join(path, tables.MANIFEST) if stage.kind else path


#: The width of a stage line's result, so that the seconds after it line up.
RESULT_WIDTH = 62


def stage_line(name, result, seconds=None):
    """A stage's one line: its name, what it made, and its seconds (None: it was up to
    date, not run)."""
    shown = "up to date" if seconds is None else f"{seconds:.1f} s"
    return f"{name:<7} {result:<{RESULT_WIDTH}} {shown:>8}"


class Runner:
    """Runs a plan's stages in order, skipping those whose output is complete and current;
    prints a line a stage as it ends, then where the model is (with ``plan.verbose``, each
    stage's own report before its line)."""

    def __init__(self, plan, force):
        self.plan, self.force = plan, force
        self.state_path = storage.join(plan.out, STATE)
        self.state = {}
        self.peak_disk = None  # the run directory's largest size while a stage ran
        if storage.isfile(self.state_path) and not force:
            self.state = storage.read_json(self.state_path)

    def run(self):
        plan = self.plan
        started = time.perf_counter()
        stages = stages_for(plan)
        if plan.verbose and "vocab" not in [s.name for s in stages]:
            print(f"{'vocab':<7} {plan.vocab_path} (given)", flush=True)
        final = STAGE[plan.final].directory
        if self.state.get(FINAL_MODEL) != final:  # before any stage: a killed run knows it
            self.state[FINAL_MODEL] = final
            storage.write_json(self.state, self.state_path)
        for stage in stages:
            self._stage(stage)
        self.summary(time.perf_counter() - started)

    def _stage(self, stage):
        plan = self.plan
        reads = stage.reads + tuple(getattr(plan, alias) for alias in ("final", "counted")
                                    if alias in stage.reads)
        inputs = _inputs(plan, dataclasses.replace(stage, reads=reads))
        signature = _digest(inputs)
        previous = self.state.get(stage.name, {})
        if (not self.force and storage.exists(done_marker(plan, stage))
                and previous.get("signature") == signature):
            print(stage_line(stage.name, stage.describe(plan)), flush=True)
            return
        start = time.perf_counter()
        if stage.kind is not None:  # a run killed in this stage left its unfinished files
            storage.remove_temporaries(plan.path(stage.name))
        try:
            with _disk_peak(plan.out) as disk:
                stage.run(plan)
        except SnmStageError as e:  # a fault: name the stage it stopped
            message = str(e)
            raise SnmStageError(message if message.startswith(f"{stage.name}: ")
                                else f"{stage.name}: {message}") from None
        except KeyboardInterrupt as e:  # the CLI's one line names the stage
            e.stage = stage.name
            raise
        memory.release_memory()  # what the stage left in the allocators, before the next
        seconds = round(time.perf_counter() - start, 3)
        summary = stage.describe(plan)
        # the largest process's peak so far: a stage whose figure is above the one
        # before it set the run's peak (what --memory must cover)
        self.state[stage.name] = {"signature": signature, "seconds": seconds,
                                  "summary": summary, "peak_rss_mib": round(peak_rss_mib())}
        if disk is not None:
            self.state[stage.name]["peak_disk_bytes"] = disk.bytes
            self.peak_disk = max(self.peak_disk or 0, disk.bytes)
        storage.write_json(self.state, self.state_path)
        print(stage_line(stage.name, summary, seconds), flush=True)

    def summary(self, seconds):
        """The run's time and peak memory, and where its model and reports are."""
        plan = self.plan
        disk = "" if self.peak_disk is None else f", peak disk {memory.format_bytes(self.peak_disk)}"
        print(stage_line("total", f"peak RSS of one process {peak_rss_mib():,.0f} MiB{disk}",
                         seconds))
        model = plan.path(plan.final)
        card = " (model_card.md)" if storage.exists(storage.join(model, "model_card.md")) else ""
        reports = [shown_path(storage.join(plan.out, name)) for name in (EVAL, PLOT)
                   if storage.exists(storage.join(plan.out, name))]
        print(", ".join([f"{'model':<7} {shown_path(model)}{card}"] + reports), flush=True)


@contextlib.contextmanager
def _disk_peak(out):
    """A :class:`DiskPeak` of a local run directory (what the disk must hold: outputs and
    scratch), None for one in object storage."""
    if storage.is_remote(out):
        yield None
    else:
        with DiskPeak(out) as disk:
            yield disk


def shown_path(path):
    """``path`` as the summary shows it: relative to the working directory when it is
    under it, else as it is."""
    if storage.is_remote(path):
        return path
    relative = os.path.relpath(path)
    return path if relative == os.pardir or relative.startswith(os.pardir + os.sep) \
        else relative


def peak_rss_mib():
    """The peak RSS of this process or of its largest finished child (Beam's
    workers), MiB."""
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
