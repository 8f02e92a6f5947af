/* pipe.c: the pipe, a large all-reduce or all-gather of private arrays in chunks (see below). */
#include "fastpath.h"

#include <string.h>

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

/* Elements [lo, lo + c) of a range of count elements, c clipped at the end (<= 0: none). */
static inline int64_t clip(int64_t count, int64_t lo, int64_t ce) {
    int64_t c = count - lo;
    return c < ce ? c : ce;
}

#define PIPE_WAIT(q, which, value)                                                                  \
    do {                                                                                            \
        int rc_ = rz_wait_flag(&cnt[q][which], (value), deadline, pace, &ts);                          \
        if (rc_) {                                                                                  \
            d[11] = k;                                                                              \
            PyEval_RestoreThread(ts);                                                               \
            return rc_ == RC_SIGNAL ? RC_SIGNAL : 1 + 3 * (q) + (which);                            \
        }                                                                                           \
    } while (0)

static int64_t pipe_run(int64_t *d, int64_t base, double deadline, const Pace *pace) {
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
                if (rz_reduce(d[6], d[7], red, c, n, src)) {
                    PyEval_RestoreThread(ts);
                    PyErr_Format(PyExc_ValueError, "fastpath: no reduction for dtype %lld, op %lld",
                                 (long long)d[6], (long long)d[7]);
                    return RC_SIGNAL;
                }
                rz_stream_copy(out + (off[r] + lo) * isz, red, (size_t)(c * isz));
            }
            store_release(&cnt[r][PIPE_REDUCED], g + 1);
            /* 3: every peer's reduced chunk into out */
            for (int64_t q = 0; q < n; q++) {
                int64_t cq = clip(count[q], lo, ce);
                if (q == r || cq <= 0) continue;
                PIPE_WAIT(q, PIPE_REDUCED, g + 1);
                rz_stream_copy(out + (off[q] + lo) * isz, slot[q] + (n * D + s) * C, (size_t)(cq * isz));
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
            if (c > 0 && own) rz_stream_copy(out + (off[r] + lo) * isz, slot[r] + s * C, (size_t)(c * isz));
            for (int64_t q = 0; q < n; q++) {
                int64_t cq = clip(count[q], lo, ce);
                if (q == r || cq <= 0) continue;
                PIPE_WAIT(q, PIPE_STAGED, g + 1);
                rz_stream_copy(out + (off[q] + lo) * isz, slot[q] + s * C, (size_t)(cq * isz));
            }
            store_release(&cnt[r][PIPE_REDUCED], g + 1); /* every counter moves at every step, */
            store_release(&cnt[r][PIPE_OUT], g + 1);     /* whichever collective took it */
        }
    }
    PyEval_RestoreThread(ts);
    return 0;
}

/* pipe(descriptor, base, deadline, spin, yield, max_sleep) -> int; see above. */
PyObject *rz_pipe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t addr, base;
    double deadline;
    Pace pace;
    if (rz_args(args, nargs, "pipe(descriptor, base, deadline, spin, yield, max_sleep)", &addr, &base, &deadline,
                &pace))
        return NULL;
    int64_t *desc = PTR(addr);
    if (desc[1] < 1 || desc[1] > 64 || desc[8] < 64 || desc[8] % 64 || desc[9] < 1 || desc[5] < 1) {
        PyErr_SetString(PyExc_ValueError, "fastpath.pipe: bad descriptor (1-64 ranks, chunks of 64-byte lines)");
        return NULL;
    }
    int64_t rc = pipe_run(desc, base, deadline, &pace);
    if (rc == RC_SIGNAL) return NULL;
    return PyLong_FromLongLong(rc);
}
