"""Running a stage's pipeline: Beam options, the run itself, metrics, allocators, and
:class:`CallOnce` for a stage's last step."""

import contextlib
import logging
import re
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import (DirectOptions, PipelineOptions,
                                                  StandardOptions)

from pipelines import runners
from snm_core.io import memory, storage
from snm_core.io.errors import (
    OUT_OF_MEMORY,
    RESOURCE_ERRNOS,
    SnmInputError,
    SnmStageError,
    resource_error_message,
)
from snm_core.io.memory import PROCESS_BYTES
from snm_core.io.progress import StageProgress, WorkerProgress
from snm_core.scoring.compact import LAYOUTS

#: Namespace of every Beam counter the toolkit reports.
METRICS_NAMESPACE = "snm"
#: How often Beam's state sampler wakes in a worker (its default: 200 ms).
STATE_SAMPLING_MS = 5


def shorten_state_sampling(period_ms=STATE_SAMPLING_MS):
    """Make Beam's state sampler wake every ``period_ms`` milliseconds.

    A bundle's end joins the sampler's thread, which sleeps its whole period first:
    up to 200 ms by default (ramped from 2 ms by 1.2 a tick), a noticeable share of a
    short bundle's time, which a shorter period removes (the thread's waking costs
    nothing measurable).  Beam has no
    option for it: the period is the default argument of the worker's sampler,
    set here (if this Beam still has it) in every process that imports this module,
    which is every process that runs the stages' DoFns.
    """
    from apache_beam.runners.worker import statesampler
    defaults = statesampler.StateSampler.__init__.__defaults__
    if defaults == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        statesampler.StateSampler.__init__.__defaults__ = (period_ms,)


shorten_state_sampling()


def pipeline_options(beam_args):
    """PipelineOptions from the leftover arguments; FnApiRunner unless a runner is named.

    The DirectRunner would first try to download the Prism runner, which
    stalls or fails on machines without network access.  Construction-time
    type checking is off unless ``--pipeline_type_check`` is given: the
    elements are untyped arrays and dicts, so it checks nothing and costs
    every run start-up time.
    """
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        beam_args = ["--runner=FnApiRunner"] + list(beam_args)
    if "--pipeline_type_check" not in beam_args:
        beam_args = ["--no_pipeline_type_check"] + list(beam_args)
    logging.getLogger(_FN_RUNNER_LOGGER).addFilter(_in_memory_workers_warning)
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if isinstance(standard.runner, str) and standard.runner.lower() == "fnapirunner":
        # By its module path: older Beam releases (2.60, 2.65) know no short name for it.
        standard.runner = FN_API_RUNNER
    if runners.kind(options) == "local" and not any(
            a == "--direct_num_workers" or a.startswith("--direct_num_workers=")
            for a in beam_args):
        # Beam's default is one worker; lmplz uses the machine's cores unasked, and so
        # does snm (the bytes are the same on any number of workers).
        options.view_as(DirectOptions).direct_num_workers = runners.usable_cpus()
    return options


#: The local runner's class, by the path every Beam release resolves.
FN_API_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


_FN_RUNNER_LOGGER = "apache_beam.runners.portability.fn_api_runner.fn_runner"


def _in_memory_workers_warning(record):
    """Drop the FnApiRunner's warning that ``in_memory`` mode ignores ``--direct_num_workers``.

    It does not: each stage's input is split into that many parts, run at
    once in as many threads (``ParallelBundleManager``), each by its own
    in-process worker.  That is the local runner ``snm`` recommends: it spends
    less CPU than ``multi_threading``, whose workers talk to the runner over gRPC
    (benchmarks/README.md, "Figures behind the code").
    """
    return not record.getMessage().startswith("If direct_num_workers is not equal to 1")


def counter(name):
    return beam.metrics.Metrics.counter(METRICS_NAMESPACE, name)


def workers_are_local(beam_args):
    """True on a local runner: the workers are this process's threads or children."""
    return runners.kind(pipeline_options(list(beam_args))) == "local"


