/* The direct path's repeated small calls, run in C (collectives._fastpath).
 *
 * A collective that a caller repeats on the same arrays (a plan hit, see
 * collectives/plan.py) takes the same steps every time: copy the input into the
 * stage window, post the header, wait for every peer's flag, compare headers,
 * reduce or copy, raise the flag, maybe wait again. collectives/symmetric/fast.py
 * writes those steps once per call shape as a *program*: an array of int64 words,
 * one op after another, every address absolute. run() executes it. The program
 * does exactly what the Python path does (signals.py, direct.py), flag for flag,
 * so a rank running a program and a rank running the Python path interoperate.
 *
 * Ops (the words after the op code):
 *   COPY    dst src nbytes
 *   POST    area head nwords l0 l1 l2 l3 flag phase
 *             area[0:nwords] = head[0:nwords]; area[nwords:nwords+4] = l0..l3;
 *             then flag = base + phase (release: data and header first)
 *   WAIT    flag phase peer step     spin until flag >= base + phase
 *   HCHECK  mine peer nwords         a peer's header words equal ours?
 *   LCHECK  locs e0 e1 e2 e3         a peer's posted locations are the ones the
 *                                    program was written for?
 *   REDUCE  dtype op dst count nsrc src...   dst = src0 op src1 op ... (in order)
 *   RAISE   flag phase               flag = base + phase
 *   CMAREAD pid remote dst nbytes    dst = nbytes at address remote of process pid
 *                                    (process_vm_readv: a peer's private input, cma.py)
 *   END
 *
 * pipe(descriptor address, base, deadline, spin) runs a large all-reduce or
 * all-gather of private arrays pipelined through the pipe window (see pipe()
 * below and collectives/symmetric/pipe.py).
 *
 * run(program address, base, deadline, spin) returns 0 when done; -1 when a
 * header differs (the caller raises MismatchError from the slots); -2 when a
 * peer's locations differ (the header check passed: the caller's Python path
 * goes on from there); 1 + the word index of a WAIT that reached the deadline
 * (the caller names the peer and the step). Waits spin for ``spin`` seconds,
 * then yield for 2 ms, then sleep (20 us doubling to 200 us) with the GIL
 * released, checking for signals (Ctrl-C) between sleeps: the same schedule as
 * signals.py. Nothing here allocates; a program's memory is kept alive by its
 * Python owner.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

enum { OP_END, OP_COPY, OP_POST, OP_WAIT, OP_HCHECK, OP_LCHECK, OP_REDUCE, OP_RAISE, OP_CMAREAD };
#define BIG_BYTES (256 * 1024) /* copies and reductions this large run with the GIL released */
enum { DT_F32, DT_F64, DT_I32, DT_I64 };
enum { RED_SUM, RED_PROD, RED_MAX, RED_MIN };

#define RC_MISMATCH (-1)
#define RC_CHANGED (-2)
#define RC_SIGNAL (-3)

