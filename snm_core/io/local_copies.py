"""Local copies of stage directories in object storage, and their upload: a remote model
is read from a copy in the local cache (:func:`local_copy`), and arrays built locally go
up file by file, the manifest last (:func:`upload_tree`).
"""

import hashlib
import os
import shutil

from snm_core.io import storage


def upload_tree(local_directory, path, last=None):
    """Copy a local directory's files to ``path`` (local or remote), each atomically;
    the file named ``last`` (a manifest) after all the others."""
    files = []
    for root, _, names in os.walk(local_directory):
        files += [os.path.relpath(os.path.join(root, n), local_directory) for n in names]
    for relative in sorted(files, key=lambda r: (r == last, r)):
        with open(os.path.join(local_directory, relative), "rb") as src, \
                storage.atomic_output(storage.join(path, relative.replace(os.sep, "/"))) as dst:
            shutil.copyfileobj(src, dst, storage.READ_BYTES)


def cache_directory():
    """Where remote stage directories are copied for reading (``$SNM_CACHE``,
    else ``$XDG_CACHE_HOME/snm`` or ``~/.cache/snm``)."""
    root = os.environ.get("SNM_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME")
                            or os.path.join(os.path.expanduser("~"), ".cache"), "snm")
    return root


def local_copy(directory, names, marker):
    """A local directory holding ``names`` (relative paths) of ``directory``.

    A local ``directory`` is returned as it is.  A remote one is copied into
    :func:`cache_directory` on first use and reused while its ``marker`` file
    (a manifest, written last by the stage) has the same bytes; the cached
    marker is written last too, so a copy cut short is redone.
    """
    if not storage.is_remote(directory):
        return directory
    marker_bytes = storage.read_bytes(storage.join(directory, marker))
    digest = hashlib.sha256(directory.rstrip("/").encode("utf-8")).hexdigest()[:24]
    local = os.path.join(cache_directory(), digest)
    cached_marker = os.path.join(local, marker)
    if os.path.isfile(cached_marker):
        with open(cached_marker, "rb") as f:
            if f.read() == marker_bytes:
                return local
        os.unlink(cached_marker)
    for name in names:
        target = os.path.join(local, *name.split("/"))
        with storage.open_input(storage.join(directory, name)) as src, \
                storage.atomic_output(target) as dst:
            shutil.copyfileobj(src, dst, storage.READ_BYTES)
    with storage.atomic_output(cached_marker) as f:
        f.write(marker_bytes)
    return local
