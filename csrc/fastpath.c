/* fastpath.c: the direct roads' repeated calls, run in C (collectives._fastpath).
 *
 * A collective that a caller repeats on the same arrays (a plan hit, see
 * collectives/plan.py) takes the same steps every time: copy the input into the
 * stage window, post the header, wait for every peer's flag, compare headers,
 * reduce or copy, raise the flag, maybe wait again. collectives/fast/writer.py
 * writes those steps once per call shape as a *program*: an array of int64 words,
 * one op after another, every address absolute. run() executes it. The program
 * does exactly what the Python path does (signals.py, direct.py), flag for flag,
 * so a rank running a program and a rank running the Python path interoperate.
 * The module exports its codes: the op names, DTYPES, OPS and the return codes.
 *
 * Ops (the words after the op code):
 *   COPY    dst src nbytes
 *   POST    area head nwords l0 l1 l2 l3 flag phase
 *             area[0:nwords] = head[0:nwords]; area[nwords:nwords+4] = l0..l3;
 *             then flag = base + phase (release: data and header first)
 *   WAIT    flag phase peer step     spin until flag >= base + phase
 *   HCHECK  mine peer nwords         a peer's header words equal ours?
 *   LCHECK  locs e0 e1 e2 e3         a peer's posted locations are the ones the
 *                                    program was written for? (ANY: any value;
 *                                    a private input read in place is at an
 *                                    address of the peer's own choosing)
 *   REDUCE  dtype op dst count nsrc src...   dst = src0 op src1 op ... (in order)
 *   RAISE   flag phase               flag = base + phase
 *   CMAREAD pid at add dst nbytes    dst = nbytes at address *at + add of process pid
 *                                    (process_vm_readv: a peer's private input, cma.py,
 *                                    at the address the peer posted this call)
 *   STREAM  dst src nbytes           as COPY, with streaming stores (wait.c): the
 *                                    caller's out, large, which no peer reads
 *   SREDUCE dtype op dst count nsrc src...   as REDUCE, dst written with streaming stores
 *   END
 *
 * pipe(descriptor address, base, deadline, spin, yield, max_sleep) runs a large
 * all-reduce or all-gather of private arrays pipelined through the pipe window
 * (pipe.c and collectives/symmetric/pipe.py).
 *
 * run(program address, base, deadline, spin, yield, max_sleep) returns 0 when
 * done; -1 when a header differs (the caller raises MismatchError from the
 * slots); -2 when a peer's locations differ (the header check passed: the
 * caller's Python path goes on from there); 1 + the word index of a WAIT that
 * reached the deadline (the caller names the peer and the step). Waits spin,
 * yield, then sleep with the GIL released, checking for signals (Ctrl-C)
 * between sleeps: collectives/waiting.py's policy, its times passed in
 * (wait.c). Nothing here allocates; a program's memory is kept alive by its
 * Python owner. lane.c runs programs from a call's first Python line.
 */
#include "fastpath.h"
#include "lane.h" /* NpArray: numpy's array fields */

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

enum { OP_END, OP_COPY, OP_POST, OP_WAIT, OP_HCHECK, OP_LCHECK, OP_REDUCE, OP_RAISE, OP_CMAREAD, OP_STREAM, OP_SREDUCE };

