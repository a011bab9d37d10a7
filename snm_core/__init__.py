"""The SNM language model: numpy, pyarrow, numba and a small C library (never imports
apache_beam).  Subpackages, in the order of the papers' stages (DESIGN.md 1.1, 8):

* ``io``: storage (local or object stores), Parquet tables, text files, run locks,
  errors, memory, checkpoints, loss checks, array algorithms;
* ``text``: from text to features: configuration and presets, vocabulary, tokenising,
  feature extraction, hashing, their numba twins, the synthetic corpus;
* ``count``: counting: batch partials, the bucket merge, continuation counts;
* ``fit``: the adjustment: small M, meta-features, the compiled problem, AdaGrad, the C
  loops, choosing the variant and the epochs;
* ``model``: applying the adjustment, scoring shared by every family, the model card,
  the scoring arrays, ARPA, pruning, sampling text;
* ``model.layouts``: the forms of the scoring arrays: hashed, trie and small, their
  compiled loops, Huffman codes, one checked ``.npy`` loader;
* ``loglinear``: the log-linear family with structured penalties;
* ``stages``: typed stage directories (one manifest class a kind) and their checks.
"""

import os

__version__ = "0.1.0"

# Arrow allocates through malloc, as numpy does, so that one malloc_trim gives
# back what both freed.  Arrow reads this once, when pyarrow is first imported,
# and only the variable reaches its C++ internals (the Parquet writer's
# buffers): pyarrow.set_memory_pool does not.  Arrow's default pool (mimalloc)
# keeps freed pages.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# numpy's OpenBLAS starts a thread per core at import, which spins now and then
# though nothing here calls BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
