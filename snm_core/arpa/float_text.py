"""float32 as its shortest decimal text, compiled (numba, no GIL), byte for byte what
pyarrow's cast to string writes.

The digits are the shortest that read back as the same float32, the nearest of them
to its exact value (ties to even): Ryu's method (Adams, PLDI 2018), two 64-bit
multiplications by a power of five a number.  Arrow (double-conversion's
``ToShortestSingle``) lays them out as ``0.000001`` to ``999999999`` in positional
form and past that as ``1e-7``, ``1.5e+10``; ``-0``, ``inf``, ``-inf``, ``nan``.
Pyarrow's own cast costs about 1.6 times as much a number, and its strings would
then be copied into the lines.
"""

import numba
import numpy as np

#: The longest text of a float32 (``-0.0000012345678``, ``-1.2345678e-38``): all
#: 2^32 checked by ``benchmarks/float_text.py --exhaustive``.
MAX_CHARS = 16

_MANTISSA_BITS, _BIAS = 23, 127
_POW5_INV_BITCOUNT, _POW5_BITCOUNT = 59, 61
_MINUS, _DOT, _ZERO, _E, _PLUS = 45, 46, 48, 101, 43


@numba.njit(nogil=True, cache=True, inline="always")
def _pow5bits(e):
    """ceil(log2(5^e)) for e >= 1, 1 for e = 0: the formula Ryu's bounds are proven for."""
    return ((e * 1217359) >> 19) + 1


