"""What a worker needs from a count directory: its manifest, configuration and
vocabulary (read once per worker process)."""

import collections
import threading

from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.stages import validation
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.vocab import Vocabulary

#: Vocabularies by (path, fingerprint), the most recently used last (see shared_vocabulary).
_VOCABULARIES = collections.OrderedDict()
_VOCABULARIES_LOCK = threading.Lock()
_MAX_VOCABULARIES = 8


def shared_vocabulary(path, fingerprint):
    """The vocabulary file at ``path``, read once per worker process and shared by its DoFns.

    DoFns carry the file's name, not its words: the runner unpickles every DoFn
    once per stage and worker, and a vocabulary pickled into each costs time and
    memory whatever the text's size.  Workers that are threads of one process
    wait for the first to read it (the reading holds the GIL: two at once gain
    nothing).
    """
    with _VOCABULARIES_LOCK:
        vocab = _VOCABULARIES.get((path, fingerprint))
        if vocab is None:
            vocab = Vocabulary.parse(storage.read_bytes(path).decode("utf-8"), path)
            if vocab.fingerprint() != fingerprint:
                raise SnmInputError(f"{path} changed while the pipeline was running; "
                                    "run it again")
        _remember(path, fingerprint, vocab)
    return vocab


def share_vocabulary(path, vocab):
    """Let :func:`shared_vocabulary` answer ``path`` with ``vocab``, just written there.

    The stage that writes the file before its pipeline holds the vocabulary
    already; workers that run in its process (the local runner's in-memory
    mode) then need not read it again before they start.  Returns
    ``vocab.fingerprint()``.
    """
    fingerprint = vocab.fingerprint()
    with _VOCABULARIES_LOCK:
        _remember(path, fingerprint, vocab)
    return fingerprint


def _remember(path, fingerprint, vocab):
    _VOCABULARIES[(path, fingerprint)] = vocab
    _VOCABULARIES.move_to_end((path, fingerprint))
    while len(_VOCABULARIES) > _MAX_VOCABULARIES:
        _VOCABULARIES.popitem(last=False)


class CountDirectory:
    """What a worker needs from a count directory's manifest (picklable, small)."""

    def __init__(self, counts_dir, manifest):
        self.counts_dir = counts_dir
        self.manifest = manifest

    @classmethod
    def load(cls, counts_dir):
        """Check the count directory (:func:`snm_core.stages.validation.validate_directory`:
        manifest, Parquet footers, vocab.txt against its fingerprint) and load its manifest."""
        checked = validation.validate_directory(counts_dir, "count")
        share_vocabulary(storage.join(counts_dir, "vocab.txt"), checked.vocabulary)
        return cls(counts_dir, checked.manifest)

    def vocabulary(self):
        return shared_vocabulary(storage.join(self.counts_dir, "vocab.txt"),
                                 self.manifest.vocabulary_fingerprint)

    @property
    def num_buckets(self):
        return self.manifest.num_buckets

    def build(self):
        extractor = FeatureExtractor(parse_config(self.manifest.config),
                                     self.manifest.tags)
        return self.vocabulary(), extractor

    def bucket_paths(self, bucket):
        return {prefix: storage.join(self.counts_dir,
                                     tables.bucket_file(prefix, bucket, self.num_buckets))
                for prefix in ("features", "links")}
