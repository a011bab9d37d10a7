"""Which Beam runner a stage runs on, and what snm needs from it, checked before work starts.

* Short names: ``--runner dask`` is Beam's DaskRunner and ``--dask_address
  HOST:PORT`` its scheduler (``--dask_client_address``); Beam's own names
  (``--runner FnApiRunner``, ``--runner dataflow``, ...) work as in Beam.
* Options are checked, not guessed: every argument a stage's parser does not
  know must be a Beam pipeline option; anything else is an error naming the
  closest option of either (Beam itself only logs "Unparseable argument").
* A runner is ``local`` (workers in this process or its children: the local
  runners), ``dask`` (a Dask cluster; its scheduler is asked how many worker
  threads it has, and every worker must see the stage's output directory) or
  ``cluster`` (any other: Dataflow, Flink, Spark, ...).
"""

import difflib
import os
import textwrap
import uuid

from snm_core.io import native, storage
from snm_core.io.errors import SnmInputError

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
#: ``--runner`` values snm adds to Beam's (compared lower-case).
RUNNER_NAMES = {"dask": DASK_RUNNER, "daskrunner": DASK_RUNNER}
#: snm's spelling -> Beam's.
OPTION_ALIASES = {"--dask_address": "--dask_client_address"}
#: Runners whose workers run on this machine, reading and writing its files.
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner",
                 "SwitchingDirectRunner", "PrismRunner")
#: Runners whose workers never see this machine's files.
REMOTE_ONLY_RUNNERS = ("DataflowRunner",)
#: Where Beam's pipeline options are documented (``--help`` epilogs, errors).
BEAM_OPTIONS_URL = ("https://beam.apache.org/releases/pydoc/current/"
                    "apache_beam.options.pipeline_options.html")
RUNNER_HELP = textwrap.fill(
    "Other arguments are Beam pipeline options: --runner (FnApiRunner by default; dask with "
    "--dask_address HOST:PORT for a Dask cluster; dataflow, flink, ...), --direct_num_workers, "
    "--direct_running_mode; see the README's \"Running on a cluster\" and "
    + BEAM_OPTIONS_URL, width=79, break_on_hyphens=False, break_long_words=False)


def normalize(beam_args):
    """``beam_args`` with snm's short runner names and option aliases spelled as Beam's."""
    out, args = [], list(beam_args)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        name = OPTION_ALIASES.get(name, name)
        if name == "--runner":
            if not eq and i + 1 < len(args):
                value, i = args[i + 1], i + 1
            value = RUNNER_NAMES.get(value.lower(), value)
            out.append(f"--runner={value}")
        else:
            out.append(name + eq + value if eq else name)
        i += 1
    return out