# 5^-q scaled up (for binary exponents >= 0) and 5^i scaled down (below 0), as uint64.
_POW5_INV_SPLIT = np.array(
    [(1 << (_pow5bits(q) - 1 + _POW5_INV_BITCOUNT)) // 5 ** q + 1 for q in range(31)],
    np.uint64)
_POW5_SPLIT = np.array(
    [5 ** i >> (_pow5bits(i) - _POW5_BITCOUNT) if _pow5bits(i) >= _POW5_BITCOUNT
     else 5 ** i << (_POW5_BITCOUNT - _pow5bits(i)) for i in range(47)], np.uint64)


@numba.njit(nogil=True, cache=True, inline="always")
def _mul_shift(m, factor, shift):
    """(m * factor) >> shift for m < 2^32, factor < 2^64, shift > 32, in 64 bits."""
    low = np.uint64(m) * (factor & np.uint64(0xFFFFFFFF))
    high = np.uint64(m) * (factor >> np.uint64(32))
    return ((low >> np.uint64(32)) + high) >> np.uint64(shift - 32)


@numba.njit(nogil=True, cache=True, inline="always")
def _pow5_factor(value):
    count = 0
    while value % 5 == 0:
        value //= 5
        count += 1
    return count


@numba.njit(nogil=True, cache=True, inline="always")
def _drop_digit(vr, vp, vm):
    """The three bounds less their last digit, and vr's last digit (unsigned division,
    which compiles to a multiplication)."""
    ten = np.uint64(10)
    return vr // ten, vp // ten, vm // ten, vr % ten


@numba.njit(nogil=True, cache=True)
def shortest_digits(bits):
    """(digits, exponent): the shortest decimal ``digits * 10^exponent`` that reads
    back as the finite, non-zero float32 of ``bits`` (its magnitude), nearest first."""
    inv_split, split = _POW5_INV_SPLIT, _POW5_SPLIT
    mantissa = np.int64(bits & 0x7FFFFF)
    biased = np.int64((bits >> 23) & 0xFF)
    if biased == 0:
        e2 = 1 - _BIAS - _MANTISSA_BITS - 2
        m2 = mantissa
    else:
        e2 = biased - _BIAS - _MANTISSA_BITS - 2
        m2 = (1 << _MANTISSA_BITS) | mantissa
    accept_bounds = (m2 & 1) == 0
    mv = 4 * m2
    mp = 4 * m2 + 2
    mm_shift = 1 if (mantissa != 0 or biased <= 1) else 0
    mm = 4 * m2 - 1 - mm_shift

    vm_trailing_zeros = False
    vr_trailing_zeros = False
    last_removed = 0
    if e2 >= 0:
        q = (e2 * 78913) >> 18  # floor(log10(2^e2))
        e10 = q
        k = _POW5_INV_BITCOUNT + _pow5bits(q) - 1
        i = -e2 + q + k
        vr = np.int64(_mul_shift(mv, inv_split[q], i))
        vp = np.int64(_mul_shift(mp, inv_split[q], i))
        vm = np.int64(_mul_shift(mm, inv_split[q], i))
        if q != 0 and (vp - 1) // 10 <= vm // 10:
            l = _POW5_INV_BITCOUNT + _pow5bits(q - 1) - 1
            last_removed = np.int64(_mul_shift(mv, inv_split[q - 1], -e2 + q - 1 + l)) % 10
        if q <= 9:
            if mv % 5 == 0:
                vr_trailing_zeros = _pow5_factor(mv) >= q
            elif accept_bounds:
                vm_trailing_zeros = _pow5_factor(mm) >= q
            elif _pow5_factor(mp) >= q:
                vp -= 1
    else:
        q = (-e2 * 732923) >> 20  # floor(log10(5^-e2))
        e10 = q + e2
        i = -e2 - q
        k = _pow5bits(i) - _POW5_BITCOUNT
        j = q - k
        vr = np.int64(_mul_shift(mv, split[i], j))
        vp = np.int64(_mul_shift(mp, split[i], j))
        vm = np.int64(_mul_shift(mm, split[i], j))
        if q != 0 and (vp - 1) // 10 <= vm // 10:
            j = q - 1 - (_pow5bits(i + 1) - _POW5_BITCOUNT)
            last_removed = np.int64(_mul_shift(mv, split[i + 1], j)) % 10
        if q <= 1:
            vr_trailing_zeros = True
            if accept_bounds:
                vm_trailing_zeros = mm_shift == 1
            else:
                vp -= 1
        elif q < 31:
            vr_trailing_zeros = (mv & ((1 << (q - 1)) - 1)) == 0

    ten, zero = np.uint64(10), np.uint64(0)
    vr, vp, vm, last = np.uint64(vr), np.uint64(vp), np.uint64(vm), np.uint64(last_removed)
    removed = 0
    # (Ryu runs a copy of the first loop without the trailing zeros' bookkeeping for
    # the ~96% of numbers that have none; here both flags are then False throughout.)
    while vp // ten > vm // ten:
        vm_trailing_zeros = vm_trailing_zeros and vm % ten == zero
        vr_trailing_zeros = vr_trailing_zeros and last == zero
        vr, vp, vm, last = _drop_digit(vr, vp, vm)
        removed += 1
    if vm_trailing_zeros:
        while vm % ten == zero:
            vr_trailing_zeros = vr_trailing_zeros and last == zero
            vr, vp, vm, last = _drop_digit(vr, vp, vm)
            removed += 1
    if vr_trailing_zeros and last == np.uint64(5) and vr % np.uint64(2) == zero:
        last = np.uint64(4)  # exactly halfway: to even
    up = (vr == vm and (not accept_bounds or not vm_trailing_zeros)) or last >= np.uint64(5)
    return np.int64(vr) + (1 if up else 0), e10 + removed


@numba.njit(nogil=True, cache=True, inline="always")
def _put_word(out, pos, text):
    for b in range(len(text)):
        out[pos + b] = ord(text[b])
    return pos + len(text)


@numba.njit(nogil=True, cache=True)
def put_float32(out, pos, bits):
    """Write the text of the float32 whose bits are ``bits`` into ``out`` (uint8) at
    ``pos`` (room for :data:`MAX_CHARS`); returns the position after it."""
    bits = np.uint32(bits)
    negative = (bits >> 31) != 0
    biased = (bits >> 23) & 0xFF
    if biased == 0xFF:
        if (bits & 0x7FFFFF) != 0:
            return _put_word(out, pos, "nan")
        if negative:
            out[pos] = _MINUS
            pos += 1
        return _put_word(out, pos, "inf")
    if negative:
        out[pos] = _MINUS
        pos += 1
    if (bits & 0x7FFFFFFF) == 0:
        out[pos] = _ZERO
        return pos + 1
    digits, exponent = shortest_digits(bits)
    length = _decimal_length(digits)
    point = length + exponent  # the value is 0.DIGITS * 10^point
    if -6 <= point - 1 < 10:
        if point <= 0:
            out[pos] = _ZERO
            out[pos + 1] = _DOT
            pos += 2
            for _ in range(-point):
                out[pos] = _ZERO
                pos += 1
            _put_digits(out, pos, digits, length)
            return pos + length
        if point >= length:
            _put_digits(out, pos, digits, length)
            pos += length
            for _ in range(point - length):
                out[pos] = _ZERO
                pos += 1
            return pos
        _put_digits(out, pos + 1, digits, length)  # then the integer part moved left
        for b in range(point):
            out[pos + b] = out[pos + b + 1]
        out[pos + point] = _DOT
        return pos + length + 1
    _put_digits(out, pos + 1, digits, length)
    out[pos] = out[pos + 1]
    if length > 1:
        out[pos + 1] = _DOT
        pos += length + 1
    else:
        pos += 1
    out[pos] = _E
    out[pos + 1] = _PLUS if point - 1 >= 0 else _MINUS
    pos += 2
    scale = abs(point - 1)
    if scale >= 10:
        out[pos] = _ZERO + scale // 10
        pos += 1
    out[pos] = _ZERO + scale % 10
    return pos + 1


@numba.njit(nogil=True, cache=True, inline="always")
def _decimal_length(value):
    """The decimal digits of ``value`` (1 <= value < 10^9)."""
    if value >= 10000:
        if value >= 10000000:
            return 9 if value >= 100000000 else 8
        return 7 if value >= 1000000 else (6 if value >= 100000 else 5)
    if value >= 100:
        return 4 if value >= 1000 else 3
    return 2 if value >= 10 else 1


@numba.njit(nogil=True, cache=True, inline="always")
def _put_digits(out, pos, value, length):
    """``value``'s ``length`` decimal digits at ``out[pos:]`` (unsigned division, which
    compiles to a multiplication)."""
    value, ten = np.uint64(value), np.uint64(10)
    for b in range(length - 1, -1, -1):
        out[pos + b] = np.uint64(_ZERO) + value % ten
        value //= ten


@numba.njit(nogil=True, cache=True)
def float32_texts(values):
    """The texts of float32 ``values`` as (offsets int64 (n + 1), uint8 bytes), as a
    pyarrow string array's buffers."""
    bits = values.view(np.uint32)
    out = np.empty(len(values) * MAX_CHARS, np.uint8)
    offsets = np.empty(len(values) + 1, np.int64)
    pos = 0
    offsets[0] = 0
    for i in range(len(bits)):
        pos = put_float32(out, pos, bits[i])
        offsets[i + 1] = pos
    return offsets, out[:pos]
