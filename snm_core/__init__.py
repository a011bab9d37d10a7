"""The SNM language model: pure Python and numpy (never imports apache_beam).

Modules: ``config`` (extraction configuration), ``vocab``, ``text`` (tokenising),
``features`` (events and feature keys), ``hashing``, ``synthetic`` (test corpus).
"""

import os

__version__ = "0.1.0"

# Arrow allocates through malloc, as numpy does, so that one malloc_trim gives
# back what both freed.  Arrow reads this once, when pyarrow is first imported,
# and only the variable reaches its C++ internals (the Parquet writer's
# buffers): pyarrow.set_memory_pool does not.  With Arrow's default pool
# (mimalloc) a kernel 5-gram count kept ~35 MiB more to the end.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# numpy's OpenBLAS starts a thread per core at import, which spins now and then
# (1% of a kernel 5-gram count's CPU samples) though nothing here calls BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
