/* lane_table.c: a Lane's table (lane.c): what a call's arrays are (a key), the entries keyed by
 * it, the templates keyed by shape and their relocation, and the methods that fill and clear them.
 * Bounded: SLOTS entries, TEMPLATES templates; an entry evicted frees its words. */
#include "lane.h"

#include <string.h>

PyObject *S_data_ptr, *S_numel, *S_dtype, *S_is_contiguous, *S_is_cpu;

void lt_entry_clear(Entry *e) {
    for (int p = 0; p < 2; p++) {
        PyMem_Free(e->words[p]);
        e->words[p] = NULL;
    }
    PyMem_Free(e->relocs);
    e->relocs = NULL;
    Py_CLEAR(e->plan);
    Py_CLEAR(e->stage);
    Py_CLEAR(e->road);
    Py_CLEAR(e->arg);
    e->kind = -1;
}

void lt_lane_clear_all(Lane *L) {
    for (int i = 0; i < SLOTS; i++) lt_entry_clear(&L->slots[i]);
    for (int i = 0; i < TEMPLATES; i++) lt_entry_clear(&L->tmpl[i]);
    L->ntmpl = L->next_tmpl = 0;
}

/* Attribute i of tensor ``a`` (lane.h's tdesc order) through torch.Tensor's own descriptor:
 * a method called, a property read, without the lookup on the instance each time. */
static PyObject *tensor_get(Lane *L, int i, PyObject *a) {
    PyObject *d = L->tdesc[i];
    if (Py_IS_TYPE(d, &PyMethodDescr_Type)) return PyObject_Vectorcall(d, &a, 1, NULL);
    return Py_TYPE(d)->tp_descr_get(d, a, (PyObject *)Py_TYPE(a));
}

/* Remember torch.Tensor (the type of the first tensor offered) and its five descriptors. */
void lt_learn_tensor(Lane *L, PyTypeObject *t) {
    PyObject *names[5] = {S_is_cpu, S_is_contiguous, S_data_ptr, S_numel, S_dtype};
    for (int i = 0; i < 5; i++) {
        PyObject *d = _PyType_Lookup(t, names[i]);
        if (d == NULL || !(Py_IS_TYPE(d, &PyMethodDescr_Type) || Py_TYPE(d)->tp_descr_get != NULL)) return;
    }
    for (int i = 0; i < 5; i++) L->tdesc[i] = Py_NewRef(_PyType_Lookup(t, names[i]));
    L->tensor = Py_NewRef((PyObject *)t);
}

/* What array ``a`` is (type, dtype, address, count, flags): 1, or 0 when the lane does not take it. */
int lt_side_of(Lane *L, PyObject *a, Side *s) {
    if (Py_TYPE(a) == (PyTypeObject *)L->ndarray) {
        NpArray *r = (NpArray *)a;
        int64_t n = 1;
        for (int i = 0; i < r->nd; i++) n *= r->dims[i];
        if (n <= 0 || (r->flags & 1) == 0) return 0;
        s->type = L->ndarray, s->dtype = r->descr, s->addr = (int64_t)(intptr_t)r->data, s->count = n;
        s->flags = r->flags & NP_FLAGS;
        return 1;
    }
    if (L->tensor == NULL || Py_TYPE(a) != (PyTypeObject *)L->tensor) return 0;
    PyObject *v = tensor_get(L, 0, a); /* CPU tensors only: their memory is host memory */
    int cpu = v == Py_True;
    Py_XDECREF(v);
    /* A layout without these (sparse CSR raises in is_contiguous, COO in data_ptr) is not
     * the lane's: the Python path takes it and says what it does with it. */
    if (!cpu) { PyErr_Clear(); return 0; }
    v = tensor_get(L, 1, a);
    int contiguous = v == Py_True;
    Py_XDECREF(v);
    if (!contiguous) { PyErr_Clear(); return 0; }
    if ((v = tensor_get(L, 2, a)) == NULL) { PyErr_Clear(); return 0; }
    s->addr = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if ((v = tensor_get(L, 3, a)) == NULL) return -1;
    s->count = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if ((v = tensor_get(L, 4, a)) == NULL) return -1;
    s->dtype = v; /* torch dtypes are singletons: the borrowed pointer stays valid */
    Py_DECREF(v);
    s->type = L->tensor, s->flags = 1;
    return s->count > 0 && !PyErr_Occurred();
}

int lt_same_side(const Side *a, const Side *b, int addr) {
    return a->type == b->type && a->dtype == b->dtype && a->count == b->count && a->flags == b->flags &&
           (!addr || a->addr == b->addr);
}

