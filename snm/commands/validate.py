"""``snm validate DIR [DIR ...]``: check stage directories and say what is wrong with each.

A stage directory (vocab, count, join, fit, model, log-linear) is checked by
its manifest's kind as its consumers check it (:mod:`snm_core.stages.validation`:
the manifest, every listed file, the Parquet footers and row counts, the
``.npy`` headers, the vocabulary's fingerprint), and a model's ``compact/``
arrays too.  A ``snm train`` run directory is checked stage by stage, by
:data:`snm.chain.STAGES`: each stage's directory that is there, and which of
the run's stages are missing.  Exit status 0 when every directory is whole, 2
otherwise (one line per problem).
"""

import sys

from snm import chain
from snm.commands import arguments
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests, validation


def check_stage_directory(directory):
    """One line about a whole stage directory; :class:`SnmInputError` names what is wrong."""
    kind = manifests.kind_of(directory)
    if kind not in manifests.KINDS or kind == "compact":
        manifests.read_manifest(directory, "model")  # says why: no manifest, or whose it is
    checked = validation.validate_directory(directory, kind)
    manifest = checked.manifest
    if kind in ("model", "loglinear"):
        from snm.evaluation import load_scorer  # its scoring arrays, checked as they load
        load_scorer(directory)
    totals = getattr(manifest, "totals", {}) or {}
    sizes = ", ".join(f"{totals[k]:,} {k.replace('_', ' ')}" for k in
                      ("tokens", "links", "features", "events", "small_m_links", "pairs")
                      if isinstance(totals.get(k), int))
    return f"{manifests.KINDS[kind].WHAT} ({manifests.KINDS[kind].COMMAND}){': ' if sizes else ''}{sizes}"


def check_run_directory(directory):
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
        try:
            lines.append(f"  {stage.name}: ok, {check_stage_directory(path)}")
        except SnmInputError as e:
            problems += 1
            lines.append(f"  {stage.name}: {e}")
    return lines, problems


def main(argv=None):
    parser = arguments.parser("validate", __doc__)
    parser.add_argument("directory", nargs="+", help="stage or run directory")
    args = parser.parse_args(argv)
    problems = 0
    for directory in args.directory:
        if storage.isfile(storage.join(directory, chain.STATE)) and \
                manifests.kind_of(directory) is None:
            lines, found = check_run_directory(directory)
            problems += found
            print(f"{directory}: snm train run, {'ok' if not found else f'{found} problem(s)'}")
            print("\n".join(lines))
            continue
        try:
            print(f"{directory}: ok, {check_stage_directory(directory)}")
        except SnmInputError as e:
            problems += 1
            print(f"snm validate: {e}", file=sys.stderr)
    return 2 if problems else 0
