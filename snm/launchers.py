"""Beam pipeline options for each way of running snm: local, Dataflow, Flink, portable, Dask.

Each function takes explicit keyword arguments, checks them and returns the
list of ``--flag=value`` strings to append to a Beam stage's command line
(``snm count``, ``snm join``, ``snm apply``, ``snm train``).  The functions
neither read the environment nor touch files, and nothing here imports Beam:
the scripts in ``launch/`` take their settings from environment variables and
call::

    python -m snm.launchers local --workers 2
    python -m snm.launchers dataflow --project P --region R --temp_location gs://B/tmp \\
        --setup_file /path/to/setup.py [--job_name J] [--max_workers N] [--machine_type T]
    python -m snm.launchers flink --flink_master HOST:PORT [--parallelism N] \\
        [--environment_type EXTERNAL] [--environment_config HOST:PORT] [--flink_version 1.19]
    python -m snm.launchers portable --job_endpoint HOST:PORT|embed --worker_pool HOST:PORT
    python -m snm.launchers dask --address HOST:PORT

which print the options one per line (exit status 2 and the reason on stderr
for bad input).

>>> local_options(workers=4)
['--runner=FnApiRunner', '--direct_running_mode=multi_processing', '--direct_num_workers=4']
>>> portable_options(job_endpoint="embed", worker_pool="localhost:50000")[-1]
'--environment_config=localhost:50000'
"""

import argparse
import os
import re
import sys

#: ``--direct_running_mode`` values of Beam's FnApiRunner.
RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")
#: ``--environment_type`` values of the portable runners (Flink, PortableRunner).
ENVIRONMENT_TYPES = ("EXTERNAL", "DOCKER", "PROCESS", "LOOPBACK")
#: Where a Beam SDK worker pool listens by convention: the ``--worker_pool``
#: sidecar container of a Flink TaskManager pod on Kubernetes.
DEFAULT_WORKER_POOL = "localhost:50000"

_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
                        r":(\d{1,5})$")
_PROJECT = re.compile(r"^(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+$")
_JOB_NAME = re.compile(r"^[a-z](?:[-a-z0-9]*[a-z0-9])?$")
_MACHINE_TYPE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_GCS_PATH = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](?:/.*)?$")
_FLINK_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
_FLINK_MASTER = re.compile(r"^(?:\[auto\]|\[local\]|(?:https?://)?[A-Za-z0-9.-]+:\d{1,5}/?)$")


def _host_port(value, what):
    """``value`` if it is ``host:port`` with a port in 1..65535, else ValueError."""
    match = _HOST_PORT.match(value) if isinstance(value, str) else None
    if not match or not 1 <= int(match.group(1)) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT (e.g. localhost:50000), got {value!r}")
    return value


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def _one_line(value, what):
    """Options are printed one per line: a value must not contain a line break."""
    if not isinstance(value, str) or not value or "\n" in value or "\r" in value:
        raise ValueError(f"{what} must be a non-empty single-line string, got {value!r}")
    return value


def local_options(*, workers=2, mode="multi_processing"):
    """Options for the local runner: Beam's FnApiRunner with several workers.

    The FnApiRunner is the engine behind the DirectRunner; naming it directly
    avoids the DirectRunner's attempt to download the Prism runner, which
    fails or stalls without network access (DESIGN.md, "Runners").
    ``multi_processing`` runs the workers as separate processes, so every
    DoFn and its settings are pickled as on a cluster.

    Parameters
    ----------
    workers : int, optional
        Number of worker processes or threads (``--direct_num_workers``).
    mode : {"multi_processing", "multi_threading", "in_memory"}, optional
        ``--direct_running_mode``.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        If ``workers`` is not a positive integer or ``mode`` is unknown.

    Examples
    --------
    >>> local_options(workers=2, mode="in_memory")
    ['--runner=FnApiRunner', '--direct_running_mode=in_memory', '--direct_num_workers=2']
    """
    _positive_int(workers, "workers")
    if mode not in RUNNING_MODES:
        raise ValueError(f"mode must be one of {', '.join(RUNNING_MODES)}, got {mode!r}")
    return ["--runner=FnApiRunner", f"--direct_running_mode={mode}",
            f"--direct_num_workers={workers}"]