def _beam_parser(dask=False):
    """Beam's parser of every registered pipeline option; with ``dask``, the Dask
    runner's too (importing it, and Dask, takes a third of a second: only when asked)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser
    if dask:
        try:  # registers DaskOptions, when apache-beam[dask] is installed
            import apache_beam.runners.dask.dask_runner  # noqa: F401
        except ImportError:
            pass
    parser = _BeamArgumentParser(allow_abbrev=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # as PipelineOptions.get_all_options does
    return parser


def _option_strings(parser):
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def check_options(beam_args, snm_parser=None):
    """Raise :class:`SnmInputError` for an argument neither snm nor Beam knows.

    ``beam_args`` are what ``snm_parser`` (the stage's own) left over; the
    error names the closest option of either parser.
    """
    args = normalize(beam_args)
    beam = _beam_parser()
    _, unknown = beam.parse_known_args(args)
    if unknown:  # perhaps the Dask runner's options
        beam = _beam_parser(dask=True)
        _, unknown = beam.parse_known_args(args)
    if not unknown:
        return
    names = _option_strings(beam) + (_option_strings(snm_parser) if snm_parser else [])
    names += list(OPTION_ALIASES)
    arg = next((a for a in unknown if a.startswith("-")), unknown[0])
    flag = arg.split("=", 1)[0]
    if not flag.startswith("-"):
        raise SnmInputError(f"unexpected argument {arg!r} (options are --name value)")
    close = difflib.get_close_matches(flag, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else \
        f"; see --help (snm's options) and {BEAM_OPTIONS_URL} (Beam's)"
    raise SnmInputError(f"unknown option {flag}{hint}")


def runner_name(options):
    """The runner's class name (``FnApiRunner`` when none is given)."""
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.runner import _RUNNER_MAP
    name = options.view_as(StandardOptions).runner or "FnApiRunner"
    if not isinstance(name, str):
        return type(name).__name__
    full = _RUNNER_MAP.get(name.lower(), _RUNNER_MAP.get(name.lower() + "runner", name))
    return full.rsplit(".", 1)[-1]


def kind(options):
    """``"local"``, ``"dask"`` or ``"cluster"`` (see the module's docstring)."""
    name = runner_name(options)
    if name in LOCAL_RUNNERS:
        return "local"
    return "dask" if name == "DaskRunner" else "cluster"


def usable_cpus():
    """The CPUs this process may run on (its affinity, which a container or ``taskset``
    may narrow), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def parallelism(options):
    """How many workers process a stage's elements at once (readers per text file).

    Local runners: ``--direct_num_workers`` (0: the CPUs); Dask: the
    partitions of each collection (:func:`prepare` sets them to the cluster's
    worker threads); other runners: ``--num_workers`` or
    ``--max_num_workers`` when given, else 1 (one reader per file: give such a
    runner many files).
    """
    from apache_beam.options.pipeline_options import DirectOptions, WorkerOptions
    which = kind(options)
    if which == "local":
        workers = options.view_as(DirectOptions).direct_num_workers
        return workers if workers > 0 else usable_cpus()
    if which == "dask":
        from apache_beam.runners.dask.dask_runner import DaskOptions
        return options.view_as(DaskOptions).npartitions or 1
    workers = options.view_as(WorkerOptions)
    return max(workers.num_workers or 0, workers.max_num_workers or 0, 1)


def prepare(beam_args, shared_paths=()):
    """Beam arguments ready for a stage's pipeline; checks what the runner needs.

    Dask: the scheduler must answer; unless ``--dask_npartitions`` is given
    each collection gets one partition per worker thread (Beam's default puts
    up to 128 elements in one partition, so a stage's few dozen buckets would
    run on one worker); every worker must see each of ``shared_paths`` (the
    stage's output and scratch directories), or the stage is refused.
    Dataflow: a local path in ``shared_paths`` is refused (its workers are
    other machines).  Other runners (Flink, Spark, portable) may share a mount
    with this machine, which cannot be checked from here (launch/flink.sh).
    """
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
    args = normalize(beam_args)
    options = PipelineOptions(args)
    which = kind(options)
    if which == "local":
        if options.view_as(DirectOptions).direct_running_mode == "multi_processing":
            # Its workers are Python processes started here, the working directory
            # first on their path: refused now, not in every worker.
            native.refuse_shadowing_tree(os.getcwd())
        return args
    if which == "cluster":
        if runner_name(options) in REMOTE_ONLY_RUNNERS:
            for path in shared_paths:
                if not storage.is_remote(path):
                    raise SnmInputError(
                        f"{path} is a local path, but the {runner_name(options)} runs its "
                        "workers on other machines: give the output directory in object "
                        "storage (gs://, s3://) that every worker can write")
        return args
    return _prepare_dask(args, options, shared_paths)


def _prepare_dask(args, options, shared_paths):
    from apache_beam.runners.dask.dask_runner import DaskOptions
    dask_options = options.view_as(DaskOptions)
    if not dask_options.address and not dask_options.scheduler_file:
        raise SnmInputError("--runner dask needs --dask_address HOST:PORT (a running "
                            "scheduler; launch/dask.sh starts one with its workers)")
    import distributed
    target = dask_options.address or None
    try:
        client = distributed.Client(target, scheduler_file=dask_options.scheduler_file,
                                    timeout=dask_options.timeout if isinstance(
                                        dask_options.timeout, int) else 20)
    except (OSError, TimeoutError) as e:
        raise SnmInputError(f"cannot reach the Dask scheduler "
                            f"{target or dask_options.scheduler_file}: {e}") from None
    try:
        threads = sum(client.nthreads().values())
        if not threads:
            raise SnmInputError(f"the Dask scheduler {client.scheduler.address} has no "
                                "workers; start some (dask worker ADDRESS)")
        for path in shared_paths:
            _check_visible(client, path)
    finally:
        client.close()
    if not dask_options.npartitions and not dask_options.partition_size:
        args = args + [f"--dask_npartitions={threads}"]
    return args


def _check_visible(client, path):
    """Every Dask worker reads back a token written to ``path`` here, or SnmInputError."""
    storage.makedirs(path)
    probe = storage.join(path, f".snm-probe-{uuid.uuid4().hex}")
    token = uuid.uuid4().hex
    storage.write_text(token, probe)
    try:
        seen = client.run(_reads_token, probe, token)
    finally:
        storage.remove_file(probe)
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if blind:
        raise SnmInputError(
            f"{path} is not visible from Dask worker(s) {', '.join(blind)} (a path local to "
            "this machine?): give --out in object storage (s3://, gs://) or on a mount every "
            "worker shares")


def _reads_token(path, token):
    """On a worker: does ``path`` hold ``token``?"""
    try:
        return storage.read_text(path) == token
    except OSError:
        return False
