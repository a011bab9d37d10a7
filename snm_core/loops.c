/* The extension `snm_core._loops`: the C loops of counting, text, the scoring layouts,
 * ARPA and sampling (snm_core/io/radix.c, snm_core/count/sketch.c, snm_core/text/words.c,
 * snm_core/scoring/layouts/hashed_loops.c and trie_loops.c, snm_core/arpa/arpa_loops.c,
 * snm_core/sample/sample_loops.c),
 * called through ctypes (snm_core/io/native.py).  A module object, so that pip builds
 * and installs the library like any extension. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops",
                                    "Compiled loops called through ctypes (snm_core/io/native.py).",
                                    -1, NULL};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }

/* What snm_core/io/native.py checks after loading: a library built from other sources
 * is refused. */
int64_t loops_version(void) { return 5; }
