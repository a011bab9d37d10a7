"""The held-out events of a join directory (``snm join --out``) and the adjustment
problem made of them and of its small M (:class:`snm_core.fit.problem.AdjustmentProblem`).
"""

import dataclasses
import functools

import numpy as np
import pyarrow as pa

from snm_core.fit.problem import AdjustmentProblem
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor


@dataclasses.dataclass
class Events:
    """Held-out events: target (n,), sentence id (n,), CSR ``ptr`` (n+1,) over feature ``keys``."""

    target: np.ndarray
    sentence: np.ndarray
    ptr: np.ndarray
    keys: np.ndarray

    @classmethod
    def from_table(cls, table):
        features = table["features"].combine_chunks() if isinstance(
            table["features"], pa.ChunkedArray) else table["features"]
        offsets = features.offsets.to_numpy().astype(np.int64)
        return cls(target=table["target"].to_numpy().astype(np.int32),
                   sentence=(table["file"].to_numpy().astype(np.int64) << 40)
                   + table["line"].to_numpy(),
                   ptr=offsets - offsets[0],
                   keys=features.flatten().to_numpy())

    def __len__(self):
        return len(self.target)


def type_fingerprints(manifest):
    """Stable hash of each type id's (tag, type name), for the ``type`` meta-feature."""
    return FeatureExtractor(parse_config(manifest["config"]), manifest["tags"]).type_salts


def read_events(directory, manifest=None):
    """The :class:`Events` of a join directory (its manifest read if not given)."""
    manifest = manifest or manifests.Join.read(directory)
    event_tables = [storage.read_parquet(storage.join(directory, n))
                    for n in sorted(manifest["files"]) if n.startswith("events-")]
    if not event_tables:
        raise SnmInputError(f"{directory}: no held-out events; is the held-out text empty?")
    return Events.from_table(pa.concat_tables(event_tables))


def load_join(directory, spec, threads=None):
    """``(AdjustmentProblem, manifest)`` for a ``snm join`` output directory.

    Small M is read one bucket file at a time, so only the compiled arrays
    stay in memory.
    """
    manifest = manifests.Join.read(directory)
    names = sorted(manifest["files"])
    if not manifest.totals.get("small_m_links", 1):
        raise SnmInputError(f"{directory}: small M is empty: no feature of the held-out text "
                            f"was seen in training (the count at {manifest.counts} has "
                            "no links: is the training text empty?)")
    events = read_events(directory, manifest)
    small_m = [functools.partial(storage.read_parquet, storage.join(directory, n))
               for n in names if n.startswith("small_m-")]
    problem = AdjustmentProblem(small_m, events, spec, type_fingerprints(manifest),
                                len(manifest["feature_types"]), threads)
    return problem, manifest
