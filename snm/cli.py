"""The ``snm`` command: one subcommand per stage.

Exit status: 0 on success, 2 for bad usage or input, 1 for a stage that could
not finish (its output did not add up, or a resource ran out); the reason is
one line on stderr.
Beam is imported only by the subcommands that run a pipeline, so ``snm
features`` and ``snm eval`` start quickly.
"""

import argparse
import collections
import gc
import importlib
import importlib.util
import logging
import os
import sys

from snm_core.io.errors import OUT_OF_MEMORY, RESOURCE_ERRNOS, SnmInputError, SnmStageError

#: Subcommands that are whole Beam pipelines: name -> module with ``main(argv)``.
PIPELINES = {
    "vocab": "pipelines.vocab",
    "count": "pipelines.count",
    "join": "pipelines.join",
    "apply": "pipelines.apply",
    "prune": "pipelines.prune",
}
#: Single-worker subcommands: name -> module with ``main(argv)``.
TOOLS = {
    "fit": "snm.fit_cmd",
    "eval": "snm.eval_cmd",
    "score": "snm.eval_cmd",
    "export-arpa": "snm.export_cmd",
    "compact": "snm.compact_cmd",
    "train": "snm.train_cmd",
    "query": "snm.commands.query",
    "rescore": "snm.commands.rescore",
}


def features_main(argv):
    """``snm features``: print each target's features in the paper's notation."""
    from snm_core.text.config import load_config
    from snm_core.text.features import FeatureExtractor
    from snm_core.text.tokenize import tokenize
    from snm_core.text.vocab import Vocabulary

    parser = argparse.ArgumentParser(
        prog="snm features",
        description="Print the events and features of sentences (paper notation), or, "
                    "with --input, how many features of each type a text yields.")
    parser.add_argument("--config", required=True, help="preset (5gram, skip10gram, "
                        "skip5gram) or configuration file")
    parser.add_argument("--tags", default="", help="comma-separated corpus tags: every "
                        "feature is shown once per tag, as for held-out text")
    parser.add_argument("--input", help="a text file (one sentence a line): print a "
                        "per-type summary instead of the features")
    parser.add_argument("sentence", nargs="*", help="sentence(s) to show")
    args = parser.parse_args(argv)
    if not args.sentence and not args.input:
        parser.error("give a sentence or --input FILE")
    config = load_config(args.config)
    tags = tuple(t for t in args.tags.split(",") if t) or ("",)
    if args.input:
        _summarise_features(args.input, config, tags)
        return 0
    words = sorted({w for s in args.sentence for w in s.split()})
    vocab = Vocabulary(w for w in words if w not in ("<S>", "</S>", "<UNK>"))
    extractor = FeatureExtractor(config, tags)
    batch, _, _ = tokenize(args.sentence, vocab)
    events = extractor.extract(batch)
    order = events.event.argsort(kind="stable")
    words_of = events.context_words()
    starts = collections.Counter(events.event.tolist())
    i = 0
    for e in range(events.num_events):
        pairs = order[i:i + starts[e]]
        i += starts[e]
        rendered = [extractor.render(events.type[p], words_of[p], vocab) for p in pairs]
        print(f"{vocab.word(events.target[e])}\t" + "  ".join(rendered))
    return 0


def _summarise_features(path, config, tags):
    import numpy as np

    from snm_core.io.textfile import read_lines
    from snm_core.text.features import FeatureExtractor
    from snm_core.text.tokenize import tokenize
    from snm_core.text.vocab import Vocabulary

    lines = read_lines(path)
    words = sorted({w for line in lines if line is not None for w in line.split()}
                   - {"<S>", "</S>", "<UNK>"})
    vocab = Vocabulary(words)
    extractor = FeatureExtractor(config, tags)
    batch, _, stats = tokenize(lines, vocab)
    events = extractor.extract(batch)
    print(f"{path}: {stats.sentences} sentences, {stats.tokens} words, "
          f"{events.num_events} events, {events.num_pairs} features "
          f"({events.num_pairs / max(events.num_events, 1):.1f} per event)")
    print(f"{'feature type':<28}{'features':>12}{'distinct':>12}")
    for type_id in range(extractor.num_types):
        keys = events.key[events.type == type_id]
        if len(keys):
            distinct = int(np.count_nonzero(np.diff(np.sort(keys))) + 1)
            print(f"{extractor.type_name(type_id):<28}{len(keys):>12}{distinct:>12}")


