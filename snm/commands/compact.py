"""``snm compact``: build a model's scoring arrays (``compact/``) again, in a chosen layout,
or write them, with what scoring needs, as a self-contained directory (``--out``).

The layout is otherwise chosen when the model is made (``--layout`` of apply,
prune and train); without ``--out`` this converts a finished model directory in
place, and rewrites its model card.  With ``--out DIR`` the model is left as it
is and DIR gets ``compact/``, ``vocab.txt``, the configuration, the card and a
manifest: a model that eval, score, query, ``snm.load`` and the decoders read
without the Parquet tables.  The build stays within ``--memory`` (sorting on disk
beyond it: the arrays are the same at any budget) and shows each pass's progress.
"""

from snm.commands import arguments
from snm.evaluation import model_directory, model_help
from snm_core.io.runlock import run_lock
from snm_core.scoring.card import write_model_card
from snm_core.scoring.compact import compile_model, write_scoring_directory
from snm_core.stages.validation import validate_directory


def build_parser():
    """The parser of ``snm compact``."""
    parser = arguments.parser("compact", __doc__)
    parser.add_argument("--model", required=True, help=model_help(reads_tables=True))
    arguments.layout_argument(parser, required=True)
    parser.add_argument("--out", help="write a self-contained scoring directory here (new or "
                        "empty) instead of converting the model in place")
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.model = model_directory(args.model, "snm compact")
    manifest = validate_directory(args.model, "model").manifest
    budget = args.memory
    if args.out:
        with run_lock(args.out, "snm compact"):
            compact = write_scoring_directory(args.model, args.layout, args.out, memory=budget)
        where = args.out
    else:
        with run_lock(args.model, "snm compact"):
            compact = compile_model(args.model, args.layout, memory=budget)
            write_model_card(args.model, manifest, keep_evaluation=True)
        where = args.model
    print(f"snm compact: {where}: layout {args.layout} ({compact['layout']}), "
          f"{compact['bytes']:,} bytes, {compact['bytes'] / max(compact['links'], 1):.2f} "
          "bytes a link")
    return 0
