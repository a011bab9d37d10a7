"""Helpers for tests that read count directories or count text by brute force."""

import collections
import gzip
import os

from snm_core.io import tables
from snm_core.stages import manifests
from snm_core.text.vocab import BOS_ID, EOS_ID


def read_counts(directory):
    """``(links table, features table, manifest)`` of a count directory."""
    manifest = manifests.Count.read(str(directory))
    links = tables.read_tables(str(directory), manifest, "links", tables.LINKS)
    features = tables.read_tables(str(directory), manifest, "features", tables.FEATURES)
    return links, features, manifest


def counts_by_identity(directory, column="count"):
    """``{((tag, type name, words), word id): count}`` read back from a count directory."""
    links, features, manifest = read_counts(directory)
    identity = {}
    for row in features.to_pylist():
        identity[row["feature"]] = (manifest["tags"][row["tag"]],
                                    manifest["feature_types"][row["type"]], tuple(row["words"]))
    return {(identity[r["feature"]], r["word"]): r[column] for r in links.to_pylist()}


def parent_name(name):
    """The type a type extends by one older word (see counting.parent_types), by name."""
    import re
    n = re.fullmatch(r"(\d+)-gram", name)
    if n:
        return f"{int(n.group(1)) - 1}-gram" if int(n.group(1)) >= 1 else None
    r, s, a = re.fullmatch(r"skip\(r=(\d+),s=(\S+),a=(\d+)\)", name).groups()
    return f"skip(r={int(r) - 1},s={s},a={a})" if int(r) >= 2 else None


def brute_force_continuations(counts, type_names):
    """``{link: N1+(. f w)}`` from brute-force link counts: distinct one-word-longer extensions."""
    result = {link: 0 for link in counts}
    for ((tag, name, words), w) in counts:
        parent = parent_name(name)
        if parent in type_names:
            result[((tag, parent, words[1:]), w)] += 1
    return result


def brute_force_counts(config, sources, vocab):
    """The same counts by plain Python enumeration.

    ``sources`` is ``[(tag, [path, ...]), ...]``.
    """
    counts = collections.Counter()
    for tag, paths in sources:
        for path in paths:
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                raw_lines = f.read().split(b"\n")
            for raw in raw_lines:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                words = line.split()
                if not words:
                    continue
                ids = [vocab.id(w) for w in words]
                ids = [2 if i in (BOS_ID, EOS_ID) else i for i in ids]
                padded = [BOS_ID] + ids + [EOS_ID]
                for j in range(1, len(padded)):
                    seen = set()
                    for block in config.extractors:
                        for ftype, r, s, a in block.windows():
                            start = j - a - s - r
                            if start < 0:
                                continue
                            words_ = tuple(padded[start:start + r]) + tuple(padded[j - a:j])
                            seen.add((tag, ftype.name, words_))
                    for identity in seen:
                        counts[(identity, padded[j])] += 1
    return dict(counts)


def write_lines(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path
