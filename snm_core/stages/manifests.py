"""Typed stage directories: one class per manifest kind, which writes, reads and checks it.

Every stage writes its output directory's ``manifest.json`` last (so a
directory without one is not a finished output), and every consumer reads it
through the class of its kind instead of string keys:

============  ==========  =============  ==================  ===========================
class         kind        directory      consumers' flag     written by
============  ==========  =============  ==================  ===========================
Vocab         vocab       ``vocab/``     ``--vocab``         ``snm vocab``
Count         count       ``count/``     ``--count``         ``snm count``
Join          join        ``join/``      ``--join``          ``snm join``
Fit           fit         ``fit/``       ``--fit``           ``snm fit``
Model         model       ``model/``     ``--model``         ``snm apply``, ``snm prune``
Compact       compact     ``compact/``   (inside a model)    ``snm apply``, ``snm compact``
LogLinear     loglinear   ``loglinear/`` ``--model``         ``snm train --family loglinear``
============  ==========  =============  ==================  ===========================

The kind, the directory ``snm train`` gives the stage and the flag its
consumers take are one name.  A manifest keeps what its class declares;
keys it does not declare (written by a later release, or layout-specific
settings of ``compact/``) are kept in ``extra`` and written back unchanged.
:mod:`snm_core.stages.validation` checks a directory's files against its
manifest.

Every manifest records a checksum of each file it lists, computed as it is
written (:func:`write_manifest`; the files were just written, so they are read
back from the page cache)::

    "checksums": {"algorithm": "xxh3_64", "files": {"theta.npy": "9f2c...", ...}}

``snm validate`` verifies them; loading a directory does not (it checks sizes
and headers only).  Manifests written before checksums were recorded have none.
"""

import collections.abc
import dataclasses
import json
import os
from typing import ClassVar, Optional

import xxhash

from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.io.tables import FORMAT_VERSION, MANIFEST


@dataclasses.dataclass
class Manifest(collections.abc.Mapping):
    """What every manifest holds: the files the stage wrote (``files``) and, in ``extra``,
    the keys its class does not declare.

    Read its fields as attributes.  It is also a read-only mapping of its JSON form
    (``manifest["totals"]``), for code that reads it as a dict.
    """

    KIND: ClassVar[str] = ""
    #: What a directory of this kind is, for messages ("a count directory").
    WHAT: ClassVar[str] = ""
    #: The command that writes it.
    COMMAND: ClassVar[str] = ""

    files: list = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)
    #: ``{"algorithm": CHECKSUM, "files": {name: hex digest}}``; None in a manifest
    #: written before checksums were recorded.
    checksums: Optional[dict] = None

    def to_dict(self):
        """The manifest as JSON-able data, ``kind`` and ``format_version`` included."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "extra" and not (f.name == "checksums" and self.checksums is None)}
        return {**self.extra, **data, "kind": self.KIND, "format_version": FORMAT_VERSION}

    @classmethod
    def from_dict(cls, data):
        """The manifest of ``data`` (already checked to be of this kind)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items()
                 if k not in names and k not in ("kind", "format_version")}
        return cls(**known, extra=extra)

    def __getitem__(self, key):
        return self.to_dict()[key]

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self):
        return len(self.to_dict())

    __hash__ = None  # mutable, like the dict it stands for

    @property
    def command(self):
        """The command that wrote this directory, as its error messages name it."""
        return self.COMMAND

    def write(self, directory, known=None):
        """Write ``directory/manifest.json`` (the stage's last write), with the checksums of
        the files it lists (``known``: as :func:`write_manifest`)."""
        self.checksums = write_manifest(self.to_dict(), directory, known)["checksums"]
        return self

    @classmethod
    def read(cls, directory):
        """The checked manifest of a finished ``directory`` of this kind: its kind and format
        version, and every file it lists present; else one :class:`SnmInputError` naming the
        directory and the command to re-run."""
        return cls.from_dict(read_manifest(directory, cls.KIND))

    @classmethod
    def exists(cls, directory):
        return storage.isfile(storage.join(directory, MANIFEST))


