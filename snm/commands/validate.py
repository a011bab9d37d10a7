"""``snm validate [--quick] DIR [DIR ...]``: check stage directories, and say what is wrong.

A stage directory (vocab, count, join, fit, model, log-linear, a scoring
directory of ``snm compact --out``, a model's ``compact/``) is checked by its
manifest's kind as its consumers check it (:mod:`snm_core.stages.validation`:
the manifest, every listed file, the Parquet footers and row counts, the
``.npy`` headers, the vocabulary's fingerprint), and a model's ``compact/``
arrays too.  Then every file a manifest lists is read whole and its checksum
compared with the one the manifest recorded when the stage wrote it, which
finds damage that leaves sizes and headers intact; ``--quick`` skips this (it
checks what loading checks).  A manifest written before checksums were
recorded passes with a note that its contents cannot be verified.

A ``snm train`` run directory is checked stage by stage, by
:data:`snm.chain.STAGES`: each stage's directory that is there, named by the
stage that writes it (a missing ``fit/`` is ``snm fit``'s to write again), and
which of the run's stages are missing.  Exit status 0 when every directory is
whole, 2 otherwise (one line per problem).
"""

import sys

from snm import chain
from snm.cli import COMMANDS
from snm.commands import arguments
from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts.hashed import COMPACT
from snm_core.stages import manifests, validation


def check_stage_directory(directory, kind=None, command=None, quick=False, remedy=None):
    """One line about a whole stage directory; :class:`SnmInputError` names what is wrong.

    Parameters
    ----------
    directory : str
    kind : str, optional
        What the directory must be (a run's stage); default: what its manifest says.
    command : str, optional
        The command that writes it, which the messages say to re-run; default: the one
        its manifest names.
    quick : bool
        Check sizes and headers only, not the files' checksums.
    remedy : str, optional
        What to do about a file whose contents changed (default: re-run ``command``).
    """
    if kind is None:
        if not storage.is_remote(directory) and not storage.exists(directory):
            raise SnmInputError(f"{directory}: no such file or directory")
        kind = manifests.kind_of(directory)
        if kind not in manifests.KINDS:
            manifests.read_manifest(directory, "model")  # says why: no manifest, or whose it is
    data = manifests.read_manifest(directory, kind, command)
    scoring = bool(data.get("scoring_only"))  # holds no tables to check
    checked = validation.validate_directory(directory, kind, parquet=not scoring,
                                            command=command)
    manifest = checked.manifest
    command = command or manifest.command
    contents = "sizes and headers checked (--quick)"
    if not quick:
        parts = [(directory, manifest)]
        compact_dir = storage.join(directory, COMPACT)
        if kind == "model" and storage.isfile(storage.join(compact_dir, tables.MANIFEST)):
            parts.append((compact_dir, manifests.read_manifest(compact_dir, "compact", command)))
        verified = [validation.verify_checksums(path, part, command, remedy)
                    for path, part in parts]
        if None in verified:
            contents = ("contents cannot be verified: its manifest predates checksums "
                        f"(re-run {command} to record them)")
        else:
            contents = f"contents verified ({sum(verified):,} files)"
    if kind in ("model", "loglinear"):
        from snm.evaluation import load_scorer  # its scoring arrays, checked as they load
        load_scorer(directory)
    totals = getattr(manifest, "totals", {}) or {}
    sizes = ", ".join(f"{totals[k]:,} {k.replace('_', ' ')}" for k in
                      ("tokens", "links", "features", "events", "small_m_links", "pairs")
                      if isinstance(totals.get(k), int))
    what = "a scoring directory" if scoring else manifests.KINDS[kind].WHAT
    return f"{what} ({command}){': ' if sizes else ''}{sizes}; {contents}"


def stage_command(stage):
    """The command that writes a run stage's directory: ``snm fit`` for ``fit/``."""
    return f"snm {stage.name}" if stage.name in COMMANDS else manifests.writer(stage.kind)


def check_run_directory(directory, quick=False):
    """``(lines, problems)`` of a ``snm train`` run directory, stage by stage."""
    lines, problems = [], 0
    state = storage.read_json(storage.join(directory, chain.STATE))
    for stage in chain.STAGES:
        path = storage.join(directory, stage.directory)
        if stage.name not in state and not storage.exists(path):
            continue  # not a stage of this run
        if stage.kind is None:
            if storage.isfile(path):
                lines.append(f"  {stage.name}: {stage.directory} present")
            else:
                problems += 1
                lines.append(f"  {stage.name}: {path} is missing; re-run snm train")
            continue
        command = stage_command(stage)
        if not storage.exists(path):
            problems += 1
            lines.append(f"  {stage.name}: {path} is missing; re-run {command}, or snm train "
                         "(which re-runs the stages whose output is missing)")
            continue
        # snm train skips a stage whose manifest is there: without it, the stage runs again
        remedy = (f"re-run {command} (or delete {storage.join(path, tables.MANIFEST)} and "
                  "re-run snm train, which then re-runs that stage)")
        try:
            described = check_stage_directory(path, stage.kind, command, quick, remedy)
            lines.append(f"  {stage.name}: ok, {described}")
        except SnmInputError as e:
            problems += 1
            lines.append(f"  {stage.name}: {e}")
    return lines, problems


def build_parser():
    """The parser of ``snm validate``."""
    parser = arguments.parser("validate", __doc__)
    parser.add_argument("directory", nargs="+", help="stage or run directory")
    parser.add_argument("--quick", action="store_true",
                        help="check sizes and headers only (what loading checks), not the "
                             "checksums of the files' contents")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    problems = 0
    for directory in args.directory:
        if storage.isfile(storage.join(directory, chain.STATE)) and \
                manifests.kind_of(directory) is None:
            lines, found = check_run_directory(directory, args.quick)
            problems += found
            print(f"{directory}: snm train run, {'ok' if not found else f'{found} problem(s)'}")
            print("\n".join(lines))
            continue
        try:
            print(f"{directory}: ok, {check_stage_directory(directory, quick=args.quick)}")
        except SnmInputError as e:
            problems += 1
            print(f"snm validate: {e}", file=sys.stderr)
    return 2 if problems else 0
