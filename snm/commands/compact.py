"""``snm compact``: build a model's scoring arrays (``compact/``) again, in a chosen layout.

The layout is otherwise chosen when the model is made (``--layout`` of apply,
prune and train); this converts a finished model directory in place, and
rewrites its model card.
"""

from snm.commands import arguments
from snm_core.io.runlock import run_lock
from snm_core.model.card import write_model_card
from snm_core.model.compact import compile_model
from snm_core.stages.validation import validate_directory


def main(argv=None):
    parser = arguments.parser("compact", __doc__)
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    arguments.layout_argument(parser, required=True)
    args = parser.parse_args(argv)
    manifest = validate_directory(args.model, "model").manifest
    with run_lock(args.model, "snm compact"):
        compact = compile_model(args.model, args.layout)
        write_model_card(args.model, manifest, keep_evaluation=True)
    print(f"snm compact: {args.model}: layout {args.layout} ({compact['layout']}), "
          f"{compact['bytes']:,} bytes, {compact['bytes'] / max(compact['links'], 1):.2f} "
          "bytes a link")
    return 0
