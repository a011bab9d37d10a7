"""Training sources: ``[TAG=]GLOB`` specs, their tags, and the files they match.

Bad input: a glob that matches no file is an error before the pipeline starts
(exit 2); a file matched by two specs too.  The glob ``-`` is standard input
(lmplz's way): :func:`spool_stdin` copies it once to a file under the stage's
output directory, which every stage that reads the text then reads.
"""

import dataclasses
import hashlib
import re
import sys

from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import STDIN, compression_of, line_batches

_TAG = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclasses.dataclass(frozen=True)
class Source:
    """A training source: a tag (``""`` when untagged) and a file glob."""

    tag: str
    glob: str


def parse_sources(specs, pooled=False):
    """Parse ``[TAG=]GLOB`` arguments into sources.

    Every source has a tag, or none has (one pooled source of all the globs).
    Several globs may share a tag.  ``pooled=True`` drops the tags.
    """
    sources = []
    for spec in specs:
        tag, sep, glob = spec.partition("=")
        if not sep or "/" in tag or not _TAG.match(tag):
            tag, glob = "", spec
        if not glob:
            raise SnmInputError(f"--train {spec!r}: empty file pattern")
        sources.append(Source("" if pooled else tag, glob))
    tagged = {s.tag != "" for s in sources}
    if len(tagged) > 1:
        raise SnmInputError("give every --train source a tag (TAG=GLOB) or none: "
                            + ", ".join(specs))
    return sources


def source_tags(sources):
    """The distinct tags of the sources, in order of first appearance (``[""]`` if pooled)."""
    return list(dict.fromkeys(s.tag for s in sources))


def expand_sources(sources, tags=None):
    """``[(tag_index, path), ...]`` for every file of every source, each glob's files sorted.

    ``tags`` is the tag list the indices refer to (default: :func:`source_tags`).

    Raises
    ------
    SnmInputError
        If a glob matches no file.
    """
    tags = source_tags(sources) if tags is None else tags
    files = []
    for source in sources:
        paths = storage.glob(source.glob)
        if not paths:
            raise SnmInputError(f"--train {source.glob!r} matches no file")
        files += [(tags.index(source.tag), path) for path in paths]
    if len(set(p for _, p in files)) != len(files):
        raise SnmInputError("a training file is matched by two --train patterns; each file "
                            "must be counted once")
    return files


#: What :func:`check_has_words` reads at a time.
_WORD_SEARCH_BYTES = 1 << 16


def check_has_words(files, encoding="utf-8"):
    """Raise :class:`SnmInputError` naming the training files when none of them holds a word
    (empty, or only blank lines), before any stage counts nothing.  Reads each file until a
    line with a word: usually the first batch of the first file."""
    for _, path in files:
        for _, lines in line_batches(path, batch_bytes=_WORD_SEARCH_BYTES, encoding=encoding):
            if any(line and not line.isspace() for line in lines):
                return
    shown = ", ".join(path for _, path in files[:3]) + (", ..." if len(files) > 3 else "")
    raise SnmInputError(f"--train {shown}: no words (the training text is empty or blank); "
                        "give the training text")


#: Where standard input given as ``--train -`` is spooled, under the output directory.
STDIN_SPOOL = ("_stdin", "train.txt")
#: What a spool copies at a time.
_SPOOL_BYTES = 1 << 22


def spool_stdin(sources, directory):
    """``(sources, digest)``: ``sources`` with the one given as ``-`` reading
    ``directory/_stdin/train.txt``, a copy of standard input written whole or not at all;
    ``digest`` the copy's SHA-256 (hex), which stands for the text in ``snm train``'s
    signatures (its file's time changes at every run).  Without ``-``: ``(sources,
    None)``.

    Standard input can be read once only; the stages that read the training text (vocab,
    then count) read the copy.
    """
    given = [s for s in sources if s.glob == STDIN]
    if not given:
        return sources, None
    if len(given) > 1:
        raise SnmInputError("--train -: standard input can be given once")
    path = storage.join(directory, *STDIN_SPOOL)
    digest = hashlib.sha256()
    with storage.atomic_output(path) as out:
        while True:
            chunk = sys.stdin.buffer.read(_SPOOL_BYTES)
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
    return [dataclasses.replace(s, glob=path) if s.glob == STDIN else s
            for s in sources], digest.hexdigest()


#: Bytes of text a word takes, with its space (a conservative average: English text
#: takes 5 to 6), and how much smaller compression makes text (gzip: about 3x).
BYTES_A_WORD = 4.5
COMPRESSION_RATIO = 3.5


def estimate_words(files):
    """An upper estimate of the words in the training files, from their sizes (for the
    memory budget: read nothing)."""
    total = 0.0
    for _, path in files:
        size = storage.file_stamp(path)[1]
        total += size * (COMPRESSION_RATIO if compression_of(path) else 1.0)
    return int(total / BYTES_A_WORD)
