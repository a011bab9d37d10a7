"""Count directories read back, and text files written, for the count and join tests."""

import os

from snm_core.io import tables
from snm_core.stages import manifests


def read_counts(directory):
    """``(links table, features table, manifest)`` of a count directory."""
    manifest = manifests.Count.read(str(directory))
    links = tables.read_tables(str(directory), manifest, "links", tables.LINKS)
    features = tables.read_tables(str(directory), manifest, "features", tables.FEATURES)
    return links, features, manifest


def write_lines(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path
