"""Checks of a stage's input directory before the stage works on it.

In the spirit of pocolm's ``validate_*_dir.py`` scripts: every consumer calls
:func:`validate_directory` first, so a damaged or mistaken input is one line
naming the file and what to do (:class:`SnmInputError`: ``snm CMD: error:
MESSAGE``, exit 2), not a traceback from deep inside a worker.

What is checked, for the kinds that consumers read:

========  ==========================================================================
kind      checks
========  ==========================================================================
any       ``manifest.json``: valid JSON, the expected kind (another stage's
          manifest is named as such), this release's ``format_version``, every
          listed file present (:func:`snm_core.stages.manifests.read_manifest`)
count     ``links-*``/``features-*``: Parquet footers readable, columns and types
          of :data:`~snm_core.io.tables.LINKS`/:data:`~snm_core.io.tables.FEATURES`,
          row counts adding up to ``totals``; ``vocab.txt`` has the manifest's
          ``vocabulary_fingerprint``
join      ``events-*``/``small_m-*`` likewise (totals ``events``, ``small_m_links``)
fit       ``theta.npy``: a ``.npy`` header of float32, shape (``hash_size``,), and
          the file's size is that array's
model     ``links-*``/``m-*`` and ``features-*``/``m_star-*``
          (:mod:`~snm_core.io.model_files`; optional: scoring reads ``compact/``),
          each bucket's values file as many rows as its rows file,
          ``theta.npy`` and ``vocab.txt`` as above; a scoring directory
          (``snm compact --out``, manifest ``scoring_only``) has no tables, and
          asking for them is an error naming its source
vocab     ``word_counts.parquet``, ``vocab.txt``
========  ==========================================================================

Cost: one ``listdir``, the manifest, each Parquet file's footer (not its
data), the first ~128 bytes of ``theta.npy`` and the vocabulary parsed once
(returned, so the caller need not read it again); what that costs on a
large count directory: ``DESIGN.md`` 7.2.

Damage inside a Parquet file's data pages that leaves its footer intact is
found when the stage reads the file: :func:`snm_core.io.storage.read_parquet`
turns pyarrow's error into an :class:`SnmInputError` naming the file.  Damage
that still decodes is found only by :func:`verify_checksums` (``snm validate``
without ``--quick``), which reads every listed file whole: consumers do not
call it.
"""

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snm_core.io import model_files, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.tables import one_line
from snm_core.stages import manifests
from snm_core.text.vocab import Vocabulary

VOCAB = "vocab.txt"
THETA = "theta.npy"
#: Kinds whose directory holds the vocabulary its word ids refer to.
WITH_VOCABULARY = ("vocab", "count", "model")

#: Per kind: file prefix -> (schema, the manifest total its row counts add up to).
PARQUET = {
    "count": {"links": (tables.LINKS, "links"), "features": (tables.FEATURES, "features")},
    "join": {"events": (tables.EVENTS, "events"), "small_m": (tables.SMALL_M, "small_m_links")},
    "model": {"links": (tables.MODEL_LINKS, "links"), "m": (tables.M_VALUES, "links"),
              "features": (tables.FEATURES, "features"),
              "m_star": (tables.M_STAR_VALUES, "features")},
    "vocab": {"word_counts": (tables.WORD_COUNTS, None)},
}


@dataclasses.dataclass
class InputDirectory:
    """A checked stage directory: its manifest and, if it has one, its vocabulary."""

    directory: str
    kind: str
    manifest: manifests.Manifest
    vocabulary: Vocabulary = None


def validate_directory(directory, kind, parquet=True, command=None):
    """Check a ``kind`` stage directory (module docstring) before reading it.

    Parameters
    ----------
    directory : str, local path or URL
    kind : str, a kind of :data:`snm_core.stages.manifests.KINDS`
    parquet : bool
        Check the Parquet files' footers (False: a model loaded for scoring
        reads only ``compact/``).
    command : str, optional
        The command the messages say to re-run (default: the one that wrote the
        directory, by its manifest: :attr:`snm_core.stages.manifests.Manifest.command`).

    Returns
    -------
    InputDirectory

    Raises
    ------
    SnmInputError
        One line naming the first damaged file and the stage to re-run.
    """
    manifest = manifests.KINDS[kind].from_dict(manifests.read_manifest(directory, kind, command))
    command = command or manifest.command
    files = manifest.files
    scoring = manifest.get("scoring_only")
    if parquet and scoring:
        raise SnmInputError(
            f"{directory}: a scoring directory ('snm compact --out' from {scoring['source']}) "
            "holds the scoring arrays only, not the model's tables; use that model (or "
            "re-run 'snm compact --out' from it if its arrays are of an older layout)")
    if parquet:
        rows_of = {}
        for prefix, (schema, total) in PARQUET.get(kind, {}).items():
            names = sorted(n for n in files if n.startswith(prefix + "-")
                           or n == prefix + ".parquet")
            rows_of.update((n, check_parquet(storage.join(directory, n), schema, command))
                           for n in names)
            rows = sum(rows_of[n] for n in names)
            expected = manifest.totals.get(total) if total else None
            if expected is not None and rows != expected:
                raise SnmInputError(
                    f"{directory}: its {prefix}-*.parquet files hold {rows:,} rows, "
                    f"{tables.MANIFEST} says {expected:,}; they were changed after "
                    f"'{command}' wrote them (re-run it)")
        if kind == "model":
            check_values_beside_rows(directory, rows_of, command)
    if THETA in files:
        hash_size = _metafeatures(manifest).get("hash_size")
        if hash_size is not None:
            check_npy(storage.join(directory, THETA), np.float32, (hash_size,), command,
                      f"hash_size in {tables.MANIFEST}")
    vocabulary = None
    if VOCAB in files or kind in WITH_VOCABULARY:
        vocabulary = check_vocabulary(directory, manifest.vocabulary_fingerprint, command)
    return InputDirectory(directory, kind, manifest, vocabulary)