int lt_same_arg(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq == 1;
}

int lt_in_heap(Lane *L, int64_t addr) {
    for (int64_t i = 0; i < L->nspans; i++)
        if (addr >= L->spans[2 * i] && addr < L->spans[2 * i + 1]) return 1;
    return 0;
}

Py_ssize_t lt_hash_of(int64_t kind, const Side *x, const Side *o) {
    uint64_t h = (uint64_t)x->addr * 0x9E3779B97F4A7C15ull ^ (uint64_t)o->addr * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)kind;
    return (Py_ssize_t)((h >> 29) & (SLOTS - 1));
}

/* How x lies against out (element size from the out side: both share a dtype): -1 when neither
 * apart, nor the same memory, nor (all-gather) this rank's piece of out. */
int lt_relation(Lane *L, int64_t kind, const Side *x, const Side *o, int64_t item) {
    int64_t xe = x->addr + x->count * item, oe = o->addr + o->count * item;
    if (xe <= o->addr || oe <= x->addr) return 0;
    if (x->addr == o->addr && x->count == o->count) return 1;
    if (kind == 2 && x->addr == o->addr + L->rank * x->count * item) return 2;
    return -1;
}

Entry *lt_find(Lane *L, int64_t kind, PyObject *arg, const Side *x, const Side *o) {
    Py_ssize_t h = lt_hash_of(kind, x, o);
    for (int i = 0; i < PROBE; i++) {
        Entry *e = &L->slots[(h + i) & (SLOTS - 1)];
        if (e->kind == kind && lt_same_side(&e->x, x, 1) && lt_same_side(&e->o, o, 1) && lt_same_arg(e->arg, arg)) return e;
    }
    return NULL;
}

Entry *lt_free_slot(Lane *L, int64_t kind, const Side *x, const Side *o) {
    Py_ssize_t h = lt_hash_of(kind, x, o);
    for (int i = 0; i < PROBE; i++) {
        Entry *e = &L->slots[(h + i) & (SLOTS - 1)];
        if (e->kind < 0) return e;
    }
    Entry *e = &L->slots[h]; /* full: the entry at home goes */
    lt_entry_clear(e);
    return e;
}

int64_t *lt_copy_words(const int64_t *w, int64_t n) {
    int64_t *c = PyMem_Malloc((size_t)n * 8);
    if (c != NULL) memcpy(c, w, (size_t)n * 8);
    return c;
}

/* An entry for (x, o) from template t, its addresses relocated. */
Entry *lt_instantiate(Lane *L, Entry *t, PyObject *arg, const Side *x, const Side *o) {
    Entry *e = lt_free_slot(L, t->kind, x, o);
    for (int p = 0; p < 2; p++) {
        e->words[p] = lt_copy_words(t->words[p], t->nwords[p]);
        e->nwords[p] = t->nwords[p];
        if (e->words[p] == NULL) {
            lt_entry_clear(e);
            return NULL;
        }
    }
    for (int64_t i = 0; i < t->nrelocs; i++) {
        const int64_t *r = t->relocs + 4 * i;
        e->words[r[0]][r[1]] = (r[2] ? o->addr : x->addr) + r[3];
    }
    e->kind = t->kind, e->x = *x, e->o = *o, e->rel = t->rel, e->wire = t->wire, e->runs = 0, e->item = t->item;
    e->arg = Py_NewRef(arg);
    e->plan = Py_NewRef(t->plan);
    e->stage = Py_XNewRef(t->stage);
    e->road = Py_NewRef(t->road);
    L->relocated++;
    return e;
}

/* The template of (x, o)'s shape, placed as its own x and out were (None: none). */
Entry *lt_template_for(Lane *L, int64_t kind, PyObject *arg, const Side *x, const Side *o) {
    for (int64_t i = 0; i < L->ntmpl; i++) {
        Entry *t = &L->tmpl[i];
        if (t->kind == kind && lt_same_side(&t->x, x, 0) && lt_same_side(&t->o, o, 0) && lt_same_arg(t->arg, arg) &&
            lt_relation(L, kind, x, o, t->item) == t->rel)
            return t;
    }
    return NULL;
}

int lt_fill(Entry *e, PyObject *words, int p) {
    Py_buffer b;
    if (PyObject_GetBuffer(words, &b, PyBUF_SIMPLE) < 0) return -1;
    e->nwords[p] = b.len / 8;
    e->words[p] = lt_copy_words(b.buf, e->nwords[p]);
    PyBuffer_Release(&b);
    return e->words[p] == NULL ? (PyErr_NoMemory(), -1) : 0;
}

