"""The SNM language model: pure Python and numpy (never imports apache_beam).

Modules: ``config`` (extraction configuration), ``vocab``, ``text`` (tokenising),
``features`` (events and feature keys), ``hashing``, ``synthetic`` (test corpus).
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
