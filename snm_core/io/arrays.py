"""Small numpy helpers used across stages.

``np.unique`` is avoided: in numpy 2.x it is far slower on uint64 keys than
``np.sort`` plus a comparison with the neighbour.
"""

import numpy as np

from snm_core.io.radix import argsort_uint64


def sorted_distinct(values):
    """The distinct values of a 1-d array, sorted (``np.unique`` without its cost)."""
    values = np.sort(np.asarray(values))
    return values[run_starts(values)]


def concat_ranges(starts, ends):
    """Indices ``[s0, e0) + [s1, e1) + ...`` as one int64 array (vectorised)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return np.arange(total, dtype=np.int64) + offsets


def run_starts(values):
    """Index of the first element of each run of equal neighbours in a 1-d array
    (int64; empty for an empty array)."""
    if len(values) == 0:
        return np.zeros(0, np.int64)
    # Written in place: np.r_ would concatenate a copy.
    new_run = np.empty(len(values), dtype=bool)
    new_run[0] = True
    np.not_equal(values[1:], values[:-1], out=new_run[1:])
    return np.flatnonzero(new_run)


def stable_argsort(values, return_sorted=False):
    """The stable sorting permutation of non-negative integers, fast: a radix sort of
    each value carried with its row (:func:`snm_core.io.radix.argsort_uint64`; numpy's
    stable argsort of 64-bit integers is a timsort).

    Parameters
    ----------
    values : ndarray of non-negative integers, shape (n,)

    Returns
    -------
    order : ndarray of int64, shape (n,); ``values[order]`` is sorted and equal
        values keep their input order
    sorted_values : ndarray, shape (n,), ``values[order]`` (with ``return_sorted``)
    """
    values = np.asarray(values)
    if len(values) >= 1 << 32:
        order = np.argsort(values, kind="stable")
        return (order, values[order]) if return_sorted else order
    wide = values.dtype.itemsize == 8  # else widened, a copy
    order, ordered = argsort_uint64(np.ascontiguousarray(values).view(np.uint64) if wide
                                    else values.astype(np.uint64))
    if not return_sorted:
        return order
    return order, ordered.view(values.dtype) if wide else ordered.astype(values.dtype)


def group_rows(ids, num_groups):
    """Row indices grouped by a small non-negative id, and where each group's rows are.

    A stable sort of the ids: a radix sort when they fit 16 bits (numpy's
    stable sort of 64-bit integers is a timsort).

    Parameters
    ----------
    ids : ndarray of int, shape (n,), values in ``[0, num_groups)``
    num_groups : int

    Returns
    -------
    order : ndarray of int64, shape (n,); the rows of group ``g``, in input order,
        are ``order[bounds[g]:bounds[g + 1]]``
    bounds : ndarray of int64, shape (num_groups + 1,)

    Examples
    --------
    >>> order, bounds = group_rows(np.array([2, 0, 2, 1]), 3)
    >>> order.tolist(), bounds.tolist()
    ([1, 3, 0, 2], [0, 1, 2, 4])
    """
    ids = np.asarray(ids)
    order = np.argsort(ids.astype(np.uint16 if num_groups <= 1 << 16 else np.int64),
                       kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(num_groups + 1))
    return order.astype(np.int64, copy=False), bounds.astype(np.int64, copy=False)


def take_rows(array, index):
    """``array[index]`` for a 2-d array and an index array of rows, fast.

    Each row is viewed as one opaque item and the items taken: numpy's fancy
    index of rows copies them element by element, far more slowly.

    Examples
    --------
    >>> take_rows(np.arange(6, dtype=np.int32).reshape(3, 2), np.array([2, 0])).tolist()
    [[4, 5], [0, 1]]
    """
    array = np.ascontiguousarray(array)
    if array.ndim != 2 or array.shape[1] == 0:
        return array[index]
    rows = array.view(np.dtype((np.void, array.dtype.itemsize * array.shape[1]))).ravel()
    return np.take(rows, index).view(array.dtype).reshape(-1, array.shape[1])


def sorted_ids(keys):
    """Dense ids of keys numbered in key order: ``(ids int64, distinct keys sorted, first
    row of each)``, with ``distinct[ids] == keys``; ``keys`` non-negative integers.

    A sort, whose arrays are a few times the keys' size, rather than a hash table
    (pyarrow's dictionary encoding), which holds far more.
    """
    order, ordered = stable_argsort(keys, return_sorted=True)
    starts = run_starts(ordered)
    new_run = np.zeros(len(keys), dtype=np.int64)
    new_run[starts] = 1
    ids = np.empty(len(keys), dtype=np.int64)
    ids[order] = np.cumsum(new_run) - 1
    return ids, ordered[starts], order[starts]


def isin_sorted(values, sorted_keys):
    """Boolean mask: which ``values`` occur in ``sorted_keys`` (sorted, distinct)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[pos] == values


def padded_lists(column, width, dtype=np.int64):
    """A pyarrow list column as a padded matrix: ``(values (n, width), lengths (n,))``.

    Row i holds the ``lengths[i]`` values of list i, then -1s.

    Examples
    --------
    >>> import pyarrow as pa
    >>> values, lengths = padded_lists(pa.chunked_array([[[4, 5], [], [6]]]), 3)
    >>> values.tolist(), lengths.tolist()
    ([[4, 5, -1], [-1, -1, -1], [6, -1, -1]], [2, 0, 1])
    """
    import pyarrow.compute as pc  # not at import: its memory only where it is used

    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return padded_rows(flat, lengths, width, dtype), lengths


def padded_rows(flat, lengths, width, dtype=np.int64):
    """Rows of ``lengths[i]`` values each, one after the other in ``flat``, as a matrix
    (n, width) padded with -1."""
    values = np.full((len(lengths), width), -1, dtype=dtype)
    # Row-major: the mask's true cells, in order, are each row's first lengths[i] columns.
    values[np.arange(width) < np.asarray(lengths)[:, None]] = flat
    return values


def string_buffers(array):
    """``(offsets, data)`` of an Arrow (large) string array as numpy views, no copy."""
    import pyarrow as pa  # not at import: memory a process that never needs it

    if not pa.types.is_string(array.type) and not pa.types.is_large_string(array.type):
        array = array.cast(pa.string())
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, np.int64 if pa.types.is_large_string(array.type)
                            else np.int32)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offsets, data