@dataclasses.dataclass
class CorpusManifest(Manifest):
    """What the stages after the count share: the features' configuration and tags, and
    the vocabulary (by fingerprint) their word ids refer to."""

    config: str = ""
    tags: list = dataclasses.field(default_factory=lambda: [""])
    feature_types: list = dataclasses.field(default_factory=list)
    vocabulary_fingerprint: str = ""
    num_buckets: int = 0
    totals: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Vocab(Manifest):
    KIND: ClassVar[str] = "vocab"
    WHAT: ClassVar[str] = "a vocabulary directory"
    COMMAND: ClassVar[str] = "snm vocab"

    min_count: int = 1
    max_size: Optional[int] = None
    vocabulary_size: int = 0
    vocabulary_fingerprint: str = ""
    distinct_words: int = 0
    sources: list = dataclasses.field(default_factory=list)
    totals: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Count(CorpusManifest):
    KIND: ClassVar[str] = "count"
    WHAT: ClassVar[str] = "a count directory"
    COMMAND: ClassVar[str] = "snm count"

    vocabulary_size: int = 0
    sources: list = dataclasses.field(default_factory=list)
    #: ``{type name: N}``: the types whose features seen fewer than N times were left
    #: out (``--min_feature_count``); empty when every feature was kept.
    min_feature_count: dict = dataclasses.field(default_factory=dict)
    #: ``{type name: N}``: the types whose links seen fewer than N times were left out
    #: (``--min_link_count``).
    min_link_count: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Join(CorpusManifest):
    KIND: ClassVar[str] = "join"
    WHAT: ClassVar[str] = "a join directory"
    COMMAND: ClassVar[str] = "snm join"

    counts: str = ""  # the count directory joined (key name of format version 1)
    heldout: str = ""  # the held-out text


@dataclasses.dataclass
class Fit(Manifest):
    KIND: ClassVar[str] = "fit"
    WHAT: ClassVar[str] = "a fit directory"
    COMMAND: ClassVar[str] = "snm fit"

    join: str = ""
    metafeatures: dict = dataclasses.field(default_factory=dict)
    training: dict = dataclasses.field(default_factory=dict)
    choice: dict = dataclasses.field(default_factory=dict)
    small_m: dict = dataclasses.field(default_factory=dict)
    heldout_events: int = 0
    heldout_events_unseen_target: int = 0
    weights_in_use: int = 0
    nonzero_weights: int = 0
    heldout_perplexity_unadjusted: float = float("nan")
    heldout_perplexity: float = float("nan")
    seconds: dict = dataclasses.field(default_factory=dict)
    vocabulary_fingerprint: str = ""

    #: What a model keeps of its fit (``Model.fit``).
    KEPT: ClassVar[tuple] = ("metafeatures", "training", "choice", "small_m", "heldout_events",
                             "weights_in_use", "heldout_perplexity_unadjusted",
                             "heldout_perplexity")

    def summary(self):
        return {k: getattr(self, k) for k in self.KEPT}


@dataclasses.dataclass
class Model(CorpusManifest):
    KIND: ClassVar[str] = "model"
    WHAT: ClassVar[str] = "a model directory"
    COMMAND: ClassVar[str] = "snm apply"

    vocabulary_size: int = 0
    count_totals: dict = dataclasses.field(default_factory=dict)
    sources: list = dataclasses.field(default_factory=list)
    fit: dict = dataclasses.field(default_factory=dict)
    pruning: Optional[dict] = None

    @property
    def command(self):
        """``snm apply``; ``snm prune`` for a pruned model, ``snm compact --out`` for a
        scoring directory."""
        if self.extra.get("scoring_only"):
            return "snm compact --out"
        return "snm prune" if self.pruning else self.COMMAND

    @property
    def suffix_closed(self):
        """Whether every n-gram feature and link has its suffix one word shorter in the
        model too: true of counts, and of pruning by back-off relative entropy (which keeps
        the ARPA closure); not of pruning by mass or count."""
        if not self.pruning:
            return True
        # Models pruned before the key was written: only the back-off criterion's stay closed.
        return self.pruning.get("suffix_closed",
                                self.pruning["criterion"].startswith("relative entropy"))


