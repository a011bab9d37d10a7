"""The SNM language model: numpy, pyarrow and C libraries; numba for the log-linear
family only (never imports apache_beam).  A folder a stage, in the order of the chain
(DESIGN.md 1.1, 8):

* ``io``: infrastructure: storage (local or object stores), Parquet tables, text files,
  run locks, errors, memory, checkpoints, loss checks, array algorithms;
* ``text``: from text to features: configuration and presets, vocabulary, tokenising,
  feature extraction, hashing, the synthetic corpus;
* ``stages``: typed stage directories (one manifest class a kind) and their checks;
* ``count``: counting: batch partials, the bucket merge, continuation counts,
  thresholds and their sketches;
* ``join``: held-out events and small M;
* ``fit``: the adjustment: meta-features, the compiled problem, AdaGrad, the C loops,
  choosing the variant and the epochs;
* ``apply``: the adjustment applied to the counts;
* ``scoring``: scoring shared by every family, decoder states, the scoring arrays and
  their ``layouts`` (hashed, packed, trie, small), the model card;
* ``arpa``: the back-off form and the ARPA export;
* ``prune``: pruning to a size;
* ``sample``: text drawn from a model;
* ``loglinear``: the log-linear family with structured penalties.
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