/* add(kind, x, out, arg, plan, words0, words1, relocs or None, stage or None, road, wire address, item size):
 * the program of a call that has just run in Python; relocs given: also its shape's template. */
PyObject *lane_add(Lane *L, PyObject *const *a, Py_ssize_t n) {
    if (n != 12) {
        PyErr_SetString(PyExc_TypeError, "add(kind, x, out, arg, plan, words0, words1, relocs, stage, road, wire, item)");
        return NULL;
    }
    if (L->busy) Py_RETURN_FALSE;
    int64_t kind = PyLong_AsLongLong(a[0]);
    if (L->tensor == NULL && strcmp(Py_TYPE(a[1])->tp_name, "Tensor") == 0) lt_learn_tensor(L, Py_TYPE(a[1]));
    Side xs, os;
    int got = lt_side_of(L, a[1], &xs);
    if (got <= 0) return got < 0 ? NULL : Py_NewRef(Py_False);
    if (a[2] == a[1]) os = xs;
    else if ((got = lt_side_of(L, a[2], &os)) <= 0) return got < 0 ? NULL : Py_NewRef(Py_False);
    int64_t item = PyLong_AsLongLong(a[11]);
    int rel = xs.dtype == os.dtype ? lt_relation(L, kind, &xs, &os, item) : -1;
    if (rel < 0 || PyErr_Occurred()) return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    Entry *e = lt_find(L, kind, a[3], &xs, &os);
    if (e != NULL) lt_entry_clear(e);
    e = lt_free_slot(L, kind, &xs, &os);
    if (lt_fill(e, a[5], 0) || lt_fill(e, a[6], 1)) {
        lt_entry_clear(e);
        return NULL;
    }
    e->kind = kind, e->x = xs, e->o = os, e->rel = rel, e->runs = 0, e->item = item;
    e->arg = Py_NewRef(a[3]);
    e->plan = Py_NewRef(a[4]);
    e->stage = a[8] == Py_None ? NULL : Py_NewRef(a[8]);
    e->road = Py_NewRef(a[9]);
    e->wire = PTR(PyLong_AsLongLong(a[10]));
    if (a[7] == Py_None) Py_RETURN_TRUE;
    Entry *t = lt_template_for(L, kind, a[3], &xs, &os);
    if (t == NULL) {
        t = &L->tmpl[L->next_tmpl];
        L->next_tmpl = (L->next_tmpl + 1) % TEMPLATES;
        if (L->ntmpl < TEMPLATES) L->ntmpl++;
    }
    lt_entry_clear(t);
    Py_buffer b;
    if (PyObject_GetBuffer(a[7], &b, PyBUF_SIMPLE) < 0) return NULL;
    t->nrelocs = b.len / 32;
    t->relocs = lt_copy_words(b.buf, b.len / 8);
    PyBuffer_Release(&b);
    if (t->relocs == NULL || lt_fill(t, a[5], 0) || lt_fill(t, a[6], 1)) {
        lt_entry_clear(t);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    t->kind = kind, t->x = xs, t->o = os, t->rel = rel, t->wire = e->wire, t->item = item;
    t->arg = Py_NewRef(a[3]);
    t->plan = Py_NewRef(a[4]);
    t->stage = Py_XNewRef(e->stage);
    t->road = Py_NewRef(a[9]);
    Py_RETURN_TRUE;
}

PyObject *lane_clear(Lane *L, PyObject *spans) {
    if (L->busy) L->clear_pending = 1;
    else lt_lane_clear_all(L);
    if (spans != Py_None) { /* the heap's windows: [start0, end0, start1, end1, ...] (int64 buffer) */
        Py_buffer b;
        if (PyObject_GetBuffer(spans, &b, PyBUF_SIMPLE) < 0) return NULL;
        PyMem_Free(L->spans);
        L->spans = lt_copy_words(b.buf, b.len / 8);
        L->nspans = L->spans != NULL ? b.len / 16 : 0;
        PyBuffer_Release(&b);
    }
    Py_RETURN_NONE;
}

PyObject *lane_stats(Lane *L, PyObject *unused) {
    int64_t entries = 0, templates = 0;
    for (int i = 0; i < SLOTS; i++) entries += L->slots[i].kind >= 0;
    for (int i = 0; i < TEMPLATES; i++) templates += L->tmpl[i].kind >= 0;
    return Py_BuildValue("{sLsLsLsL}", "entries", (long long)entries, "templates", (long long)templates, "runs",
                         (long long)L->runs, "relocated", (long long)L->relocated);
}