static void copy_bytes(void *dst, const void *src, size_t n) {
    if (n < BIG_BYTES) {
        memcpy(dst, src, n);
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    memcpy(dst, src, n);
    Py_END_ALLOW_THREADS
}

/* n bytes at remote in process pid into dst; 0, or -1 with an OSError set. */
static int cma_read(int64_t pid, int64_t remote, void *dst, int64_t n) {
    int64_t done = 0;
    while (done < n) {
        struct iovec local = {(char *)dst + done, (size_t)(n - done)};
        struct iovec peer = {(char *)PTR(remote) + done, (size_t)(n - done)};
        ssize_t got;
        Py_BEGIN_ALLOW_THREADS
        got = process_vm_readv((pid_t)pid, &local, 1, &peer, 1, 0);
        Py_END_ALLOW_THREADS
        if (got <= 0) {
            int err = got < 0 ? errno : EIO;
            PyErr_Format(PyExc_OSError, "process_vm_readv of %lld bytes from pid %lld failed after %lld: %s",
                         (long long)n, (long long)pid, (long long)done, strerror(err));
            return -1;
        }
        done += got;
    }
    return 0;
}

int64_t rz_execute(const int64_t *prog, int64_t base, double deadline, const Pace *pace) {
    int64_t at = 0;
    for (;;) {
        const int64_t *w = prog + at;
        switch (w[0]) {
        case OP_END:
            return 0;
        case OP_COPY:
            if (w[3]) copy_bytes(PTR(w[1]), PTR(w[2]), (size_t)w[3]);
            at += 4;
            break;
        case OP_STREAM:
            Py_BEGIN_ALLOW_THREADS
            rz_stream_copy(PTR(w[1]), PTR(w[2]), (size_t)w[3]);
            Py_END_ALLOW_THREADS
            at += 4;
            break;
        case OP_CMAREAD:
            if (w[5] && cma_read(w[1], load_acquire(PTR(w[2])) + w[3], PTR(w[4]), w[5])) return RC_SIGNAL;
            at += 6;
            break;
        case OP_POST: {
            int64_t *area = PTR(w[1]);
            memcpy(area, PTR(w[2]), (size_t)w[3] * 8);
            memcpy(area + w[3], w + 4, 4 * 8);
            store_release(PTR(w[8]), base + w[9]);
            at += 10;
            break;
        }
        case OP_WAIT: {
            int r = rz_wait_flag(PTR(w[1]), base + w[2], deadline, pace, NULL);
            if (r == RC_SIGNAL) return RC_SIGNAL;
            if (r) return 1 + at;
            at += 5;
            break;
        }
        case OP_HCHECK:
            if (memcmp(PTR(w[1]), PTR(w[2]), (size_t)w[3] * 8)) return RC_MISMATCH;
            at += 4;
            break;
        case OP_LCHECK: {
            const int64_t *got = PTR(w[1]);
            for (int i = 0; i < 4; i++)
                if (w[2 + i] != ANY && got[i] != w[2 + i]) return RC_CHANGED;
            at += 6;
            break;
        }
        case OP_REDUCE:
        case OP_SREDUCE: {
            int bad;
            if (w[4] * (w[1] == DT_F32 || w[1] == DT_I32 ? 4 : 8) < BIG_BYTES) {
                bad = (w[0] == OP_SREDUCE ? rz_reduce_stream : rz_reduce)(w[1], w[2], PTR(w[3]), w[4], w[5], w + 6);
            } else { /* a pushed chunk: other threads run meanwhile, as during numpy's ufuncs */
                Py_BEGIN_ALLOW_THREADS
                bad = (w[0] == OP_SREDUCE ? rz_reduce_stream : rz_reduce)(w[1], w[2], PTR(w[3]), w[4], w[5], w + 6);
                Py_END_ALLOW_THREADS
            }
            if (bad) {
                PyErr_Format(PyExc_ValueError, "fastpath: no reduction for dtype %lld, op %lld", (long long)w[1],
                             (long long)w[2]);
                return RC_SIGNAL;
            }
            at += 6 + w[5];
            break;
        }
        case OP_RAISE:
            store_release(PTR(w[1]), base + w[2]);
            at += 3;
            break;
        default:
            PyErr_Format(PyExc_ValueError, "fastpath: bad op %lld at word %lld", (long long)w[0], (long long)at);
            return RC_SIGNAL;
        }
    }
}

/* run(program, base, deadline, spin, yield, max_sleep) -> int; see the top of this file. */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t addr, base;
    double deadline;
    Pace pace;
    if (rz_args(args, nargs, "run(program, base, deadline, spin, yield, max_sleep)", &addr, &base, &deadline,
                &pace))
        return NULL;
    int64_t rc = rz_execute(PTR(addr), base, deadline, &pace);
    if (rc == RC_SIGNAL) return NULL;
    return PyLong_FromLongLong(rc);
}

/* desc(a) -> (address, shape, dtype, flags | OWNDATA) of an exact numpy array, else None: what
 * plan_cache.shape_key keys a plan by, read from the array's fields (lane.h's layout, which
 * plan_cache checks against numpy's own answer for a probe before it uses this). */
static PyObject *ndarray_type;

static PyObject *desc(PyObject *self, PyObject *a) {
    if (ndarray_type == NULL || Py_TYPE(a) != (PyTypeObject *)ndarray_type) Py_RETURN_NONE;
    const NpArray *r = (const NpArray *)a;
    PyObject *shape = PyTuple_New(r->nd);
    if (shape == NULL) return NULL;
    for (int i = 0; i < r->nd; i++) {
        PyObject *d = PyLong_FromSsize_t(r->dims[i]);
        if (d == NULL) return Py_DECREF(shape), NULL;
        PyTuple_SET_ITEM(shape, i, d);
    }
    return Py_BuildValue("(LNOi)", (long long)(intptr_t)r->data, shape, r->descr, r->flags | 4);
}