def dataflow_options(*, project, region, temp_location, setup_file, job_name=None,
                     max_workers=None, machine_type=None):
    """Options for Google Cloud Dataflow.

    Workers get the ``snm`` package (``snm_core``, ``pipelines``) through
    ``--setup_file``: Beam builds a source distribution of it and installs it
    on every worker, as Beam's ``juliaset`` example does.
    ``--save_main_session`` is deliberately not used: every DoFn lives in an
    importable module of the package, so nothing of ``__main__`` has to be
    pickled (and pickling the command line's main session would only add
    state the workers must not depend on).

    Parameters
    ----------
    project : str
        Google Cloud project id (``my-project`` or ``example.com:my-project``).
    region : str
        Dataflow region, e.g. ``europe-west1``.
    temp_location : str
        ``gs://BUCKET/path`` for Dataflow's temporary and staging files.
    setup_file : str
        Path of the package's ``setup.py`` (the file must be named ``setup.py``).
    job_name : str, optional
        Dataflow job name: lower-case letters, digits and hyphens, starting
        with a letter.  Beam makes one up when it is omitted.
    max_workers : int, optional
        Upper bound for autoscaling (``--max_num_workers``).
    machine_type : str, optional
        Worker machine type, e.g. ``n2-highmem-4`` (``--machine_type``).

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        For a malformed project, region, job name or machine type, a
        ``temp_location`` that is not ``gs://...``, a ``setup_file`` not
        named ``setup.py``, or a non-positive ``max_workers``.

    Examples
    --------
    >>> dataflow_options(project="my-project", region="europe-west1",
    ...                  temp_location="gs://my-bucket/tmp", setup_file="/src/snm/setup.py")
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--runner=DataflowRunner', '--project=my-project', '--region=europe-west1',
     '--temp_location=gs://my-bucket/tmp', '--setup_file=/src/snm/setup.py']
    """
    if not isinstance(project, str) or not _PROJECT.match(project):
        raise ValueError("project must be a Google Cloud project id (6-30 lower-case letters, "
                         f"digits or hyphens, starting with a letter), got {project!r}")
    if not isinstance(region, str) or not _REGION.match(region):
        raise ValueError(f"region must be a Dataflow region such as europe-west1, got {region!r}")
    if not isinstance(temp_location, str) or not _GCS_PATH.match(temp_location):
        raise ValueError("temp_location must be a Cloud Storage path gs://BUCKET[/PATH] "
                         f"(Dataflow stages files there), got {temp_location!r}")
    _one_line(setup_file, "setup_file")
    if os.path.basename(setup_file) != "setup.py":
        raise ValueError(f"setup_file must be the package's setup.py, got {setup_file!r}")
    options = ["--runner=DataflowRunner", f"--project={project}", f"--region={region}",
               f"--temp_location={temp_location}", f"--setup_file={setup_file}"]
    if job_name is not None:
        if not isinstance(job_name, str) or not _JOB_NAME.match(job_name):
            raise ValueError("job_name must be lower-case letters, digits and hyphens, starting "
                             f"with a letter and not ending with a hyphen, got {job_name!r}")
        options.append(f"--job_name={job_name}")
    if max_workers is not None:
        options.append(f"--max_num_workers={_positive_int(max_workers, 'max_workers')}")
    if machine_type is not None:
        if not isinstance(machine_type, str) or not _MACHINE_TYPE.match(machine_type):
            raise ValueError(f"machine_type must look like n2-standard-4, got {machine_type!r}")
        options.append(f"--machine_type={machine_type}")
    return options


def _environment(environment_type, environment_config):
    """``--environment_type`` / ``--environment_config`` options of a portable runner."""
    if environment_type not in ENVIRONMENT_TYPES:
        raise ValueError(f"environment_type must be one of {', '.join(ENVIRONMENT_TYPES)}, "
                         f"got {environment_type!r}")
    options = [f"--environment_type={environment_type}"]
    if environment_type == "EXTERNAL":
        options.append("--environment_config="
                       + _host_port(environment_config, "environment_config (the SDK worker "
                                                        "pool address)"))
    elif environment_type == "LOOPBACK":
        if environment_config is not None:
            raise ValueError("environment_config must be omitted with LOOPBACK (the workers run "
                             "in the launching process)")
    elif environment_type == "PROCESS":
        if environment_config is None:
            raise ValueError('environment_config is required with PROCESS: a JSON object such '
                             'as {"command": "/opt/apache/beam/boot"}')
        options.append("--environment_config=" + _one_line(environment_config,
                                                           "environment_config"))
    elif environment_config is not None:  # DOCKER: an SDK image with snm installed
        options.append("--environment_config=" + _one_line(environment_config,
                                                           "environment_config"))
    return options