@dataclasses.dataclass
class Compact(Manifest):
    KIND: ClassVar[str] = "compact"
    WHAT: ClassVar[str] = "a model's compact/ directory"
    COMMAND: ClassVar[str] = "snm compact"

    layout: object = None  # an int (hashed) or "trie-N" / "small-N"
    features: int = 0
    links: int = 0
    bytes: int = 0


@dataclasses.dataclass
class LogLinear(Manifest):
    KIND: ClassVar[str] = "loglinear"
    WHAT: ClassVar[str] = "a log-linear model directory"
    COMMAND: ClassVar[str] = "snm train --family loglinear"

    vocabulary_size: int = 0
    vocabulary_fingerprint: str = ""
    totals: dict = dataclasses.field(default_factory=dict)


#: Every kind's class, by kind.
KINDS = {cls.KIND: cls for cls in (Vocab, Count, Join, Fit, Model, Compact, LogLinear)}


def writer(kind):
    """The command that writes a ``kind`` directory: ``"snm apply"`` for ``"model"``."""
    return KINDS[kind].COMMAND if kind in KINDS else f"snm {kind}"


#: The checksum every manifest records of its files (the ``xxhash`` package's name for it).
CHECKSUM = "xxh3_64"
#: Bytes a file is read in while its checksum is computed: one buffer, reused, so that
#: hashing a large model adds no more than this to a process's memory (a mapping of the
#: file would add every page it touched to the process's resident set).
CHECKSUM_READ_BYTES = 8 << 20


def checksum_digest():
    """A :data:`CHECKSUM` digest, bytes fed with ``update`` (a writer's, as it writes)."""
    return xxhash.xxh3_64()