def workers_per_process(beam_args):
    """How many of a stage's workers share one process, and so its memory budget: the
    local runner's threads (``in_memory``, ``multi_threading``: ``--direct_num_workers``,
    0 the CPUs); one for a multi-processing, Dask or cluster runner, whose workers are
    processes each with the budget."""
    from apache_beam.options.pipeline_options import DirectOptions
    options = pipeline_options(list(beam_args))
    if runners.kind(options) != "local":
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        return 1
    return runners.parallelism(options)


def bucket_memory(count_manifest, workers, link_bytes):
    """The fixed parts of a stage whose workers each hold one count bucket whole (join,
    apply): ``link_bytes`` a link of the bucket (its link and feature rows as read, and
    what the stage makes of them)."""
    links = count_manifest.totals["links"] / max(count_manifest.num_buckets, 1)
    return {"the process": PROCESS_BYTES, "a bucket a worker": int(workers * links * link_bytes)}


def worker_progress(stage, phase, unit, total=None):
    """What the workers do of ``phase`` of ``stage`` (a
    :class:`~snm_core.io.progress.WorkerProgress`): make it in the DoFn's constructor and
    call ``update(n)`` a batch or a bucket at a time.  On a local runner it adds to the
    stage's one display (:func:`run_pipeline`); on a remote one each worker process logs
    a line every few seconds."""
    return WorkerProgress(stage, phase, unit, total)


#: The phase of a stage's text reading: the files' bytes as stored (compressed or not).
TEXT_READ = "text read"


def text_progress(stage):
    """The :func:`worker_progress` of a :class:`pipelines.reading.ShardReader`: the bytes
    of the text files read, as stored; its total is :func:`run_pipeline`'s ``text``."""
    return worker_progress(stage, TEXT_READ, "B")


def configure_allocators():
    """A Beam worker's allocators (:func:`snm_core.io.memory.configure_process`); the
    thresholds override the environment's in a Dask worker, whose nanny sets
    ``MALLOC_TRIM_THRESHOLD_=65536`` for every worker (benchmarks/README.md, "Counting on
    Dask").  Process-wide, so stage DoFns call it in ``setup``."""
    memory.configure_process("worker", override_environment=_in_dask_worker())