def flink_options(*, flink_master, parallelism=None, environment_type="EXTERNAL",
                  environment_config=None, flink_version=None):
    """Options for Beam's FlinkRunner against a running Flink cluster.

    The default environment is the one of Flink on Kubernetes with a Beam SDK
    worker pool: every TaskManager pod runs a sidecar container started with
    ``--worker_pool`` (an SDK image with ``snm`` installed), listening on
    ``localhost:50000`` from the TaskManager's point of view.

    Parameters
    ----------
    flink_master : str
        Address of the Flink REST endpoint (JobManager), ``HOST:PORT``,
        ``http://HOST:PORT``, or ``[local]`` / ``[auto]``.
    parallelism : int, optional
        Default parallelism of the Flink job (``--parallelism``).
    environment_type : {"EXTERNAL", "DOCKER", "PROCESS", "LOOPBACK"}, optional
        How the Flink workers run Python code.
    environment_config : str or None, optional
        EXTERNAL: the worker pool's ``HOST:PORT`` (None: ``localhost:50000``,
        the TaskManager's sidecar); DOCKER: the SDK container image (omit for Beam's
        own image, which lacks ``snm``); PROCESS: the JSON command of the SDK
        harness; LOOPBACK: must be None.
    flink_version : str, optional
        The cluster's Flink version, e.g. ``1.19`` (``--flink_version``): the
        Beam job server that translates the pipeline must match it.  Beam
        checks it against the versions it publishes a job server for
        (Beam 2.77: 1.19, 1.20, 2.0, 2.1, 2.2; default the newest).

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        For a malformed ``flink_master`` or ``flink_version``, a non-positive
        ``parallelism``, an unknown ``environment_type`` or a config that does
        not fit it.

    Examples
    --------
    >>> flink_options(flink_master="flink-jobmanager:8081", parallelism=8)
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--runner=FlinkRunner', '--flink_master=flink-jobmanager:8081', '--parallelism=8',
     '--environment_type=EXTERNAL', '--environment_config=localhost:50000']
    """
    if not isinstance(flink_master, str) or not _FLINK_MASTER.match(flink_master):
        raise ValueError("flink_master must be HOST:PORT of the Flink REST endpoint (e.g. "
                         f"flink-jobmanager:8081), [local] or [auto], got {flink_master!r}")
    if environment_type == "EXTERNAL" and environment_config is None:
        environment_config = DEFAULT_WORKER_POOL
    options = ["--runner=FlinkRunner", f"--flink_master={flink_master}"]
    if flink_version is not None:
        if not isinstance(flink_version, str) or not _FLINK_VERSION.match(flink_version):
            raise ValueError(f"flink_version must be MAJOR.MINOR such as 1.19, got "
                             f"{flink_version!r}")
        options.append(f"--flink_version={flink_version}")
    if parallelism is not None:
        options.append(f"--parallelism={_positive_int(parallelism, 'parallelism')}")
    return options + _environment(environment_type, environment_config)


def portable_options(*, job_endpoint, worker_pool):
    """Options for the PortableRunner with an external SDK worker pool.

    ``job_endpoint`` is a Beam job service (a Flink or Spark job server,
    ``HOST:8099``) or ``embed``, which runs Beam's own job service inside the
    launching process: with a local worker pool (``python -m
    apache_beam.runners.worker.worker_pool_main --service_port=PORT``) that
    is the portable path that works offline.

    Parameters
    ----------
    job_endpoint : str
        ``HOST:PORT`` of a job service, or ``embed``.
    worker_pool : str
        ``HOST:PORT`` of the SDK worker pool, as the runner's workers see it.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        If an address is not ``HOST:PORT`` (or ``embed`` for the endpoint).

    Examples
    --------
    >>> portable_options(job_endpoint="localhost:8099", worker_pool="localhost:50000")
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--runner=PortableRunner', '--job_endpoint=localhost:8099',
     '--environment_type=EXTERNAL', '--environment_config=localhost:50000']
    """
    if job_endpoint != "embed":
        _host_port(job_endpoint, "job_endpoint (or 'embed')")
    return (["--runner=PortableRunner", f"--job_endpoint={job_endpoint}"]
            + _environment("EXTERNAL", worker_pool))