def file_checksum(path):
    """The :data:`CHECKSUM` of a file's bytes (local or remote), as hex."""
    digest = checksum_digest()
    if storage.is_remote(path):
        fs, inner = storage.filesystem(path)
        with fs.open_input_stream(inner) as f:
            while chunk := f.read(CHECKSUM_READ_BYTES):
                digest.update(chunk)
        return digest.hexdigest()
    buffer = bytearray(CHECKSUM_READ_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while size := f.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()


def taken_checksums(files):
    """``{file: hex}`` taken as the files were written, as ``known`` to :func:`checksums`."""
    return {"algorithm": CHECKSUM, "files": dict(files)}


def reusable_checksums(known):
    """``{file: hex}`` of ``known`` (``{"algorithm": .., "files": {name: hex}}`` or None)
    where it is of :data:`CHECKSUM`; otherwise none."""
    return dict((known or {}).get("files", {})) if (known or {}).get("algorithm") == CHECKSUM \
        else {}


def checksums(directory, names, known=None):
    """``{"algorithm": CHECKSUM, "files": {name: hex}}`` of the files ``names`` of
    ``directory`` (what a manifest records); ``known``: the checksums of some of them
    already, ``{"algorithm": .., "files": {name: hex}}`` or None."""
    reused = reusable_checksums(known)
    return {"algorithm": CHECKSUM,
            "files": {name: reused.get(name) or file_checksum(storage.join(directory, name))
                      for name in names}}


def write_manifest(data, directory, known=None):
    """Write ``data`` (a manifest as a dict) as ``directory/manifest.json`` with the
    checksums of the files it lists, replacing any it held (a manifest copied from
    another directory's); returns what was written.

    ``known``: checksums (as :func:`checksums` returns them) of files that are byte for
    byte another stage's, such as the count's files a model links, which are then not
    read again.
    """
    data = {**data, "checksums": checksums(directory, data.get("files", []), known)}
    storage.write_json(data, storage.join(directory, MANIFEST))
    return data


def command_of(data):
    """The command that wrote a manifest ``data`` (a dict) of a known kind, by its
    content: ``snm prune`` for a pruned model, ``snm apply`` for another."""
    cls = KINDS.get(data.get("kind"))
    if cls is None:
        return f"snm {data.get('kind')}"
    return cls.from_dict(data).command


def check_output(directory, command, force=False, rerun=True):
    """Refuse to write ``command``'s output into ``directory`` when it holds another
    command's finished output (a ``manifest.json`` that ``command`` did not write), unless
    ``force``; ``rerun`` false refuses the command's own finished output too (a text
    sample, which no later run recomputes).

    Raises
    ------
    SnmInputError
        One line naming what ``directory`` holds and the two ways on (``--force``, or
        another ``--out``).
    """
    path = storage.join(directory, MANIFEST)
    if force or not storage.isfile(path):
        return
    try:
        data = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        holds = f"a {MANIFEST} that is not an snm stage's, which '{command}' would replace"
    else:
        written_by = command_of(data)
        if written_by == command:
            if rerun:
                return  # a re-run of the same stage replaces its own output
            holds = (f"the finished output of an earlier '{command}' run, which this one "
                     "would replace")
        else:
            cls = KINDS.get(data["kind"])
            kind = "a scoring directory" if data.get("scoring_only") else cls and cls.WHAT
            holds = (f"the finished output of '{written_by}'" + (f" ({kind})" if kind else "")
                     + f", which '{command}' would replace")
    raise SnmInputError(f"{directory}: holds {holds}: give another --out, or --force to "
                        "replace it")


def kind_of(directory):
    """The kind a directory's manifest names, or None (no manifest, or not ours)."""
    path = storage.join(directory, MANIFEST)
    if not storage.isfile(path):
        return None
    try:
        data = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def check_manifest(manifest, path, kind):
    """Raise :class:`SnmInputError` unless ``manifest`` (from ``path``) is a current ``kind``'s."""
    expected = KINDS.get(kind)
    name = expected.WHAT if expected else f"a {kind} directory"
    command = writer(kind)
    found = manifest.get("kind") if isinstance(manifest, dict) else None
    if found != kind:
        if found in KINDS:
            what = f"{KINDS[found].WHAT} (the output of '{KINDS[found].COMMAND}')"
        else:
            what = "not an snm stage's manifest" if found is None else \
                f"of unknown kind {found!r}"
        raise SnmInputError(f"{path}: this is {what}, expected '{command}' output "
                            f"({name}); check the path")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise SnmInputError(f"{path}: format version {version} is newer than this release "
                                f"reads ({FORMAT_VERSION}); upgrade snm, or re-run "
                                f"'{command}' with this release")
        raise SnmInputError(f"{path}: format version {version}, this release reads version "
                            f"{FORMAT_VERSION}; re-run '{command}'")


def read_manifest(directory, kind, command=None):
    """Load and check ``directory/manifest.json`` of a stage of the given kind (local or
    remote); every file it lists must exist.  Returns the manifest as a dict.

    ``command``: the command the messages say to re-run (default: the one that wrote
    the manifest, :func:`command_of`, or before it is read the kind's, :func:`writer`).

    Raises
    ------
    SnmInputError
        If the directory is not a finished stage output of that kind.
    """
    path = storage.join(directory, MANIFEST)
    given, command = command, command or writer(kind)
    if storage.isdir(path) or (not storage.is_remote(directory)
                               and storage.isfile(directory)):
        raise SnmInputError(f"{directory}: a file, expected '{command}' output (a "
                            "directory); check the path")
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        # (an object store has no directories: there only the manifest can be missing)
        if not storage.is_remote(directory) and not os.path.exists(directory):
            raise SnmInputError(f"{directory}: no such file or directory (expected "
                                f"'{command}' output)") from None
        raise SnmInputError(f"{directory}: no {MANIFEST}; not the output of a finished "
                            f"'{command}' run (re-run that stage)") from None
    except OSError as e:
        raise SnmInputError(f"{path}: cannot read ({e})") from None
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SnmInputError(f"{path}: not valid JSON ({e})") from None
    check_manifest(manifest, path, kind)
    command = given or command_of(manifest)  # a pruned model's is snm prune
    present = set(storage.listdir(directory))
    for name in manifest.get("files", []):
        if name not in present and not storage.isfile(storage.join(directory, name)):
            raise SnmInputError(f"{storage.join(directory, name)} is listed in {MANIFEST} but "
                                f"missing; re-run '{command}'")
    return manifest
