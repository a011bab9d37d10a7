"""The ``snm`` command: one subcommand per stage, each a module of :mod:`snm.commands`.

Exit status: 0 on success, 2 for bad usage or input, 1 for a stage that could
not finish (its output did not add up, or a resource ran out); the reason is
one line on stderr.
Beam is imported only by the subcommands that run a pipeline, so ``snm
features`` and ``snm eval`` start quickly.
"""

import contextlib
import gc
import importlib
import logging
import os
import signal
import sys
import threading

from snm import plot
from snm_core.io.errors import OUT_OF_MEMORY, RESOURCE_ERRNOS, SnmInputError, SnmStageError

#: Exit status of an interrupted command (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130

#: Every subcommand: name -> its module in ``snm.commands`` (``main(argv)``, all its argparse).
COMMANDS = {
    "vocab": "vocab", "count": "count", "join": "join", "fit": "fit", "apply": "apply",
    "select": "select", "prune": "prune", "train": "train", "eval": "eval", "score": "score",
    "export-arpa": "export_arpa", "compact": "compact", "validate": "validate",
    "features": "features", "synth": "synth", "sample": "sample", "query": "query",
    "rescore": "rescore",
}

#: What each command does, in one line of ``snm --help``.
SUMMARIES = {
    "train": "all the stages, from text to an evaluated model; resumable",
    "vocab": "word counts and the vocabulary of training text (Beam)",
    "count": "C(f,w), C(f,*) and continuation counts of training text (Beam)",
    "select": "a count thresholded again for a model of a size; skip-gram models (Beam)",
    "join": "the held-out events and the count rows they touch, small M (Beam)",
    "fit": "the adjustment's weights, theta, learnt on small M",
    "apply": "the adjusted model: M of every link, as a model directory (Beam)",
    "prune": "a model pruned to a number of links, or by a threshold (Beam)",
    "eval": "the perplexity of a text (KenLM query's summary)",
    "score": "each line's log10 probability, a line for each",
    "query": "scores line by line, answered at once (KenLM's query)",
    "rescore": "the best hypotheses of an n-best list (SRILM's ngram -nbest)",
    "sample": "text drawn from a model (SRILM's ngram -gen)",
    "export-arpa": "an n-gram model as an ARPA file",
    "compact": "a model's scoring arrays in another layout, or as one directory",
    "validate": "check stage directories, or a whole run",
    "features": "the features of sentences (the paper's notation), or of a text",
    "synth": "write the synthetic train/dev/test corpus",
}
#: The headings of ``snm --help`` and their commands.
GROUPS = (("the whole chain", ("train",)),
          ("its stages, one at a time", ("vocab", "count", "select", "join", "fit", "apply",
                                         "prune")),
          ("using a model", ("eval", "score", "query", "rescore", "sample", "export-arpa",
                             "compact", "validate")),
          ("inspecting", ("features", "synth")))


class _QuietFilter(logging.Filter):
    """Drops log records that would put a traceback or noise before snm's own one line.

    * A worker's :class:`SnmInputError`/:class:`SnmStageError`, full disk or
      exhausted memory: Beam logs it with its traceback (and, from worker
      processes, as text) before the pipeline fails; the CLI then prints its
      one line.
    * Beam's import-time warning that the BigQuery client libraries are
      missing (snm uses none).
    * Everything after Ctrl-C: the workers the interrupt stopped fail in their
      own ways (a scratch file removed under them, a closed queue); the CLI says
      in one line that the command was interrupted.
    """

    #: Set when the user interrupts (:func:`interrupt`).
    interrupted = False

    MARKERS = ("SnmInputError: ", "SnmStageError: ", "MemoryError: ",
               "apitools not found, and bigquery client libraries") + tuple(
        f"[Errno {number}] " for number in RESOURCE_ERRNOS)

    def filter(self, record):
        if _QuietFilter.interrupted:
            return False
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (SnmInputError, SnmStageError, MemoryError)):
            return False
        if isinstance(error, OSError) and error.errno in RESOURCE_ERRNOS:
            return False
        message = record.getMessage()
        return not any(marker in message for marker in self.MARKERS)


class _AboveTheBar(logging.StreamHandler):
    """On a terminal: each record is written on a line of its own above the progress bar
    (tqdm clears the bar, writes, and draws it again), not into the bar's line."""

    def emit(self, record):
        try:
            from tqdm import tqdm
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # as logging.StreamHandler does
            self.handleError(record)