static inline int64_t load_acquire(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_release(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* Python's time.monotonic() */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 0 when *flag >= value, 1 at the deadline, RC_SIGNAL with a Python error set.
 * ``ts``: NULL when the caller holds the GIL (it is released while sleeping);
 * else the caller runs without it (the pipe) and it is taken back to check for
 * signals between sleeps. */
static int wait_flag(const int64_t *flag, int64_t value, double deadline, double spin, PyThreadState **ts) {
    for (int i = 0; i < 64; i++)
        if (load_acquire(flag) >= value) return 0;
    double start = now(), sleep_s = 20e-6;
    unsigned polls = 0;
    while (load_acquire(flag) < value) {
        cpu_relax();
        if (++polls & 255) continue;
        double t = now();
        if (t > deadline) return 1;
        double waited = t - start;
        if (waited <= spin) continue;
        if (waited < spin + 2e-3) {
            sched_yield();
            continue;
        }
        struct timespec tsl = {0, (long)(sleep_s * 1e9)};
        int bad;
        if (ts == NULL) {
            Py_BEGIN_ALLOW_THREADS
            nanosleep(&tsl, NULL);
            Py_END_ALLOW_THREADS
            bad = PyErr_CheckSignals() < 0;
        } else {
            nanosleep(&tsl, NULL);
            PyEval_RestoreThread(*ts);
            bad = PyErr_CheckSignals() < 0;
            *ts = PyEval_SaveThread();
        }
        if (bad) return RC_SIGNAL;
        sleep_s = sleep_s * 2 < 200e-6 ? sleep_s * 2 : 200e-6;
    }
    return 0;
}

/* Element-wise, sources combined in rank order: the bits numpy's ufuncs give
 * (direct.py _reduce). Integers wrap (unsigned arithmetic), as numpy's do. */
#define SUM(a, b) ((a) + (b))
#define PROD(a, b) ((a) * (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define REDUCE_LOOP(T, F)                                                           \
    do {                                                                            \
        T *d = (T *)dst;                                                            \
        const T *s0 = (const T *)src[0], *s1 = (const T *)src[1];                  \
        if (nsrc == 2) {                                                            \
            for (int64_t i = 0; i < count; i++) d[i] = (T)F(s0[i], s1[i]);         \
        } else {                                                                    \
            for (int64_t i = 0; i < count; i++) {                                   \
                T acc = (T)F(s0[i], s1[i]);                                         \
                for (int64_t k = 2; k < nsrc; k++) acc = (T)F(acc, ((const T *)src[k])[i]); \
                d[i] = acc;                                                         \
            }                                                                       \
        }                                                                           \
    } while (0)
#define BY_OP(T)                                       \
    switch (op) {                                      \
    case RED_SUM: REDUCE_LOOP(T, SUM); return 0;        \
    case RED_PROD: REDUCE_LOOP(T, PROD); return 0;      \
    case RED_MAX: REDUCE_LOOP(T, MAX); return 0;        \
    case RED_MIN: REDUCE_LOOP(T, MIN); return 0;        \
    }                                                  \
    return -1

static int reduce_f32(int64_t op, void *dst, const int64_t *src, int64_t nsrc, int64_t count) { BY_OP(float); }
static int reduce_f64(int64_t op, void *dst, const int64_t *src, int64_t nsrc, int64_t count) { BY_OP(double); }
static int reduce_u32(int64_t op, void *dst, const int64_t *src, int64_t nsrc, int64_t count) {
    if (op == RED_MAX || op == RED_MIN) { BY_OP(int32_t); }
    BY_OP(uint32_t);
}
static int reduce_u64(int64_t op, void *dst, const int64_t *src, int64_t nsrc, int64_t count) {
    if (op == RED_MAX || op == RED_MIN) { BY_OP(int64_t); }
    BY_OP(uint64_t);
}

static int reduce(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src) {
    if (nsrc == 1) {
        memmove(dst, (const void *)src[0], (size_t)count * (dtype == DT_F32 || dtype == DT_I32 ? 4 : 8));
        return 0;
    }
    switch (dtype) {
    case DT_F32: return reduce_f32(op, dst, src, nsrc, count);
    case DT_F64: return reduce_f64(op, dst, src, nsrc, count);
    case DT_I32: return reduce_u32(op, dst, src, nsrc, count);
    case DT_I64: return reduce_u64(op, dst, src, nsrc, count);
    }
    return -1;
}

#define PTR(w) ((void *)(intptr_t)(w))

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

static int64_t execute(const int64_t *prog, int64_t base, double deadline, double spin) {
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
        case OP_CMAREAD:
            if (w[4] && cma_read(w[1], w[2], PTR(w[3]), w[4])) return RC_SIGNAL;
            at += 5;
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
            int r = wait_flag(PTR(w[1]), base + w[2], deadline, spin, NULL);
            if (r == RC_SIGNAL) return RC_SIGNAL;
            if (r) return 1 + at;
            at += 5;
            break;
        }
        case OP_HCHECK:
            if (memcmp(PTR(w[1]), PTR(w[2]), (size_t)w[3] * 8)) return RC_MISMATCH;
            at += 4;
            break;
        case OP_LCHECK:
            if (memcmp(PTR(w[1]), w + 2, 4 * 8)) return RC_CHANGED;
            at += 6;
            break;
        case OP_REDUCE: {
            int bad;
            if (w[4] * (w[1] == DT_F32 || w[1] == DT_I32 ? 4 : 8) < BIG_BYTES) {
                bad = reduce(w[1], w[2], PTR(w[3]), w[4], w[5], w + 6);
            } else { /* a pushed chunk: other threads run meanwhile, as during numpy's ufuncs */
                Py_BEGIN_ALLOW_THREADS
                bad = reduce(w[1], w[2], PTR(w[3]), w[4], w[5], w + 6);
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

/* run(program, base, deadline, spin) -> int; see the top of this file. */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(program, base, deadline, spin)");
        return NULL;
    }
    const int64_t *prog = PTR(PyLong_AsLongLong(args[0]));
    int64_t base = PyLong_AsLongLong(args[1]);
    double deadline = PyFloat_AsDouble(args[2]), spin = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) return NULL;
    int64_t rc = execute(prog, base, deadline, spin);
    if (rc == RC_SIGNAL) return NULL;
    return PyLong_FromLongLong(rc);
}

/* ------------------------------------------------------------------ pipe
 * A large all-reduce or all-gather whose arrays are private to each rank
 * (collectives/symmetric/pipe.py has the why and the measurements). The call
 * moves through the pipe window in chunks of C bytes, D slots deep: each rank
 * copies the chunks its peers need into its slots, peers take them from there
 * while they are still in cache, and every write into the caller's out is a
 * non-temporal (streaming) store, which skips reading out's lines before
 * writing them. Every rank counts its steps in three words of its control
 * slot (staged, reduced, copied out), never reset: a call's step k is
 * sequence base + k for every rank, and slot (base + k) % D. Every step moves
 * all three (an all-gather's too), and a rank's copied-out count means it has
 * finished reading every slot of that step, whichever collective it was.
 *
 * Descriptor (int64 words):
 *   0 kind (0 all-reduce, 1 all-gather)  1 n  2 r  3 x  4 out  5 itemsize
 *   6 dtype  7 op  8 C (bytes, a multiple of 64)  9 D  10 own (all-gather:
 *   copy our own piece into out; 0 when x is that piece already)
 *   11 k (out: the chunk a timed-out wait was at)
 *   12.. n slot-window bases, n counter addresses, n offsets, n counts
 *   (elements: all-reduce segments of x and out, all-gather pieces of out)
 * Returns 0, or 1 + 3 q + step (a wait on rank q's step reached the deadline;
 * step 0 staged, 1 reduced, 2 copied out), or RC_SIGNAL with a Python error.
 */
enum { PIPE_STAGED, PIPE_REDUCED, PIPE_OUT };
#define PIPE_HEAD 12

/* Streaming stores: the destination's lines are not read before being written. */
static void stream_copy(char *d, const char *s, size_t n) {
#if defined(__x86_64__)
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence(); /* ordered before the counter that says the chunk is there */
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}

/* Elements [lo, lo + c) of a range of count elements, c clipped at the end (<= 0: none). */
static inline int64_t clip(int64_t count, int64_t lo, int64_t ce) {
    int64_t c = count - lo;
    return c < ce ? c : ce;
}

#define PIPE_WAIT(q, which, value)                                                                  \
    do {                                                                                            \
        int rc_ = wait_flag(&cnt[q][which], (value), deadline, spin, &ts);                          \
        if (rc_) {                                                                                  \
            d[11] = k;                                                                              \
            PyEval_RestoreThread(ts);                                                               \
            return rc_ == RC_SIGNAL ? RC_SIGNAL : 1 + 3 * (q) + (which);                            \
        }                                                                                           \
    } while (0)

static int64_t pipe_run(int64_t *d, int64_t base, double deadline, double spin) {
    const int64_t kind = d[0], n = d[1], r = d[2], isz = d[5], C = d[8], D = d[9], own = d[10];
    char *x = PTR(d[3]), *out = PTR(d[4]);
    char *const *slot = (char *const *)(d + PIPE_HEAD);
    int64_t *const *cnt = (int64_t *const *)(d + PIPE_HEAD + n);
    const int64_t *off = d + PIPE_HEAD + 2 * n, *count = d + PIPE_HEAD + 3 * n;
    const int64_t ce = C / isz; /* elements a chunk */
    int64_t K = 0, k = 0;
    for (int64_t q = 0; q < n; q++) {
        int64_t kq = (count[q] + ce - 1) / ce;
        if (kq > K) K = kq;
    }
    PyThreadState *ts = PyEval_SaveThread();
    for (k = 0; k < K; k++) {
        const int64_t g = base + k, s = g % D, lo = k * ce;
        if (kind == 0) {
            /* all-reduce. 1: the chunks of the peers' segments, into our slots for them
             * (once each peer has reduced what slot s held, sequence g - D) */
            for (int64_t q = 0; q < n; q++) {
                int64_t c = clip(count[q], lo, ce);
                if (q == r || c <= 0) continue;
                PIPE_WAIT(q, PIPE_REDUCED, g - D + 1);
                memcpy(slot[r] + (q * D + s) * C, x + (off[q] + lo) * isz, (size_t)(c * isz));
            }
            store_release(&cnt[r][PIPE_STAGED], g + 1);
            /* 2: our segment's chunk, reduced in rank order into our reduced slot (once
             * every peer has copied what it held), then streamed into out */
            int64_t c = clip(count[r], lo, ce);
            for (int64_t q = 0; q < n; q++) {
                if (q == r) continue;
                if (c > 0) PIPE_WAIT(q, PIPE_STAGED, g + 1);
                PIPE_WAIT(q, PIPE_OUT, g - D + 1);
            }
            if (c > 0) {
                int64_t src[64];
                char *red = slot[r] + (n * D + s) * C;
                for (int64_t q = 0; q < n; q++)
                    src[q] = (int64_t)(intptr_t)(q == r ? x + (off[r] + lo) * isz : slot[q] + (r * D + s) * C);
                if (reduce(d[6], d[7], red, c, n, src)) {
                    PyEval_RestoreThread(ts);
                    PyErr_Format(PyExc_ValueError, "fastpath: no reduction for dtype %lld, op %lld",
                                 (long long)d[6], (long long)d[7]);
                    return RC_SIGNAL;
                }
                stream_copy(out + (off[r] + lo) * isz, red, (size_t)(c * isz));
            }
            store_release(&cnt[r][PIPE_REDUCED], g + 1);
            /* 3: every peer's reduced chunk into out */
            for (int64_t q = 0; q < n; q++) {
                int64_t cq = clip(count[q], lo, ce);
                if (q == r || cq <= 0) continue;
                PIPE_WAIT(q, PIPE_REDUCED, g + 1);
                stream_copy(out + (off[q] + lo) * isz, slot[q] + (n * D + s) * C, (size_t)(cq * isz));
            }
            store_release(&cnt[r][PIPE_OUT], g + 1);
        } else {
            /* all-gather: our piece's chunk into slot s (once every peer has copied what
             * it held), then every peer's chunk into out */
            int64_t c = clip(count[r], lo, ce);
            for (int64_t q = 0; q < n; q++)
                if (q != r && c > 0) PIPE_WAIT(q, PIPE_OUT, g - D + 1);
            if (c > 0) {
                memcpy(slot[r] + s * C, x + lo * isz, (size_t)(c * isz));
            }
            store_release(&cnt[r][PIPE_STAGED], g + 1);
            if (c > 0 && own) stream_copy(out + (off[r] + lo) * isz, slot[r] + s * C, (size_t)(c * isz));
            for (int64_t q = 0; q < n; q++) {
                int64_t cq = clip(count[q], lo, ce);
                if (q == r || cq <= 0) continue;
                PIPE_WAIT(q, PIPE_STAGED, g + 1);
                stream_copy(out + (off[q] + lo) * isz, slot[q] + s * C, (size_t)(cq * isz));
            }
            store_release(&cnt[r][PIPE_REDUCED], g + 1); /* every counter moves at every step, */
            store_release(&cnt[r][PIPE_OUT], g + 1);     /* whichever collective took it */
        }
    }
    PyEval_RestoreThread(ts);
    return 0;
}

/* pipe(descriptor, base, deadline, spin) -> int; see above. */
static PyObject *py_pipe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "pipe(descriptor, base, deadline, spin)");
        return NULL;
    }
    int64_t *desc = PTR(PyLong_AsLongLong(args[0]));
    int64_t base = PyLong_AsLongLong(args[1]);
    double deadline = PyFloat_AsDouble(args[2]), spin = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (desc[1] < 1 || desc[1] > 64 || desc[8] < 64 || desc[8] % 64 || desc[9] < 1 || desc[5] < 1) {
        PyErr_SetString(PyExc_ValueError, "fastpath.pipe: bad descriptor (1-64 ranks, chunks of 64-byte lines)");
        return NULL;
    }
    int64_t rc = pipe_run(desc, base, deadline, spin);
    if (rc == RC_SIGNAL) return NULL;
    return PyLong_FromLongLong(rc);
}

static PyMethodDef methods[] = {
    {"pipe", (PyCFunction)(void (*)(void))py_pipe, METH_FASTCALL, "Run a pipelined all-reduce or all-gather (see csrc/fastpath.c)."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "Run a direct-path program (see csrc/fastpath.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "The direct path's programs, run in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* the encodings fast.py writes programs in */
    const char *names[] = {"END", "COPY", "POST", "WAIT", "HCHECK", "LCHECK", "REDUCE", "RAISE", "CMAREAD"};
    for (int i = 0; i < 9; i++)
        if (PyModule_AddIntConstant(m, names[i], i) < 0) return NULL;
    if (PyModule_AddIntConstant(m, "PIPE_HEAD", PIPE_HEAD) < 0 ||
        PyModule_AddIntConstant(m, "RC_MISMATCH", RC_MISMATCH) < 0 ||
        PyModule_AddIntConstant(m, "RC_CHANGED", RC_CHANGED) < 0)
        return NULL;
    return m;
}
