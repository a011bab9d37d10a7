"""Stable 64-bit hashing, vectorised with numpy.

Feature keys and meta-feature indices are all derived from the
functions here, so they must give the same value in every process, on every
machine and in every release: no use of Python's ``hash()``, whose string
hashing is salted per process.

* :func:`fingerprint` hashes a string with xxhash64 (used for the handful of
  constants: feature-type salts, tag names, meta-feature namespaces).
* :func:`mix64` and :func:`combine` hash whole uint64 arrays at numpy speed;
  they are the murmur3 64-bit finaliser, a bijection on 64-bit integers with
  full avalanche, so distinct inputs collide only by chance (about n**2 / 2**65
  pairs among n keys).

:func:`fmix64_steps` is the definition, in numpy.  :func:`mix64` and :func:`combine`
run it in C (``words.c``, one pass instead of seven); the C loops that hash one value
at a time take its twin from ``hash64.h``; the fit's and apply's meta-feature
hashes are computed in ``_kernels.c`` with the same steps.  The tests hold each to
the integer definition.
"""

import numpy as np
import xxhash

from snm_core.io import native

# murmur3 fmix64 constants and the 64-bit golden ratio (Weyl increment).
_MIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)

#: Seed of every word-sequence hash; changing it changes every feature key.
SEQUENCE_SEED = np.uint64(0x5EED5A5E0F5A11ED)


def fingerprint(text):
    """Stable 64-bit fingerprint of a string (xxhash64, seed 0), as ``np.uint64``.

    >>> int(fingerprint("3-gram")) == int(fingerprint("3-gram"))
    True
    """
    return np.uint64(xxhash.xxh64_intdigest(text.encode("utf-8")))


def mix64(x):
    """murmur3 fmix64 of a uint64 array (or scalar); returns a new array.

    Parameters
    ----------
    x : ndarray of uint64, any shape

    Returns
    -------
    ndarray of uint64, same shape
    """
    x = np.asarray(x, dtype=np.uint64, order="C")  # (not ascontiguousarray: it makes 0-d 1-d)
    out = np.empty_like(x)
    _mix64_array(native.address(x), x.size, native.address(out))
    return out


def fmix64_steps(x):
    """The fmix64 steps on ``x``, a uint64 array (changed in place); returns ``x``.  The
    definition (``hash64.h`` is its C twin)."""
    x ^= x >> _S33
    x *= _MIX_C1
    x ^= x >> _S33
    x *= _MIX_C2
    x ^= x >> _S33
    return x


def combine(h, values):
    """Fold ``values`` into running hashes ``h``: ``mix64(h ^ (values + 1) * golden)``.

    The ``+ 1`` keeps value 0 from being a no-op.  Order matters:
    ``combine(combine(s, a), b) != combine(combine(s, b), a)``.  Values are
    taken modulo 2**64 (a -1 pad is 2**64 - 1).

    Parameters
    ----------
    h : ndarray of uint64, shape (n,) or scalar
    values : ndarray of integers, shape (n,)
    """
    v = np.asarray(values).astype(np.uint64)
    h = np.asarray(h, dtype=np.uint64)
    if h.shape != v.shape and h.size != 1:
        h, v = np.broadcast_arrays(h, v)
    h, v = (np.asarray(a, order="C") for a in (h, v))
    out = np.empty(v.shape, np.uint64)
    _combine_array(native.address(h), int(h.size != 1), native.address(v), v.size,
                   native.address(out))
    return out


_mix64_array = native.function("mix64_array", [native.ptr, native.i64, native.ptr])
_combine_array = native.function("combine_array", [native.ptr, native.i64, native.ptr,
                                                   native.i64, native.ptr])


def link_key(feature_keys, words):
    """The 64-bit key of links (f, w): the feature key with the word id folded in.

    Counting (continuation counts), the compact model and the ARPA export all
    name a link by this key.
    """
    return combine(np.asarray(feature_keys, np.uint64), np.asarray(words))