def _in_dask_worker():
    """Whether this code runs in a task of a Dask worker."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
        return True
    except ValueError:
        return False


def release_memory():
    """:func:`snm_core.io.memory.release_memory`, called at the end of each bundle of the
    count's stages, not after every flush: trimming that often cost more CPU
    than the memory it saved was worth (benchmarks/README.md)."""
    memory.release_memory()


class CallOnce(beam.PTransform):
    """``fn(elements, *args)`` once, with the list of all the input's elements (in no
    particular order).

    For a stage's last step (its manifest), given the small per-bucket results:
    also runs when the input is empty.  The elements and one marker meet in a
    ``GroupByKey`` on a single key, so it runs as an ordinary step on every
    runner: a side input would make Beam's Dask runner compute the whole
    pipeline from inside one task, holding one worker idle while it waits.
    """

    def __init__(self, fn, *args):
        super().__init__()
        self.fn, self.args = fn, args

    def expand(self, pcoll):
        fn, args = self.fn, self.args
        marker = pcoll.pipeline | "Once" >> beam.Create([(0, (True, None))])
        keyed = pcoll | "Key" >> beam.Map(lambda element: (0, (False, element)))
        return ((marker, keyed)
                | "WithMarker" >> beam.Flatten()
                | "Gather" >> beam.GroupByKey()
                | "Call" >> beam.MapTuple(lambda _, items: fn(
                    [element for is_marker, element in items if not is_marker], *args)))


def run_pipeline(beam_args, build, stage, shared_paths=(), text=()):
    """Build a pipeline with ``build(pipeline)`` and run it to the end.

    ``shared_paths``: directories every worker must read and write (checked
    by :func:`pipelines.runners.prepare`).  Returns the snm Beam metrics, or
    None on a runner that has none.  An :class:`SnmInputError` or
    :class:`SnmStageError` raised on a worker reaches the caller as itself,
    with its one line: runners wrap a worker's exception in their own.

    On a local runner the stage's progress is one display in this process
    (:class:`~snm_core.io.progress.StageProgress`) of what its workers report
    (:func:`worker_progress`); ``text``: the text files the stage reads, whose sizes
    are the total of its :data:`TEXT_READ`.
    """
    options = pipeline_options(runners.prepare(beam_args, shared_paths))
    pipeline = beam.Pipeline(options=options)
    build(pipeline)
    display = contextlib.nullcontext()
    if runners.kind(options) == "local":
        display = StageProgress(stage, {TEXT_READ: sum(storage.file_stamp(path)[1]
                                                       for path in text)})
    try:
        with display:
            result = pipeline.run()
            try:
                result.wait_until_finish()
            finally:
                client = getattr(result, "client", None)  # the Dask runner's
                if client is not None:
                    client.close()
    except Exception as e:
        raise _snm_error(e, stage) from None
    return metric_totals(result)


#: A worker's full disk or exhausted memory, as runners render it in their wrapping.
_RESOURCE_TEXT = re.compile(r"\[Errno (%s)\][^\n\[]*?(?:: '([^']+)')?(?: \[while|$)"
                            % "|".join(str(n) for n in RESOURCE_ERRNOS), re.MULTILINE)


_SNM_ERROR = re.compile(r"\b(SnmInputError|SnmStageError): (.+?)(?: \[while running [^\]]*\])*$",
                        re.MULTILINE)


def _snm_error(error, stage):
    """What a runner's wrapping of a worker's exception holds, as snm's own error: an
    :class:`SnmInputError`/:class:`SnmStageError` (found by type along the chain, else in
    the message), a full disk or memory exhausted (an :class:`SnmStageError` naming the
    stage), Ctrl-C (:class:`KeyboardInterrupt`); else ``error`` itself."""
    def staged(message):
        message = message.split(" [while running")[0].splitlines()[0].strip()
        return message if message.startswith(f"{stage}: ") else f"{stage}: {message}"

    seen = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):  # Ctrl-C inside a DoFn: Beam wraps it
            return KeyboardInterrupt()
        if isinstance(seen, SnmInputError):
            return SnmInputError(str(seen).split(" [while running")[0].splitlines()[0])
        if isinstance(seen, SnmStageError):
            return SnmStageError(staged(str(seen)))
        resource = resource_error_message(seen)
        if resource:
            return SnmStageError(staged(resource))
        if isinstance(seen, MemoryError):
            return SnmStageError(staged(OUT_OF_MEMORY))
        seen = seen.__cause__ or seen.__context__
    text = str(error)
    match = _SNM_ERROR.search(text)
    if match:
        if match.group(1) == "SnmInputError":
            return SnmInputError(match.group(2).strip())
        return SnmStageError(staged(match.group(2)))
    match = _RESOURCE_TEXT.search(text)
    if match:
        what = RESOURCE_ERRNOS[int(match.group(1))]
        return SnmStageError(staged(f"writing {match.group(2)}: {what}" if match.group(2)
                                    else what))
    if re.search(r"\bMemoryError\b", text):
        return SnmStageError(staged(OUT_OF_MEMORY))
    if re.match(r"KeyboardInterrupt\b", text):
        return KeyboardInterrupt()
    return error


def metric_totals(result):
    """``{name: value}`` of the snm counters of a finished pipeline; None when the runner
    keeps no metrics (Beam's Dask runner)."""
    totals = {}
    try:
        query = result.metrics().query(
            beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))
    except NotImplementedError:
        return None
    for c in query["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + (value or 0)
    return totals


def print_summary(title, totals, metrics=None):
    """The stage's totals (from its data, as in its manifest) and, where the runner has
    them, the Beam metric of the same name (namespace ``snm``)."""
    print(f"== {title} ==")
    if metrics:
        print(f"  {'':<24}{'total':>16}{'Beam metric':>16}")
    for name in sorted(totals):
        if isinstance(totals[name], (int, float)):
            shown = f"{metrics[name]:>16,}" if metrics and name in metrics else ""
            print(f"  {name:<24}{totals[name]:>16,}{shown}")


def absolute_paths(options, *names):
    """Make the named path fields of a frozen options object absolute (None stays None)."""
    for name in names:
        if getattr(options, name) is not None:
            object.__setattr__(options, name, storage.absolute(getattr(options, name)))


def check_layout(layout):
    if layout not in LAYOUTS:
        raise SnmInputError(f"--layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
