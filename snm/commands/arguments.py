"""What several subcommands' parsers share: the parser itself, the stage directories'
flags, training sources, the layout, and handing the rest to Beam.

Arguments are parsed here and nothing more: each value is checked once, by the
options object it fills (``CountOptions``, ``FitOptions``, ...), whose
:class:`~snm_core.io.errors.SnmInputError` names the flag.  A usage error is one
line (:class:`CommandParser`), and help is plain text: the docstrings a parser
shows are reStructuredText, rendered for the terminal by :func:`plain_text`.
"""

import argparse
import difflib
import logging
import re
import sys

from pipelines import runners
from snm.evaluation import model_directory
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import DEFAULT_SHARE, MemoryBudget
from snm_core.io.runlock import run_lock
from snm_core.io.textfile import DEFAULT_BATCH_BYTES, MAX_INVALID_SHARE
from snm_core.scoring.compact import LAYOUT_HELP, LAYOUTS
from snm_core.stages import manifests


#: reST's inline literal: ``text``.
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
#: reST's interpreted text with a role: :role:`target`, :py:func:`~a.b`, :ref:`title <target>`.
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`(~?)([^`]*?)(?:\s*<[^`>]*>)?`")


def plain_text(text):
    """``text`` (reStructuredText, as docstrings are written) as a terminal shows it.

    Inline literals lose their double backquotes, a role its markup (``:mod:`a.b```
    reads ``a.b``, ``:class:`~a.B``` reads ``B``, as Sphinx shows them), and a
    paragraph's ``::`` before a literal block becomes ``:``.
    """
    if not text:
        return text

    def role(match):
        target = match.group(2)
        return target.rsplit(".", 1)[-1] if match.group(1) else target

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(r"\1", text)
    text = re.sub(r"(?m)\s+::$", "", text)  # "see below ::": reST drops the marker
    return re.sub(r"(?m)::$", ":", text)


class PlainTextFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter of ``--help`` with descriptions, epilogs and option help as
    :func:`plain_text`; descriptions keep their line breaks (their examples and lists)."""

    def _format_text(self, text):
        return super()._format_text(plain_text(text))

    def _expand_help(self, action):
        return plain_text(super()._expand_help(action))


class CommandParser(argparse.ArgumentParser):
    """The parser of one ``snm`` subcommand: errors are one line, and an option it does not
    know is named with the closest it knows before anything else is checked.

    argparse checks the required options before it looks at the unknown ones, so a
    misspelled required option (``--trian``) would be reported as the real one missing,
    after the usage.  Here the arguments are first parsed with nothing required, and
    an unknown option is an :class:`SnmInputError` naming the closest option (for a
    Beam stage, the closest of its own and Beam's pipeline options, whose options the
    unknown ones may be: :func:`pipelines.runners.check_options`).
    """

    def __init__(self, *args, beam=False, **kwargs):
        kwargs.setdefault("formatter_class", PlainTextFormatter)
        super().__init__(*args, **kwargs)
        self.beam = beam

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        self._refuse_unknown(args)
        namespace, rest = super().parse_known_args(args, namespace)
        if hasattr(namespace, "memory"):  # --memory, typed once for everything below
            namespace.memory = MemoryBudget.of(namespace.memory)
        return namespace, rest

    def error(self, message):
        """argparse's usage errors (a value of the wrong type, a required option
        missing, ...): one line on stderr, exit status 2, without the usage."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _refuse_unknown(self, args):
        if any(a in ("-h", "--help") for a in args):
            return  # the help, printed by the real pass, shows what is required
        required = [a for a in self._actions if a.required]
        required += [g for g in self._mutually_exclusive_groups if g.required]
        for item in required:
            item.required = False
        try:
            _, rest = super().parse_known_args(list(args))
        finally:
            for item in required:
                item.required = True
        if self.beam:
            runners.check_options(rest, self)
        elif rest:
            raise SnmInputError(unknown_argument(rest, self))


def unknown_argument(rest, parser):
    """One line about the first of ``rest``, arguments ``parser`` does not take: an option
    with the closest of the parser's options, or an argument with no place."""
    options = [a for a in rest if a.startswith("-") and not _NUMBER.match(a)]
    if not options:
        return f"unexpected argument {rest[0]!r}"
    flag = options[0].split("=", 1)[0]
    names = [s for action in parser._actions if action.help is not argparse.SUPPRESS
             for s in action.option_strings]
    close = difflib.get_close_matches(flag, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"see {parser.prog} --help"
    return f"unknown option {flag}; {hint}"


#: What argparse reads as a negative number rather than an option.
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def parser(name, description, beam=False):
    """The parser of ``snm NAME`` (a :class:`CommandParser`); a Beam stage's also lists the
    runner options and takes Beam's."""
    return CommandParser(prog=f"snm {name}", description=description,
                         epilog=runners.RUNNER_HELP if beam else None, beam=beam)


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
                        help="training text (one sentence a line, plain or .gz; - reads "
                             "standard input, copied once to OUT/_stdin/train.txt); repeat "
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
    """``--encoding`` and ``--skip_invalid``: how text is read, the same on every command
    (:func:`snm_core.io.textfile.check_invalid_lines`)."""
    parser.add_argument("--encoding", default="utf-8",
                        help="the text's encoding (default %(default)s), e.g. latin-1, which "
                             "decodes any byte")
    parser.add_argument("--skip_invalid", action="store_true",
                        help="skip and count every line that does not decode or holds a NUL "
                             "byte (default: off; such lines are skipped and counted up to "
                             f"{100 * MAX_INVALID_SHARE:g}%% of the text's lines, more is an "
                             "error, exit 2, naming the file and the first)")


def threshold_arguments(parser):
    """``--min_feature_count`` and ``--min_link_count [TYPES=]N``, repeatable
    (:mod:`snm_core.count.thresholds`)."""
    parser.add_argument("--min_feature_count", action="append", metavar="[TYPES=]N",
                        help="leave out features seen fewer than N times, with their links "
                             "(lmplz's --prune, SRILM's -gtNmin): TYPES is skip (every "
                             "skip-gram type), ngram, a type's name such as 3-gram, or "
                             "nothing (every type but the empty feature); repeat for several, "
                             "later ones winning (default: keep every feature)")
    parser.add_argument("--min_link_count", action="append", metavar="[TYPES=]N",
                        help="leave out the links (f, w) seen fewer than N times, TYPES as "
                             "for --min_feature_count (a feature keeps its count C(f,*); one "
                             "left without links goes; default: keep every link)")


def layout_argument(parser, required=False):
    """``--layout``: the form of the model's scoring arrays (``compact/``)."""
    parser.add_argument("--layout", choices=LAYOUTS, required=required,
                        default=None if required else "hashed", help=LAYOUT_HELP)


def run_stage(parser, argv, options_type, run):
    """A Beam stage's command: parse, check (``options_type(**flags)``; an ``--out`` holding
    another command's output is refused without ``--force``), and ``run`` it holding its
    output directory's lock; exit status 0."""
    force_argument(parser)
    flags, beam_args = parse(parser, argv, beam=True)
    force = flags.pop("force")
    if "model" in flags:  # snm prune: a run directory stands for its final model
        flags["model"] = model_directory(flags["model"], parser.prog)
    options = options_type(**flags)
    if getattr(options, "model", None) != options.out:  # (prune says what that mistake is)
        manifests.check_output(options.out, parser.prog, force)
    with run_lock(options.out, parser.prog):
        run(options, beam_args)
    return 0


def force_argument(parser, help=None):
    """``--force``: write into an ``--out`` that holds another command's finished output."""
    parser.add_argument("--force", action="store_true",
                        help=help or "write into --out even when it holds another command's "
                                     "finished output (without it: refused, exit 2)")


def parse(parser, argv, beam=False):
    """``(flags as a dict, beam_args)`` of a :class:`CommandParser`.  A Beam stage's leftover
    arguments must be Beam's (the parser checks them); elsewhere there must be none."""
    if beam:
        args, rest = parser.parse_known_args(argv)
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
