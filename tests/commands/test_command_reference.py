"""``docs/commands.md``, the command reference, says what the parsers say: it is
:func:`snm.commands.reference.markdown` as checked in, every command has its section,
and every option ``snm COMMAND --help`` prints is in that command's section.

Oracles: :data:`snm.cli.COMMANDS` (the commands that exist) and each command's
``--help`` text (argparse's own formatter, a path the reference does not take).
"""

import os
import re

import pytest

from snm.cli import COMMANDS
from snm.commands import reference

DOCUMENT = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "commands.md")
#: An option as help text writes it (``--train``, ``-v``, ``--runner=...``): a dash or two
#: and a letter, not inside a word (``log-linear``) nor a number (``-1``).
OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


@pytest.fixture(scope="module")
def document():
    return reference.markdown()


def section(document, command):
    """The text of ``## snm COMMAND`` in ``document``, up to the next command's section."""
    heading = f"\n## snm {command}\n"
    assert heading in document, f"snm {command} has no section"
    return document.split(heading, 1)[1].split("\n## snm ", 1)[0]


def test_the_checked_in_reference_is_the_parsers(document):
    with open(DOCUMENT, encoding="utf-8") as f:
        checked_in = f.read()
    assert checked_in == document, \
        f"docs/commands.md is not what the parsers say; regenerate it: {reference.REGENERATE}"


def test_every_command_has_a_section(document):
    headings = re.findall(r"^## snm (\S+)$", document, re.MULTILINE)
    assert sorted(headings) == sorted(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_help_prints_is_in_the_command_s_section(command, document,
                                                              monkeypatch):
    # Wide enough that argparse wraps no line, so no option is cut at a hyphen.
    monkeypatch.setenv("COLUMNS", "10000")
    printed = set(OPTION.findall(reference.command_parser(command).format_help()))
    assert "--help" in printed  # the pattern finds what help prints
    text = section(document, command)
    missing = sorted(option for option in printed if option not in text)
    assert not missing, f"snm {command}: {missing} printed by --help, not in docs/commands.md"
