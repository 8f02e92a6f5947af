/* wait.c: the one wait of the C fast path, its element-wise reductions and its
 * streaming copy (see fastpath.h). */
#include "fastpath.h"

#include <sched.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* n bytes from s to d with streaming (non-temporal) stores: d's lines are not read
 * before being written, and do not stay in cache. Half the traffic of a copy whose
 * destination is larger than L2 goes; a destination read back at once (a window a
 * peer reads) loses. No fence: the caller fences once after its last one (an sfence
 * per small piece drains the write-combining buffers each time, at twice the cost). */
static void stream_unfenced(char *d, const char *s, size_t n) {
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
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}

static void store_fence(void) {
#if defined(__x86_64__)
    _mm_sfence(); /* the streamed stores before any flag raised after */
#endif
}

void rz_stream_copy(void *dst, const void *src, size_t n) {
    stream_unfenced(dst, src, n);
    store_fence();
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* 0 when *flag >= value, 1 at the deadline, RC_SIGNAL with a Python error set.
 * ``pace``: the wait policy's times. ``ts``: NULL when the caller holds the GIL (it is released while sleeping);
 * else the caller runs without it (the pipe) and it is taken back to check for
 * signals between sleeps. */
int rz_wait_flag(const int64_t *flag, int64_t value, double deadline, const Pace *pace, PyThreadState **ts) {
    for (int i = 0; i < 64; i++)
        if (load_acquire(flag) >= value) return 0;
    double start = rz_now(), sleep_s = 20e-6;
    unsigned polls = 0;
    while (load_acquire(flag) < value) {
        cpu_relax();
        if (++polls & 255) continue;
        double t = rz_now();
        if (t > deadline) return 1;
        double waited = t - start;
        if (waited <= pace->spin) continue;
        if (waited < pace->spin + pace->yld) {
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
        sleep_s = sleep_s * 2 < pace->max_sleep ? sleep_s * 2 : pace->max_sleep;
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

static int reduce_loop(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src);

/* Whether dst lies a little above some source modulo 4 KiB. A core matches a load against the
 * older stores still in its store buffer by the address's low 12 bits first, so there every
 * store to dst[i] stalls the load of that source's element a few places ahead ("4K aliasing").
 * Two arrays side by side in malloc's heap are that: out right after x is x + nbytes + 16. On the
 * 2-core Intel VM a 24 MiB float32 all-reduce read in place took 6.4 ms with out 16 bytes above x
 * modulo 4 KiB and 2.5 ms with out 608 bytes above it (the stores' 56-entry buffer spans under
 * 2 KiB of 32-byte stores). */
static int aliases_4k(const void *dst, int64_t nsrc, const int64_t *src) {
    for (int64_t k = 0; k < nsrc; k++) {
        uintptr_t d = ((uintptr_t)dst - (uintptr_t)src[k]) & 4095;
        if (d != 0 && d < 2048) return 1;
    }
    return 0;
}

#define TILE 1024
#define TILE_SRCS 64
int rz_reduce(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src) {
    int64_t isz = dtype == DT_F32 || dtype == DT_I32 ? 4 : 8;
    if (nsrc == 1) {
        memmove(dst, (const void *)src[0], (size_t)(count * isz));
        return 0;
    }
    if (count * isz < 2 * TILE || nsrc > TILE_SRCS || !aliases_4k(dst, nsrc, src))
        return reduce_loop(dtype, op, dst, count, nsrc, src);
    /* a tile at a time into a buffer in L1, then copied: dst's stores come in bursts, after the
     * tile's loads, and alias at most the next tile's first loads */
    _Alignas(64) char tile[TILE];
    int64_t at[TILE_SRCS], per = TILE / isz;
    char *d = dst;
    for (int64_t lo = 0; lo < count; lo += per) {
        int64_t n = count - lo < per ? count - lo : per;
        for (int64_t k = 0; k < nsrc; k++) at[k] = src[k] + lo * isz;
        if (reduce_loop(dtype, op, tile, n, nsrc, at)) return -1;
        memcpy(d + lo * isz, tile, (size_t)(n * isz));
    }
    return 0;
}

static int reduce_loop(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src) {
    switch (dtype) {
    case DT_F32: return reduce_f32(op, dst, src, nsrc, count);
    case DT_F64: return reduce_f64(op, dst, src, nsrc, count);
    case DT_I32: return reduce_u32(op, dst, src, nsrc, count);
    case DT_I64: return reduce_u64(op, dst, src, nsrc, count);
    }
    return -1;
}


/* rz_reduce into dst with streaming stores (dst being a caller's out that nobody reads back at
 * once): a 1 KiB tile at a time into a buffer that stays in L1, then streamed out, one fence at
 * the end. On the 2-core Intel VM a 1 MiB float32 sum out of cache takes 78 us this way, 75 us
 * fused with 128-bit streaming stores, 93 us with ordinary stores; tiles of 4-16 KiB 91-95 us.
 * Tiles after the first start on 64-byte boundaries of dst, so the stream's body is aligned. */
int rz_reduce_stream(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src) {
    int64_t isz = dtype == DT_F32 || dtype == DT_I32 ? 4 : 8, at[TILE_SRCS];
    if (nsrc > TILE_SRCS) return rz_reduce(dtype, op, dst, count, nsrc, src);
    _Alignas(64) char tile[TILE];
    char *d = dst;
    int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63) / isz, per = TILE / isz, bad = 0;
    for (int64_t lo = 0; lo < count && !bad;) {
        int64_t n = lo == 0 && head ? head : per;
        if (n > count - lo) n = count - lo;
        for (int64_t k = 0; k < nsrc; k++) at[k] = src[k] + lo * isz;
        bad = rz_reduce(dtype, op, tile, n, nsrc, at);
        if (!bad) stream_unfenced(d + lo * isz, tile, (size_t)(n * isz));
        lo += n;
    }
    store_fence();
    return bad ? -1 : 0;
}

/* (address, base, deadline, spin, yield, max_sleep) of run() and pipe(); 0, or -1 with an error set. */
int rz_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, int64_t *addr, int64_t *base,
            double *deadline, Pace *pace) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *addr = PyLong_AsLongLong(args[0]);
    *base = PyLong_AsLongLong(args[1]);
    *deadline = PyFloat_AsDouble(args[2]);
    pace->spin = PyFloat_AsDouble(args[3]);
    pace->yld = PyFloat_AsDouble(args[4]);
    pace->max_sleep = PyFloat_AsDouble(args[5]);
    return PyErr_Occurred() ? -1 : 0;
}

/* stream(dst address, src address, nbytes): rz_stream_copy with the GIL released (a direct road's
 * Python path copying into the caller's out, as its programs' STREAM does). */
PyObject *rz_py_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "stream(dst, src, nbytes)");
        return NULL;
    }
    long long d = PyLong_AsLongLong(args[0]), s = PyLong_AsLongLong(args[1]), n = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "stream: %lld bytes", n);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rz_stream_copy(PTR(d), PTR(s), (size_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
