"""The ARPA numbers' text: `snm_core.arpa.arpa_loops.float32_texts` against pyarrow's cast to string.

    python benchmarks/float_text.py               # speed, then a check of 2^26 patterns
    python benchmarks/float_text.py --exhaustive  # the check over all 2^32 float32s

Speed: nanoseconds a number to make the texts of 20M float32 log10 probabilities
(uniform in [0, 1), as an ARPA's are spread), as a string array's offsets and bytes;
best of 5 interleaved rounds, one thread.  The check: every bit pattern of a range
(all 2^32 with --exhaustive, in 2^24-pattern slices on two processes) formatted both
ways, the offsets and bytes compared.  Appends to benchmarks/results.jsonl.
"""

import argparse
import concurrent.futures
import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import print_table, record  # noqa: E402
from snm_core.io.arrays import string_buffers  # noqa: E402
from snm_core.arpa.arpa_loops import MAX_CHARS, float32_texts  # noqa: E402

SLICE = 1 << 24
NUMBERS = 20_000_000
ROUNDS = 5


def pyarrow_texts(values):
    offsets, data = string_buffers(pc.cast(pa.array(values), pa.string()))
    return offsets.astype(np.int64) - offsets[0], data


def check_slice(first):
    """(patterns that differ, the first few of them, the longest text) for the bit
    patterns first..first + SLICE - 1."""
    values = np.arange(first, first + SLICE, dtype=np.uint32).view(np.float32)
    offsets, data = float32_texts(values)
    theirs_offsets, theirs = pyarrow_texts(values)
    longest = int(np.diff(offsets).max())
    if np.array_equal(offsets, theirs_offsets) and np.array_equal(data, theirs):
        return 0, [], longest
    ours = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(SLICE)]
    wanted = pc.cast(pa.array(values), pa.string()).to_pylist()
    bad = [i for i in range(SLICE) if ours[i].decode() != wanted[i]]
    return len(bad), [(hex(first + i), ours[i], wanted[i]) for i in bad[:5]], longest


def speed():
    values = np.log10(np.random.default_rng(0).uniform(0, 1, NUMBERS)).astype(np.float32)
    float32_texts(values[:10])
    best = {"snm": float("inf"), "pyarrow": float("inf")}
    for _ in range(ROUNDS):
        for name, fn in (("snm", float32_texts), ("pyarrow", pyarrow_texts)):
            start = time.perf_counter()
            fn(values)
            best[name] = min(best[name], time.perf_counter() - start)
    return [{"formatter": name, "ns_per_number": round(seconds / NUMBERS * 1e9, 1),
             "ratio": round(seconds / best["pyarrow"], 3)} for name, seconds in best.items()]


def check(slices):
    started, differ, longest, examples = time.perf_counter(), 0, 0, []
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        for count, few, length in pool.map(check_slice, [s * SLICE for s in slices]):
            differ, longest = differ + count, max(longest, length)
            examples += few
    return {"patterns": len(slices) * SLICE, "differ": differ, "examples": examples[:5],
            "longest": longest, "max_chars": MAX_CHARS,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exhaustive", action="store_true",
                        help="check all 2^32 patterns (about ten minutes), not 2^26")
    args = parser.parse_args(argv)
    rows = speed()
    print_table(rows, ["formatter", "ns_per_number", "ratio"])
    every = 1 << 32 - 24
    slices = range(every) if args.exhaustive else range(0, every, every // 4)
    result = check(slices)
    print_table([result], ["patterns", "differ", "longest", "max_chars", "seconds"])
    if result["differ"]:
        print("differ:", result["examples"])
    record("float_text", rows + [{"check": "exhaustive" if args.exhaustive else "sample",
                                  **result}])
    return 1 if result["differ"] or result["longest"] > MAX_CHARS else 0


if __name__ == "__main__":
    sys.exit(main())