/* desc_init(numpy.ndarray): the type desc() reads */
static PyObject *desc_init(PyObject *self, PyObject *t) {
    Py_XSETREF(ndarray_type, Py_NewRef(t));
    Py_RETURN_NONE;
}

/* gate(words address, grace s, patience s, awake s) -> 0, 1 or 2: where an Engine's progress
 * thread waits, with the GIL released, so that waking it takes no GIL from the caller's thread
 * (engine.py). words: [0] calls queued and not yet claimed, [1] when the oldest was queued
 * (monotonic ns), [2] when the latest was, [3] attention (close, hurry, drain). An inline call
 * the engine waits out in Python, so the gate never runs beside one with a call queued.
 * 1: the caller has queued nothing for ``grace`` with a call unclaimed, or the oldest has
 * waited ``patience``; 2: attention; 0: nothing queued for ``awake``. */
static PyObject *gate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gate(words, grace, patience, awake)");
        return NULL;
    }
    const int64_t *w = (const int64_t *)PyLong_AsVoidPtr(args[0]);
    double grace = PyFloat_AsDouble(args[1]), patience = PyFloat_AsDouble(args[2]), awake = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) return NULL;
    int64_t grace_ns = (int64_t)(grace * 1e9), patience_ns = (int64_t)(patience * 1e9),
            awake_ns = (int64_t)(awake * 1e9);
    if (grace_ns < 1000) grace_ns = 1000;
    if (patience_ns < grace_ns) patience_ns = grace_ns;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t now = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec, nap = grace_ns;
        if (load_acquire(w + 3)) {
            rc = 2;
            break;
        }
        if (load_acquire(w) > 0) {
            int64_t left = load_acquire(w + 2) + grace_ns - now, last = load_acquire(w + 1) + patience_ns - now;
            if (last < left) left = last;
            if (left <= 0) {
                rc = 1;
                break;
            }
            if (left < nap) nap = left;
        } else if (now - load_acquire(w + 2) >= awake_ns && load_acquire(w) == 0) {
            rc = 0;
            break;
        }
        struct timespec d = {nap / 1000000000, nap % 1000000000};
        nanosleep(&d, NULL);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"desc", desc, METH_O, "(address, shape, dtype, flags | OWNDATA) of a numpy array, else None."},
    {"desc_init", desc_init, METH_O, "Set the numpy array type desc() reads."},
    {"pipe", (PyCFunction)(void (*)(void))rz_pipe, METH_FASTCALL, "Run a pipelined all-reduce or all-gather (pipe.c)."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "Run a direct-path program (fastpath.c)."},
    {"stream", (PyCFunction)(void (*)(void))rz_py_stream, METH_FASTCALL, "Copy with streaming stores (wait.c)."},
    {"gate", (PyCFunction)(void (*)(void))gate, METH_FASTCALL, "Where an Engine's progress thread waits (work.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "The direct roads' programs and the pipe, in C.",
                                    -1, methods};

/* name -> code dicts, the one place Python learns the codes from */
static int add_codes(PyObject *m, const char *attr, const char *const *names, int n) {
    PyObject *d = PyDict_New();
    if (d == NULL) return -1;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(i);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    return PyModule_AddObject(m, attr, d) < 0 ? (Py_DECREF(d), -1) : 0;
}

PyMODINIT_FUNC PyInit__fastpath(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    static const char *const ops[] = {"END", "COPY", "POST", "WAIT", "HCHECK", "LCHECK", "REDUCE", "RAISE", "CMAREAD", "STREAM", "SREDUCE"};
    for (int i = 0; i < 11; i++)
        if (PyModule_AddIntConstant(m, ops[i], i) < 0) return NULL;
    static const char *const dtypes[] = {"float32", "float64", "int32", "int64"}; /* DT_* */
    static const char *const reds[] = {"sum", "prod", "max", "min"};              /* RED_* */
    if (add_codes(m, "DTYPES", dtypes, 4) < 0 || add_codes(m, "OPS", reds, 4) < 0) return NULL;
    if (PyModule_AddIntConstant(m, "PIPE_HEAD", PIPE_HEAD) < 0 || PyModule_AddIntConstant(m, "RC_MISMATCH", RC_MISMATCH) < 0 ||
        PyModule_AddIntConstant(m, "RC_CHANGED", RC_CHANGED) < 0 || PyModule_AddIntConstant(m, "ANY", ANY) < 0 ||
        rz_add_lane(m) < 0)
        return NULL;
    return m;
}
