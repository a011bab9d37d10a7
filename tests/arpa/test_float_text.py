"""float32 text: what pyarrow's cast to string writes, byte for byte (the ARPA files
written before this formatter, and KenLM and SRILM reading them, saw those texts).
`benchmarks/float_text.py --exhaustive` checks all 2^32 patterns."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings, strategies as st

from snm_core.arpa.arpa_loops import MAX_CHARS, float32_texts


def texts(values):
    offsets, data = float32_texts(np.asarray(values, np.float32))
    return [bytes(data[offsets[i]:offsets[i + 1]]).decode() for i in range(len(values))]


def pyarrow_texts(values):
    return pc.cast(pa.array(np.asarray(values, np.float32)), pa.string()).to_pylist()


def test_the_layouts_of_arrow():
    values = [0.0, -0.0, 1.0, -99.0, 0.5, 1e-6, 1e-7, -2.5e-7, 123456789.0, 1e9, 1e10,
              1.5e10, 3e38, 1e-45, float("inf"), float("-inf"), float("nan")]
    assert texts(values) == ["0", "-0", "1", "-99", "0.5", "0.000001", "1e-7", "-2.5e-7",
                             "123456790", "1000000000", "1e+10", "1.5e+10", "3e+38",
                             "1e-45", "inf", "-inf", "nan"]


def test_boundaries_and_a_million_random_patterns_match_pyarrow():
    rng = np.random.default_rng(7)
    edges = []
    for exponent in range(-46, 39):  # either side of each power of ten
        center = np.float32(10.0 ** exponent).view(np.uint32).astype(np.int64)
        edges.extend(range(center - 3, center + 4))
    edges += list(range(0, 1000)) + [0x7F7FFFFF, 0x00800000, 0x007FFFFF, 0xFFC00001]
    bits = np.concatenate([np.array(edges, np.int64) & 0xFFFFFFFF,
                           rng.integers(0, 1 << 32, 1_000_000)]).astype(np.uint32)
    bits = np.concatenate([bits, bits | 0x80000000])
    values = bits.view(np.float32)
    offsets, data = float32_texts(values)
    theirs = pc.cast(pa.array(values), pa.string())
    _, their_offsets, their_data = theirs.buffers()
    assert np.array_equal(offsets, np.frombuffer(their_offsets, np.int32)[:len(values) + 1])
    assert data.tobytes() == their_data.to_pybytes()[:len(data)]
    assert np.diff(offsets).max() <= MAX_CHARS


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, (1 << 32) - 1))
def test_each_text_reads_back_as_its_float32(bits):
    value = np.array([bits], np.uint32).view(np.float32)
    (text,) = texts(value)
    assert text == pyarrow_texts(value)[0]
    if np.isfinite(value[0]):
        assert np.float32(text).view(np.uint32) == bits
