"""The command line read without the manual: ``snm --help`` names every command, every
option says what it does and its default, help is plain text, and a misspelled option
is one line naming the option meant.

Oracles: :data:`snm.cli.COMMANDS` (the commands that exist), each subcommand's own
parser as its ``main`` builds it (the options that exist), and text written by hand.
"""

import argparse
import contextlib
import importlib
import io
import re
import subprocess
import sys

import pytest

from snm.cli import COMMANDS, main
from snm.commands import arguments

#: reST that a terminal would show as typed: inline literals and roles.
REST_MARKUP = re.compile(r"``|:[a-z]+:`")


def command_parser(command, monkeypatch):
    """The parser ``snm COMMAND`` parses with: the module's ``build_parser()``, or, for a
    module without one, the parser its ``main`` makes (caught as it is made)."""
    module = importlib.import_module(f"snm.commands.{COMMANDS[command]}")
    if hasattr(module, "build_parser"):
        return module.build_parser()
    made = []

    def recording(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    make = arguments.parser
    monkeypatch.setattr(arguments, "parser", recording)
    with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        module.main(["--help"])
    assert len(made) == 1, command
    return made[0]


def visible_actions(parser):
    return [a for a in parser._actions if a.help is not argparse.SUPPRESS]


def test_snm_help_lists_every_command_with_what_it_does(capsys):
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    described = dict(re.findall(r"^  (\S+) +(\S.*)$", listing, re.MULTILINE))
    assert sorted(described) == sorted(COMMANDS)
    # Without a command it is a usage error: the same list, on stderr, exit status 2.
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == listing


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_says_what_it_does_and_its_default(command, monkeypatch):
    parser = command_parser(command, monkeypatch)
    formatter = parser._get_formatter()
    for action in visible_actions(parser):
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"snm {command} {name}: no help"
        has_default = action.default not in (None, False, argparse.SUPPRESS) and \
            not isinstance(action, argparse._HelpAction)
        if has_default:
            assert "default" in formatter._expand_help(action), \
                f"snm {command} {name}: its default {action.default!r} is not stated"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_is_plain_text(command, monkeypatch):
    parser = command_parser(command, monkeypatch)
    shown = parser.format_help()
    assert not REST_MARKUP.search(shown), REST_MARKUP.search(shown).group()
    assert shown.startswith(f"usage: snm {command} ")


def test_rest_reads_as_a_terminal_shows_it():
    text = ("See :mod:`snm_core.io.tables` and :class:`~snm_core.io.errors.SnmInputError`;\n"
            "run ``snm count`` as :ref:`the guide <counting>` says::\n\n    snm count ...")
    assert arguments.plain_text(text) == (
        "See snm_core.io.tables and SnmInputError;\n"
        "run snm count as the guide says:\n\n    snm count ...")


def test_a_misspelled_required_option_is_named_before_anything_else(tmp_path):
    """``--trian`` where ``--train`` is required: one line naming it, no usage, exit 2,
    from the installed command as a user runs it."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "snm", "train", "--config", "5gram",
                           "--trian", "corpus.txt", "--heldout", "dev.txt", "--test", "t.txt",
                           "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "snm train: error: unknown option --trian; did you mean --train?\n"
    assert proc.stdout == "" and not out.exists()


@pytest.mark.parametrize("argv, line", [
    (["eval", "--modle", "m", "text.txt"],
     "snm eval: error: unknown option --modle; did you mean --model?"),
    (["query", "m", "--verbsoe", "word"],
     "snm query: error: unknown option --verbsoe; did you mean --verbose?"),
    (["count", "--config", "5gram", "--out", "o", "--trian", "x", "--min_count", "1"],
     "snm count: error: unknown option --trian; did you mean --train?"),
    (["export-arpa", "--model", "m", "--out", "x.arpa", "--zzz"],
     "snm export-arpa: error: unknown option --zzz; see snm export-arpa --help"),
])
def test_an_unknown_option_is_one_line_with_the_closest(argv, line, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def test_other_usage_errors_are_one_line_too(capsys):
    """A required option missing (not misspelled), or a value of the wrong type: one
    line, exit status 2, no usage."""
    for argv, message in ((["eval", "text.txt"],
                           "the following arguments are required: --model"),
                          (["synth", "--out", "o", "--seed", "x"],
                           "argument --seed: invalid int value: 'x'")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        assert capsys.readouterr().err == f"snm {argv[0]}: error: {message}\n"


def test_help_usage_shows_required_options_as_required(capsys):
    """The usage line of ``--help`` leaves a required option out of brackets."""
    from snm.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "--out OUT" in usage and "[--out OUT]" not in usage
