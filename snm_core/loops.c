/* The extension `snm_core._loops`: the C loops of counting, text, the scoring layouts,
 * ARPA and sampling (snm_core/io/radix.c, snm_core/count/sketch.c, snm_core/text/words.c,
 * snm_core/scoring/layouts/hashed_loops.c and trie_loops.c, snm_core/arpa/arpa_loops.c,
 * snm_core/sample/sample_loops.c),
 * called through ctypes (snm_core/io/native.py).  A module object, so that pip builds
 * and installs the library like any extension. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

int64_t trie_advance(const void *tables, const int64_t *context, const int32_t *words,
                     int64_t state_width, const int32_t *target, const int64_t *rank,
                     int64_t n, int64_t min_n, int64_t max_n, int64_t tags, double *prob,
                     int64_t *ngram, int64_t *following, int32_t *new_words, int64_t *length);

int64_t scorer_advance(const void *scorer, const int32_t *words, const int64_t *length,
                       const int32_t *target, int64_t n, void *out);

/* 0 when a method got `expected` arguments, else -1 with a TypeError set. */
static int check_arity(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs == expected) return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, expected);
    return -1;
}

static void release_buffers(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) PyBuffer_Release(&views[i]);
}

/* The C-contiguous buffers of args[0:count] (writable ones from `first_output` on), their
 * pointers in `pointers`; 0, or -1 with a Python error set and nothing held. */
static int get_buffers(PyObject *const *args, int count, int first_output, Py_buffer *views,
                       void **pointers) {
    for (int i = 0; i < count; i++) {
        int flags = PyBUF_C_CONTIGUOUS | (i >= first_output ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[i], &views[i], flags) < 0) {
            release_buffers(views, i);
            return -1;
        }
        pointers[i] = views[i].buf;
    }
    return 0;
}

/* trie_advance(tables, context, words, target, rank, prob, ngram, following, new_words,
 * length, state_width, n, min_n, max_n, tags): trie_loops.c's trie_advance called without
 * ctypes, whose conversion of fifteen arguments costs a decoder's one state a word more
 * than the loop (snm_core/scoring/layouts/trie_loops.py checks the arrays). */
static PyObject *py_trie_advance(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_arity(nargs, 15, "trie_advance") < 0) return NULL;
    void *tables = PyLong_AsVoidPtr(args[0]);
    int64_t sizes[5];
    for (int i = 0; i < 5; i++) sizes[i] = PyLong_AsLongLong(args[10 + i]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer views[9];
    void *p[9];
    if (get_buffers(args + 1, 9, 4, views, p) < 0) return NULL;
    int64_t status;
    Py_BEGIN_ALLOW_THREADS
    status = trie_advance(tables, p[0], p[1], sizes[0], p[2], p[3], sizes[1], sizes[2],
                          sizes[3], sizes[4], p[4], p[5], p[6], p[7], p[8]);
    Py_END_ALLOW_THREADS
    release_buffers(views, 9);
    return PyLong_FromLongLong(status);
}

/* scorer_advance(scorer, words, length, target, out, n): hashed_loops.c's scorer_advance,
 * the hashed layouts' decoder step, called as trie_advance is. */
static PyObject *py_scorer_advance(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_arity(nargs, 6, "scorer_advance") < 0) return NULL;
    void *scorer = PyLong_AsVoidPtr(args[0]);
    int64_t n = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer views[4];
    void *p[4];
    if (get_buffers(args + 1, 4, 3, views, p) < 0) return NULL;
    int64_t status;
    Py_BEGIN_ALLOW_THREADS
    status = scorer_advance(scorer, p[0], p[1], p[2], n, p[3]);
    Py_END_ALLOW_THREADS
    release_buffers(views, 4);
    return PyLong_FromLongLong(status);
}

static PyMethodDef methods[] = {
    {"scorer_advance", (PyCFunction)(void (*)(void))py_scorer_advance, METH_FASTCALL,
     "hashed_loops.c's scorer_advance on buffers (snm_core/scoring/layouts/hashed_kernels.py)."},
    {"trie_advance", (PyCFunction)(void (*)(void))py_trie_advance, METH_FASTCALL,
     "trie_loops.c's trie_advance on buffers (snm_core/scoring/layouts/trie_loops.py)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops",
                                    "Compiled loops called through ctypes (snm_core/io/native.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }

/* What snm_core/io/native.py checks after loading: a library built from other sources
 * is refused. */
int64_t loops_version(void) { return 14; }
