"""What several subcommands' parsers share: the parser itself, the stage directories'
flags, training sources, the layout, and handing the rest to Beam.

Arguments are parsed here and nothing more: each value is checked once, by the
options object it fills (``CountOptions``, ``FitOptions``, ...), whose
:class:`~snm_core.io.errors.SnmInputError` names the flag.
"""

import argparse
import logging

from pipelines import runners
from snm_core.io.memory import DEFAULT_SHARE
from snm_core.io.runlock import run_lock
from snm_core.io.textfile import DEFAULT_BATCH_BYTES
from snm_core.model.compact import LAYOUT_HELP, LAYOUTS
from snm_core.stages import manifests


def parser(name, description, beam=False):
    """The parser of ``snm NAME``; a Beam stage's also lists the runner options."""
    return argparse.ArgumentParser(
        prog=f"snm {name}", description=description,
        epilog=runners.RUNNER_HELP if beam else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)


def stage_input(parser, kind, help=None, required=True, renamed_from=None):
    """``--KIND DIR``: a stage directory of that kind (:mod:`snm_core.stages.manifests`).

    ``renamed_from``: the flag's name before stage directories had one name each; still
    taken, with a warning, so that existing scripts keep working.
    """
    cls = manifests.KINDS[kind]
    parser.add_argument(f"--{kind}", required=required and not renamed_from, metavar="DIR",
                        help=help or f"{cls.WHAT} ({cls.COMMAND} --out)")
    if renamed_from:
        parser.add_argument(f"--{renamed_from}", dest=f"_renamed_{kind}",
                            help=argparse.SUPPRESS)
        parser.set_defaults(**{f"_required_{kind}": required})


def config_arguments(parser):
    """``--config`` (a preset or a file) or ``--order N`` (the plain N-gram model, KenLM's
    ``-o N``: the same as ``--config Ngram``)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", help="preset (5gram, skip10gram, skip5gram; Ngram for any "
                                        "N) or configuration file")
    group.add_argument("--order", type=int, metavar="N",
                       help="a plain N-gram model (n-grams of 0 to N-1 words before the "
                            "target): --config Ngram")


def source_arguments(parser, batch_bytes=DEFAULT_BATCH_BYTES):
    """``--train [TAG=]GLOB ...`` and ``--batch_bytes`` (default ``batch_bytes``)."""
    parser.add_argument("--train", action="append", required=True, metavar="[TAG=]GLOB",
                        help="training text (one sentence a line, plain or .gz); repeat "
                             "for several sources, each with its own TAG")
    parser.add_argument("--batch_bytes", type=int, default=batch_bytes,
                        help="text per numpy batch (default %(default)s)")


def memory_argument(parser):
    """``--memory SIZE``: the one memory budget of the stage's processes (lmplz's ``-S``)."""
    parser.add_argument("--memory", metavar="SIZE",
                        help="memory budget of each of the stage's processes, e.g. 8G, 512M "
                             f"or 50%% of this machine (default {100 * DEFAULT_SHARE:.0f}%%); "
                             "checked before any work, the rest sized to fit it")


def text_arguments(parser):
    """``--encoding`` and ``--skip_invalid``: how a text to score is read."""
    parser.add_argument("--encoding", default="utf-8",
                        help="the text's encoding (default %(default)s), e.g. latin-1")
    parser.add_argument("--skip_invalid", action="store_true",
                        help="score the lines that decode and report the others as skipped "
                             "(without it, lines that do not decode are an error, exit 2, "
                             "after the report)")


def layout_argument(parser, required=False):
    """``--layout``: the form of the model's scoring arrays (``compact/``)."""
    parser.add_argument("--layout", choices=LAYOUTS, required=required,
                        default=None if required else "hashed", help=LAYOUT_HELP)


def run_stage(parser, argv, options_type, run):
    """A Beam stage's command: parse, check (``options_type(**flags)``), and ``run`` it
    holding its output directory's lock; exit status 0."""
    flags, beam_args = parse(parser, argv, beam=True)
    options = options_type(**flags)
    with run_lock(options.out, parser.prog):
        run(options, beam_args)
    return 0


def parse(parser, argv, beam=False):
    """``(flags as a dict, beam_args)``.  A Beam stage's leftover arguments must be Beam's
    (:func:`pipelines.runners.check_options`); elsewhere there must be none."""
    if beam:
        args, rest = parser.parse_known_args(argv)
        runners.check_options(rest, parser)
    else:
        args, rest = parser.parse_args(argv), []
    flags = vars(args)
    if "order" in flags:
        order = flags.pop("order")
        if order is not None:
            flags["config"] = f"{order}gram"
    for key in [k for k in flags if k.startswith("_renamed_")]:
        kind, old = key[len("_renamed_"):], flags.pop(key)
        required = flags.pop(f"_required_{kind}", True)
        if old is not None:
            if flags.get(kind) is not None:
                parser.error(f"give --{kind} only (its old name too is one flag too many)")
            logging.warning("%s: this flag is now --%s (the stage directory's kind)",
                            _old_flag(parser, key), kind)
            flags[kind] = old
        elif required and flags.get(kind) is None:
            parser.error(f"the following arguments are required: --{kind}")
    return flags, rest


def _old_flag(parser, dest):
    for action in parser._actions:
        if action.dest == dest:
            return action.option_strings[0]
    return dest
