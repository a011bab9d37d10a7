"""The peak bytes a local directory tree held while some work ran, sampled on a thread.

A train's stages write their outputs and their scratch under the run directory (the
count's parts under ``count/_scratch``, the trie build's runs, ...), and delete the
scratch as they go; what must fit on the disk is the tree's largest size, which only
sampling sees.  A walk of a few thousand files takes milliseconds, so sampling every
half second costs nothing a stage would notice.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d, DiskPeak(d) as peak:
...     with open(os.path.join(d, "a"), "wb") as f:
...         _ = f.write(b"x" * 100)
>>> peak.bytes
100
"""

import os
import threading

#: Seconds between two walks of the tree.
INTERVAL = 0.5


def tree_bytes(directory):
    """Bytes of the files under ``directory`` (0 where it does not exist)."""
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while we walked
                pass
    return total


class DiskPeak:
    """A context: ``bytes`` is the largest size of ``directory``'s tree seen from entry to
    exit (sampled every :data:`INTERVAL` seconds, and at both ends)."""

    def __init__(self, directory, interval=INTERVAL):
        self.directory, self.interval = directory, interval
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        self.bytes = max(self.bytes, tree_bytes(self.directory))

    def _watch(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread = threading.Thread(target=self._watch, name="disk-peak", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        return False
