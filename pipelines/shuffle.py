"""How per-bucket array partials travel from the workers that make them to the one that merges them.

``beam``: the arrays are the shuffled elements, as DESIGN.md describes.  On the
local runners every shuffled byte is held in the runner's memory until the
merge reads it; for the kernel 5-gram count that is ~400 MB of partials and
~2 GB of peak RSS.

``files`` (default): each partial is saved as an ``.npz`` file under a scratch
directory next to the output, and only its path is shuffled.  Peak memory is
then a worker's flush buffer plus one bucket, whatever the corpus size, the
way KenLM's lmplz sorts on disk; any Beam filesystem works (local, gs://), so
it runs on Dataflow and Flink too.  Files are only read, never deleted, by the
merge (a retried merge must find them); the whole scratch directory is removed
once the stage's manifest is written.
"""

import io
import uuid

import numpy as np

from pipelines import common

MODES = ("files", "beam")
SCRATCH = "_scratch"


class ArrayShuffle:
    """``send(part) -> payload`` where parts are made, ``receive(payload) -> part`` in the merge.

    A part is a dict of dicts of numpy arrays, e.g. ``{"links": {...}, "features": {...}}``.
    """

    def __init__(self, mode, out):
        if mode not in MODES:
            raise ValueError(f"shuffle mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.scratch = common.join(out, SCRATCH)

    def send(self, part):
        if self.mode == "beam":
            return part
        flat = {f"{group}.{name}": array for group, arrays in part.items()
                for name, array in arrays.items()}
        buffer = io.BytesIO()
        np.savez(buffer, **flat)
        path = common.join(self.scratch, f"{uuid.uuid4().hex}.npz")
        common.write_bytes(buffer.getvalue(), path)
        return path

    def receive(self, payload):
        if self.mode == "beam":
            return payload
        part = {}
        with np.load(io.BytesIO(common.read_bytes(payload))) as arrays:
            for key in arrays.files:
                group, name = key.split(".", 1)
                part.setdefault(group, {})[name] = arrays[key]
        return part

    def cleanup(self):
        common.remove_tree(self.scratch)