def synth_main(argv):
    """``snm synth``: write the deterministic synthetic corpus (train/dev/test)."""
    from snm_core.text import synthetic

    parser = argparse.ArgumentParser(prog="snm synth",
                                     description="Write a synthetic train/dev/test corpus.")
    parser.add_argument("--out", required=True, help="directory for train.txt, dev.txt, test.txt")
    parser.add_argument("--train_sentences", type=int, default=20000)
    parser.add_argument("--heldout_sentences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in synthetic.write_corpus(args.out, args.train_sentences, args.heldout_sentences,
                                       args.heldout_sentences, args.seed):
        print(path)
    return 0


COMMANDS = {"features": features_main, "synth": synth_main}


class _QuietFilter(logging.Filter):
    """Drops log records that would put a traceback or noise before snm's own one line.

    * A worker's :class:`SnmInputError`/:class:`SnmStageError`, full disk or
      exhausted memory: Beam logs it with its traceback (and, from worker
      processes, as text) before the pipeline fails; the CLI then prints its
      one line.
    * Beam's import-time warning that the BigQuery client libraries are
      missing (snm uses none).
    """

    MARKERS = ("SnmInputError: ", "SnmStageError: ", "MemoryError: ",
               "apitools not found, and bigquery client libraries") + tuple(
        f"[Errno {number}] " for number in RESOURCE_ERRNOS)

    def filter(self, record):
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (SnmInputError, SnmStageError, MemoryError)):
            return False
        if isinstance(error, OSError) and error.errno in RESOURCE_ERRNOS:
            return False
        message = record.getMessage()
        return not any(marker in message for marker in self.MARKERS)


def configure_logging():
    """Warnings and errors on stderr, as Beam's default, through :class:`_QuietFilter`.

    Called before Beam is imported: its first warning would otherwise install
    the root handler itself (``logging.basicConfig``)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > logging.WARNING:
            root.setLevel(logging.WARNING)
    for handler in root.handlers:
        if not any(isinstance(f, _QuietFilter) for f in handler.filters):
            handler.addFilter(_QuietFilter())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    available = sorted(set(COMMANDS) | {k for k, v in {**PIPELINES, **TOOLS}.items()
                                        if importlib.util.find_spec(v) is not None})
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: snm COMMAND [options]   (snm COMMAND --help for its options)\n"
              "commands: " + ", ".join(available))
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command in COMMANDS:
            return COMMANDS[command](rest)
        module = PIPELINES.get(command) or TOOLS.get(command)
        if module is None or command not in available:
            print(f"snm: unknown command {command!r}; commands: {', '.join(available)}",
                  file=sys.stderr)
            return 2
        configure_logging()
        entry = importlib.import_module(module)
        if command in PIPELINES:
            entry.main(rest)
            return 0
        return entry.main([command] + rest if module == "snm.eval_cmd" else rest) or 0
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
        from snm_core.io.storage import resource_error_message
        message = resource_error_message(e)
        if message is None:
            raise
        print(f"snm {command}: failed: {message}", file=sys.stderr)
        return 1


def entry():
    """The console script (and ``python -m snm``): :func:`main`, then a quick exit.

    At exit the interpreter runs full garbage collections over everything still
    alive; after a pipeline that is Beam's ~100K objects, 0.25 s at the end of
    a kernel count that takes 6 s, to free memory the process is about to give
    back anyway.  ``gc.freeze()`` puts them out of the collector's reach, and
    the exit takes 0.03 s.  Only here, not in :func:`main`: a process that goes
    on after ``main()`` (the tests) still wants its collections.
    """
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(entry())