def configure_logging():
    """Warnings and errors on stderr, as Beam's default, through :class:`_QuietFilter`.

    Called before Beam is imported: its first warning would otherwise install
    the root handler itself (``logging.basicConfig``)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = _AboveTheBar() if _stderr_is_terminal() else logging.StreamHandler()
        handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > logging.WARNING:
            root.setLevel(logging.WARNING)
    for handler in root.handlers:
        if not any(isinstance(f, _QuietFilter) for f in handler.filters):
            handler.addFilter(_QuietFilter())


def _stderr_is_terminal():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


#: Beam's S3 filesystem: Beam's first import loads every filesystem it has, S3's with
#: boto3 where that is installed (a sixth of a second a process).
BEAM_S3_FILESYSTEM = "apache_beam.io.aws.s3filesystem"


@contextlib.contextmanager
def _beam_without_s3():
    """Beam, if imported inside, skips its S3 filesystem (it skips a filesystem whose
    import fails): the commands read and write through pyarrow.fs, never Beam's
    filesystems.  Code that imports it afterwards gets it as usual."""
    if "apache_beam" in sys.modules or BEAM_S3_FILESYSTEM in sys.modules:
        yield
        return
    sys.modules[BEAM_S3_FILESYSTEM] = None
    try:
        yield
    finally:
        if sys.modules.get(BEAM_S3_FILESYSTEM, False) is None:
            del sys.modules[BEAM_S3_FILESYSTEM]


def usage():
    """``snm --help``: how to call it, and every command with its :data:`SUMMARIES` line."""
    width = max(map(len, COMMANDS)) + 2
    lines = ["usage: snm COMMAND [options]   (snm COMMAND --help for its options; "
             "snm --version)"]
    for heading, commands in GROUPS:
        lines += ["", f"{heading}:"] + [f"  {c:<{width}}{SUMMARIES[c]}" for c in commands]
    return "\n".join(lines)


def main(argv=None, freeze_imports=False):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        # Without a command this is a usage error: the list goes where errors go.
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in ("--version", "-V"):
        from snm_core import __version__
        print(f"snm {__version__}")
        return 0
    if command not in COMMANDS:
        print(f"snm: unknown command {command!r}; commands: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    try:
        configure_logging()
        # Before any thread starts: the threads a Beam runner starts share the heaps.
        from snm_core.io.memory import limit_arenas
        limit_arenas()
        if command == "train" and not {"-h", "--help"} & set(rest):
            plot.start_helper()  # it imports matplotlib while this process imports Beam
        with _beam_without_s3():
            module = importlib.import_module(f"snm.commands.{COMMANDS[command]}")
        if freeze_imports:  # they live as long as the process (see entry())
            gc.freeze()
        try:
            return module.main(rest) or 0
        finally:
            plot.stop_helper()  # a train that ended before its eval stage
    except KeyboardInterrupt as e:
        _QuietFilter.interrupted = True
        stage = getattr(e, "stage", None)
        where = f" during {stage}" if stage and stage != command else ""
        print(f"snm {command}: interrupted{where}; run the same command again to go on "
              "(what was finished is kept)", file=sys.stderr, flush=True)
        return INTERRUPTED
    except SnmInputError as e:
        print(f"snm {command}: error: {e}", file=sys.stderr)
        return 2
    except SnmStageError as e:
        print(f"snm {command}: failed: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"snm {command}: failed: {OUT_OF_MEMORY}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`snm score ... | head`): stop quietly, as Unix tools do;
        # stdout is pointed at /dev/null so the interpreter's final flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except OSError as e:
        from snm_core.io.errors import resource_error_message
        message = resource_error_message(e)
        if message is None:
            raise
        print(f"snm {command}: failed: {message}", file=sys.stderr)
        return 1


def entry():
    """The console script (and ``python -m snm``): :func:`main`, then a quick exit.

    At exit the interpreter runs full garbage collections over everything still
    alive (after a pipeline, Beam's many objects), to free memory the process
    is about to give back anyway.  ``gc.freeze()`` puts them out of the
    collector's reach, as are the command's imports, which full collections during
    the run (a quarter of a second in a kernel ``snm train``) would walk each time.
    Only here, not in :func:`main`: a process that goes on after ``main()`` (the
    tests) still wants its collections.
    """
    watch_for_interrupt()
    status = main(freeze_imports=True)
    if status == INTERRUPTED:
        # Worker threads the interrupt stopped may still be running, and Python would
        # wait for them at exit; the files they were writing are removed (os._exit runs
        # no atexit hook), and every manifest is written last.
        from snm_core.io import atomic_files
        atomic_files.remove_unfinished()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    gc.freeze()
    return status


def watch_for_interrupt():
    """Ctrl-C stops the command with one line, whatever runs it.

    A terminal sends SIGINT to every process of the foreground group: a
    multi-processing runner's workers too, each of which would print its own
    traceback.  So SIGINT is ignored here before any worker starts (a worker
    inherits that through the shell Beam starts it with, and Python then installs
    no handler of its own), and blocked, so that it stays pending for one thread
    that waits for it: that thread silences the log (:class:`_QuietFilter`) and
    interrupts the main thread with SIGUSR1, whose handler raises
    :class:`KeyboardInterrupt`.  The workers end when the runner they serve is gone.
    """
    main_thread = threading.main_thread().ident

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    def wait():
        signal.sigwait({signal.SIGINT})
        _QuietFilter.interrupted = True
        threading.excepthook = lambda args: None  # threads stopped by the interrupt
        signal.pthread_kill(main_thread, signal.SIGUSR1)

    signal.signal(signal.SIGUSR1, interrupted)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a blocked signal stays pending even so
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=wait, name="snm-interrupt", daemon=True).start()


if __name__ == "__main__":
    sys.exit(entry())
