/* lane.h: what lane.c (the Lane type and its run) and lane_table.c (its table of programs) share.
 * See lane.c for what a Lane is. */
#pragma once
#include "fastpath.h"
#include "lane_api.h"

#define SLOTS 64 /* a power of two */
#define PROBE 8
#define TEMPLATES 16
#define NP_FLAGS 0x501 /* numpy's C_CONTIGUOUS | ALIGNED | WRITEABLE */

/* numpy's PyArrayObject_fields, the part read here (stable across numpy 1.x and 2.x;
 * Lane.__init__ checks it against a probe array and refuses to start if it differs) */
typedef struct {
    PyObject_HEAD char *data;
    int nd;
    Py_ssize_t *dims;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} NpArray;

typedef struct {
    int64_t kind; /* -1: empty */
    PyObject *arg;
    Side x, o;
    int rel; /* 0 apart, 1 the same memory, 2 x is this rank's piece of out */
    int64_t *words[2];
    int64_t *relocs, nrelocs; /* templates: (parity, index, base 0 x / 1 out, offset) each */
    PyObject *plan, *stage, *road; /* owned */
    int64_t *wire; /* the plan's header words (seq stamped per call) */
    int64_t nwords[2], runs, item; /* item: the element size (a template's relation needs it) */
} Entry;

typedef struct {
    PyObject_HEAD Entry slots[SLOTS];
    Entry tmpl[TEMPLATES];
    int64_t ntmpl, next_tmpl, runs, relocated, rank, nf, busy, clear_pending;
    PyObject *ndarray, *tensor;
    PyObject *tdesc[5]; /* torch.Tensor's is_cpu, is_contiguous, data_ptr, numel, dtype descriptors */
    PyObject *comm_d, *engine_d, *direct_d, *sig_d; /* the objects' instance dicts */
    PyObject *on_stop, *on_error, *engine_leave;
    int64_t *spans, nspans; /* the heap's windows [start, end) */
    Pace pace;
} Lane;

extern PyObject *S_data_ptr, *S_numel, *S_dtype, *S_is_contiguous, *S_is_cpu;
void lt_learn_tensor(Lane *L, PyTypeObject *t);
void lt_entry_clear(Entry *e);
void lt_lane_clear_all(Lane *L);
int lt_side_of(Lane *L, PyObject *a, Side *s);
int lt_same_side(const Side *a, const Side *b, int addr);
int lt_same_arg(PyObject *a, PyObject *b);
int lt_in_heap(Lane *L, int64_t addr);
Py_ssize_t lt_hash_of(int64_t kind, const Side *x, const Side *o);
int lt_relation(Lane *L, int64_t kind, const Side *x, const Side *o, int64_t item);
Entry *lt_find(Lane *L, int64_t kind, PyObject *arg, const Side *x, const Side *o);
Entry *lt_free_slot(Lane *L, int64_t kind, const Side *x, const Side *o);
int64_t *lt_copy_words(const int64_t *w, int64_t n);
Entry *lt_instantiate(Lane *L, Entry *t, PyObject *arg, const Side *x, const Side *o);
Entry *lt_template_for(Lane *L, int64_t kind, PyObject *arg, const Side *x, const Side *o);
int lt_fill(Entry *e, PyObject *words, int p);
PyObject *lane_add(Lane *L, PyObject *const *a, Py_ssize_t n);
PyObject *lane_clear(Lane *L, PyObject *spans);
PyObject *lane_stats(Lane *L, PyObject *unused);
PyObject *rz_lane_run_sides(PyObject *lane, int64_t kind, const Side *xs, const Side *os, PyObject *x, PyObject *out,
                            PyObject *arg);
