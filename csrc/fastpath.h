/* fastpath.h: what the C fast path's files share (collectives._fastpath).
 *
 * fastpath.c runs the direct roads' programs and defines the module, lane.c
 * takes a repeated call into C from its first Python line, pipe.c
 * runs the pipe, wait.c holds the one wait (spin, yield, sleep: the policy of
 * collectives/waiting.py, with its times passed in) and the element-wise
 * reductions both use. Codes here are exported to Python by fastpath.c
 * (DTYPES, OPS, the op names, the return codes), which never types them again.
 */
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <time.h>

enum { DT_F32, DT_F64, DT_I32, DT_I64 };
enum { RED_SUM, RED_PROD, RED_MAX, RED_MIN };
#define BIG_BYTES (256 * 1024) /* copies and reductions this large run with the GIL released */
#define RC_MISMATCH (-1)
#define RC_CHANGED (-2)
#define RC_SIGNAL (-3)
#define PTR(w) ((void *)(intptr_t)(w))
#define PIPE_HEAD 12 /* words before a pipe descriptor's per-rank arrays (pipe.c) */
#define ANY INT64_MIN  /* an LCHECK word that matches any posted value */

/* How a wait paces itself (collectives/waiting.py's WaitPolicy, per call). */
typedef struct {
    double spin, yld, max_sleep;
} Pace;

static inline int64_t load_acquire(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_release(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline double rz_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* Python's time.monotonic() */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int rz_wait_flag(const int64_t *flag, int64_t value, double deadline, const Pace *pace, PyThreadState **ts);
void rz_stream_copy(void *dst, const void *src, size_t n);
PyObject *rz_py_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int rz_reduce(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src);
int rz_reduce_stream(int64_t dtype, int64_t op, void *dst, int64_t count, int64_t nsrc, const int64_t *src);
int rz_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, int64_t *addr, int64_t *base,
            double *deadline, Pace *pace);
PyObject *rz_pipe(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int64_t rz_execute(const int64_t *prog, int64_t base, double deadline, const Pace *pace);
int rz_add_lane(PyObject *m); /* lane.c: the Lane type */