def verify_checksums(directory, manifest, command, remedy=None):
    """Read every file ``manifest`` lists and compare its checksum with the recorded one
    (what ``snm validate`` does beyond :func:`validate_directory`).

    Parameters
    ----------
    directory : str, local path or URL
    manifest : Manifest or dict, the directory's
    command : str
        The command that wrote the directory, named in the message.
    remedy : str, optional
        What to do about a mismatch (default: re-run ``command``).

    Returns
    -------
    int or None
        The files verified, or None when the manifest records no checksums (it was
        written before they were recorded: contents cannot be verified).

    Raises
    ------
    SnmInputError
        One line naming the first file whose contents differ from what was written.
    """
    recorded = manifest.get("checksums")
    if not recorded:
        return None
    remedy = remedy or f"re-run {command}"
    if recorded.get("algorithm") != manifests.CHECKSUM:
        raise SnmInputError(
            f"{storage.join(directory, tables.MANIFEST)}: checksums of algorithm "
            f"{recorded.get('algorithm')!r}, which this release does not compute (it uses "
            f"{manifests.CHECKSUM}); upgrade snm, or check sizes and headers only with --quick")
    digests = recorded.get("files") or {}
    for name in manifest.get("files", []):
        path = storage.join(directory, name)
        if name not in digests:
            raise SnmInputError(f"{path}: no checksum in {tables.MANIFEST}, which lists the "
                                f"file (the manifest was edited); {remedy}")
        if manifests.file_checksum(path) != digests[name]:
            raise SnmInputError(f"{path}: contents changed since '{command}' wrote it "
                                f"(checksum differs); {remedy}")
    return len(manifest.get("files", []))


def check_values_beside_rows(directory, rows_of, command):
    """Each model bucket's values file (``m-*``, ``m_star-*``) has its rows file's rows;
    ``rows_of``: file name -> rows."""
    for (rows_prefix, _), (values_prefix, _) in model_files.PARTS.values():
        for name, rows in rows_of.items():
            if name.startswith(rows_prefix + "-"):
                values_name = values_prefix + name[len(rows_prefix):]
                if rows_of.get(values_name) != rows:
                    raise SnmInputError(
                        f"{storage.join(directory, values_name)} holds "
                        f"{rows_of.get(values_name, 0):,} rows, {name} beside it {rows:,}; "
                        f"they were changed after '{command}' wrote them (re-run it)")


def _metafeatures(manifest):
    """The meta-feature settings of a fit manifest, or of the fit recorded in a model's."""
    return manifest.get("metafeatures") or (manifest.get("fit") or {}).get("metafeatures") or {}


def check_parquet(path, schema, command):
    """Check a Parquet file's footer against ``schema`` (every column, its type);
    returns its row count.  Reads the footer only."""
    try:
        fs, inner = storage.filesystem(path)
        with fs.open_input_file(inner) as f:
            footer = pq.ParquetFile(f)
            found, rows = footer.schema_arrow, footer.metadata.num_rows
    except (OSError, pa.ArrowException) as e:
        raise SnmInputError(f"{path}: not a readable Parquet file ({one_line(e)}); "
                            f"re-run '{command}'") from None
    tables.check_columns(path, found, schema, remedy=f"; re-run '{command}'")
    return rows


def check_npy(path, dtype, shape, command, source):
    """Check a ``.npy`` file's header (dtype, shape) and that its size is that array's,
    reading its first bytes only; ``source`` says where ``shape`` comes from."""
    from numpy.lib import format as npy_format

    dtype = np.dtype(dtype)
    readers = {(1, 0): npy_format.read_array_header_1_0,
               (2, 0): npy_format.read_array_header_2_0}
    try:
        fs, inner = storage.filesystem(path)
        with fs.open_input_file(inner) as f:
            size = f.size()
            version = npy_format.read_magic(f)
            if version not in readers:
                raise ValueError(f".npy format version {version}")
            found_shape, _, found_dtype = readers[version](f)
            offset = f.tell()
    except (OSError, ValueError, EOFError, SyntaxError) as e:
        raise SnmInputError(f"{path}: not a readable .npy array ({one_line(e)}); "
                            f"re-run '{command}'") from None
    if found_dtype != dtype or tuple(found_shape) != tuple(shape):
        raise SnmInputError(f"{path}: {found_dtype} of shape {tuple(found_shape)}, expected "
                            f"{dtype} of shape {tuple(shape)} ({source}); re-run '{command}'")
    expected = offset + dtype.itemsize * int(np.prod(shape))
    if size != expected:
        raise SnmInputError(f"{path}: {size:,} bytes, expected {expected:,} for {dtype} of shape "
                            f"{tuple(shape)} (truncated or damaged); re-run '{command}'")


def check_vocabulary(directory, fingerprint, command):
    """``directory``'s vocab.txt, which must have ``fingerprint``; returns the vocabulary."""
    path = storage.join(directory, VOCAB)
    vocabulary = Vocabulary.load(path)
    found = vocabulary.fingerprint()
    if found != fingerprint:
        raise SnmInputError(f"{path} does not match its manifest (fingerprint {found}, "
                            f"{tables.MANIFEST} says {fingerprint}): it was edited after "
                            f"'{command}'; restore it or re-run '{command}'")
    return vocabulary
