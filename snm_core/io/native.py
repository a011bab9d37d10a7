"""The C loops of counting, text, the scoring layouts, ARPA and sampling (the extension
``snm_core._loops``), called through ctypes, which releases the GIL during a call.

Why C and not numba: numba's start (its import, its compiler's set-up, a cached
function's load) costs a process time and memory out of proportion to a short command
(benchmarks/README.md, "Figures behind the code"); this library loads at once.
setup.py builds it from ``snm_core/loops.c``, ``snm_core/io/radix.c``,
``snm_core/io/record_sort.c``, ``snm_core/io/scratch_codec.c``,
``snm_core/count/sketch.c``, ``snm_core/count/link_sums.c``, ``snm_core/text/words.c``,
``snm_core/scoring/layouts/hashed_loops.c``, ``trie_loops.c``,
``snm_core/arpa/arpa_loops.c``, ``snm_core/prune/reestimate_loops.c`` and
``snm_core/sample/sample_loops.c``; each Python module that wraps a loop declares its
signature here (:func:`function`), and the few that the module exports as methods on
buffers are reached through :func:`module`.
"""

import ctypes
import importlib.machinery
import importlib.util
import os

import numpy as np

from snm_core.io.errors import SnmInputError

#: What ``loops_version`` returns: a library built from other sources is refused.
VERSION = 14

i32, i64, u64, f64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double
ptr = ctypes.c_void_p

_LIB = None


def load(module, version_function, version):
    """The ctypes library of the extension ``module``, checked to be ``version``."""
    found = importlib.util.find_spec(module)
    if found is None or found.origin is None:
        raise SnmInputError(not_built(module))
    lib = ctypes.CDLL(found.origin)
    check = getattr(lib, version_function)
    check.argtypes, check.restype = [], i64
    if check() != version:
        raise SnmInputError(f"{module} is out of date: reinstall the package")
    return lib


#: The C extensions of this package, as module names.
EXTENSIONS = ("snm_core._loops", "snm_core.fit._kernels")

#: This process's ``snm_core``.
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def not_built(module, package=PACKAGE):
    """What to say when ``module`` (a C extension of this package) cannot be found in
    ``package`` (an ``snm_core`` directory).

    The usual cause is a clone's source tree imported ahead of the installed
    package: Python puts the working directory (or a script's) first on its path,
    so a process started in a clone, a Beam worker among them, imports the clone's
    ``snm_core``, which holds the C sources but no built libraries."""
    root = os.path.dirname(package)
    if os.path.isfile(os.path.join(root, "setup.py")):
        return (f"{module} is not built in the source tree {package}, which Python "
                f"imports ahead of the installed snm in a process started in {root} (the "
                f"working directory comes first on its path): run from another directory, "
                f"or build the tree in place with pip install -e {root}")
    return (f"{module} is not built in {package}: reinstall the package (pip install "
            "snm-lm, or pip install -e CLONE), which compiles its C sources")


def refuse_shadowing_tree(directory):
    """Raise :class:`SnmInputError` if a Python process started in ``directory`` would
    import an ``snm_core`` there whose C extensions are not built (a clone, ahead of
    the installed package)."""
    tree = os.path.join(os.path.abspath(directory), "snm_core")
    if not os.path.isfile(os.path.join(tree, "__init__.py")) or os.path.samefile(tree, PACKAGE):
        return
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for module in EXTENSIONS:
        parts = module.split(".")[1:]
        folder, name = os.path.join(tree, *parts[:-1]), parts[-1]
        if not any(os.path.isfile(os.path.join(folder, name + s)) for s in suffixes):
            raise SnmInputError(not_built(module, tree))


def library():
    """The loaded ``snm_core._loops`` (loaded on first use)."""
    global _LIB
    if _LIB is None:
        _LIB = load("snm_core._loops", "loops_version", VERSION)
    return _LIB


def module():
    """``snm_core._loops`` as a Python module, for the few loops it exports as methods
    (called without ctypes' conversions), once :func:`library` has checked it."""
    library()
    return importlib.import_module("snm_core._loops")


def function(name, args, result=None):
    """The library's function ``name`` with its argument and result types set."""
    f = getattr(library(), name)
    f.argtypes, f.restype = args, result
    return f


def address(array, dtype=None):
    """The data pointer of a C-contiguous array (checked), or None for None."""
    if array is None:
        return None
    if dtype is not None and array.dtype != np.dtype(dtype):
        raise TypeError(f"expected {np.dtype(dtype)}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise TypeError("expected a C-contiguous array")
    if array.flags.writeable and array.size:
        # A third of the time of array.ctypes.data (a decoder's call addresses several).
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.ctypes.data


def checked(status, what):
    """``status`` of a loop that allocates its work arrays: below 0, out of memory."""
    if status < 0:
        raise MemoryError(f"{what}: out of memory for its work arrays")