def dask_options(*, address):
    """Options for Beam's DaskRunner against a running Dask scheduler.

    Every Dask worker needs ``snm`` installed and must see the run directory
    under the same path (object storage, or a shared mount); each stage
    checks the latter before it starts.

    Parameters
    ----------
    address : str
        The scheduler's ``HOST:PORT`` or ``tcp://HOST:PORT``.

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        If ``address`` is not ``HOST:PORT``.

    Examples
    --------
    >>> dask_options(address="tcp://10.0.0.5:8786")
    ['--runner=dask', '--dask_address=tcp://10.0.0.5:8786']
    """
    bare = address[len("tcp://"):] if isinstance(address, str) and \
        address.startswith("tcp://") else address
    _host_port(bare, "address")
    return ["--runner=dask", f"--dask_address={address}"]


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m snm.launchers",
        description="Print the Beam options of a way of running snm, one per line.")
    sub = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    local = sub.add_parser("local", help="FnApiRunner (the DirectRunner's engine) on this "
                                         "machine")
    local.add_argument("--workers", type=int, default=2)
    local.add_argument("--mode", choices=RUNNING_MODES, default="multi_processing")

    dataflow = sub.add_parser("dataflow", help="Google Cloud Dataflow")
    dataflow.add_argument("--project", required=True)
    dataflow.add_argument("--region", required=True)
    dataflow.add_argument("--temp_location", required=True, help="gs://BUCKET/PATH")
    dataflow.add_argument("--setup_file", required=True, help="the package's setup.py")
    dataflow.add_argument("--job_name")
    dataflow.add_argument("--max_workers", type=int)
    dataflow.add_argument("--machine_type")

    flink = sub.add_parser("flink", help="FlinkRunner against a Flink cluster")
    flink.add_argument("--flink_master", required=True, help="HOST:PORT of the Flink REST API")
    flink.add_argument("--parallelism", type=int)
    flink.add_argument("--flink_version", help="the cluster's Flink version, e.g. 1.19")
    flink.add_argument("--environment_type", choices=ENVIRONMENT_TYPES, default="EXTERNAL")
    flink.add_argument("--environment_config", default=None,
                       help=f"default for EXTERNAL: {DEFAULT_WORKER_POOL}")

    portable = sub.add_parser("portable", help="PortableRunner with an SDK worker pool")
    portable.add_argument("--job_endpoint", required=True, help="HOST:PORT or embed")
    portable.add_argument("--worker_pool", required=True, help="HOST:PORT")

    dask = sub.add_parser("dask", help="DaskRunner against a Dask scheduler")
    dask.add_argument("--address", required=True, help="the scheduler's HOST:PORT")
    return parser


def main(argv=None):
    """Print the options of ``argv[0]`` (local, dataflow, flink, portable, dask), one a line."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.kind == "local":
            options = local_options(workers=args.workers, mode=args.mode)
        elif args.kind == "dataflow":
            setup_file = os.path.abspath(args.setup_file)
            if not os.path.isfile(setup_file):
                raise ValueError(f"setup_file {args.setup_file}: no such file")
            options = dataflow_options(project=args.project, region=args.region,
                                       temp_location=args.temp_location,
                                       setup_file=setup_file, job_name=args.job_name,
                                       max_workers=args.max_workers,
                                       machine_type=args.machine_type)
        elif args.kind == "flink":
            options = flink_options(flink_master=args.flink_master,
                                    parallelism=args.parallelism,
                                    environment_type=args.environment_type,
                                    environment_config=args.environment_config,
                                    flink_version=args.flink_version)
        elif args.kind == "dask":
            options = dask_options(address=args.address)
        else:
            options = portable_options(job_endpoint=args.job_endpoint,
                                       worker_pool=args.worker_pool)
    except ValueError as e:
        parser.error(str(e))  # exit status 2
    print("\n".join(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
