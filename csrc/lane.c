/* lane.c: a blocking collective taken from its first Python line into C (collectives/fast/lane.py).
 *
 * A Lane belongs to one Communicator. Its table maps what a call's arrays *are*
 * (type, dtype, element count, contiguity and writability flags, data address)
 * rather than which Python objects they are, to the call's program
 * (fastpath.c's ops, written by collectives/fast/writer.py): a fresh view x[:]
 * of the same buffer, or a new array the allocator placed where the last one
 * was, finds it. A call whose arrays are new to the table but whose shape is
 * not (the same kind, op, counts, dtype, flags and placement of x against out,
 * both outside the heap) copies that shape's *template* and relocates it: the
 * words that address x or out are rewritten for this call's addresses (a list
 * writer.relocations made). Nothing here allocates per call but that copy.
 *
 * Lane.run(kind, x, out, arg) does what dispatch.dispatch and Program.run do for
 * such a call, on the Communicator's own state (its seq, last plan, engine,
 * the node's epoch, the road taken): returns out when the program ran to the
 * end; None when the call is not the lane's (nothing was touched: the Python
 * path runs it); otherwise it hands the call, already posted, to the Python
 * path through on_stop (a mismatch, a deadline, peers' new locations), or
 * raises through on_error (a signal, a refused read).
 *
 * The table is bounded (SLOTS entries, TEMPLATES templates): a caller cycling
 * through buffers replaces entries, never grows it.
 */
#include "lane.h"

#include <string.h>

static PyObject *S_seq, *S_last, *S_broken, *S_tracer, *S_timeout, *S_inflight, *S_inline, *S_closed, *S_queue,
    *S_epoch, *S_road, *S_stop, *S_stage;

static int is_none(PyObject *d, PyObject *k) { return PyDict_GetItemWithError(d, k) == Py_None; }

static int set_long(PyObject *d, PyObject *k, int64_t v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int rc = PyDict_SetItem(d, k, o);
    Py_DECREF(o);
    return rc;
}

static int64_t get_long(PyObject *d, PyObject *k) {
    PyObject *o = PyDict_GetItemWithError(d, k);
    return o == NULL ? -1 : PyLong_AsLongLong(o);
}

/* The engine after an inline call: free again, and the progress thread told if work was queued meanwhile. */
static int leave(Lane *L) {
    PyObject *q = PyDict_GetItemWithError(L->engine_d, S_queue);
    if (q != NULL && PyObject_Length(q) > 0) {
        PyObject *r = PyObject_CallNoArgs(L->engine_leave);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    return PyDict_SetItem(L->engine_d, S_inline, Py_False);
}

static void finish_busy(Lane *L) {
    L->busy = 0;
    if (L->clear_pending) {
        L->clear_pending = 0;
        lt_lane_clear_all(L);
    }
}

static PyObject *run_sides(Lane *L, int64_t kind, Side *xsp, Side *osp, PyObject *x, PyObject *out, PyObject *arg);

/* run(kind, x, out, arg) -> out, or None (not the lane's call); see the top of this file. */
static PyObject *lane_run(Lane *L, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(kind, x, out, arg)");
        return NULL;
    }
    int64_t kind = PyLong_AsLongLong(args[0]);
    PyObject *x = args[1], *out = args[2], *arg = args[3];
    Side xs, os;
    int got = lt_side_of(L, x, &xs);
    if (got <= 0) return got < 0 ? NULL : Py_NewRef(Py_None);
    if (out == x) {
        os = xs;
    } else if ((got = lt_side_of(L, out, &os)) <= 0) {
        return got < 0 ? NULL : Py_NewRef(Py_None);
    }
    return run_sides(L, kind, &xs, &os, x, out, arg);
}

static PyTypeObject LaneType;

/* lane_api.h's entry: run for a caller that read the arrays itself (csrc/torch_lane.cpp). */
PyObject *rz_lane_run_sides(PyObject *lane, int64_t kind, const Side *xs, const Side *os, PyObject *x, PyObject *out,
                            PyObject *arg) {
    if (!Py_IS_TYPE(lane, &LaneType)) {
        PyErr_SetString(PyExc_TypeError, "run_sides: not a Lane");
        return NULL;
    }
    Side xc = *xs, oc = *os; /* the lane's functions take them as their own */
    return run_sides((Lane *)lane, kind, &xc, &oc, x, out, arg);
}

/* The call whose arrays are xs and os: its program run, or None (see the top of this file). */
static PyObject *run_sides(Lane *L, int64_t kind, Side *xsp, Side *osp, PyObject *x, PyObject *out, PyObject *arg) {
    Side xs = *xsp, os = *osp;
    if (L->busy) Py_RETURN_NONE;
    Entry *e = lt_find(L, kind, arg, &xs, &os);
    if (e == NULL) {
        if (L->ntmpl == 0 || lt_in_heap(L, xs.addr) || lt_in_heap(L, os.addr)) Py_RETURN_NONE;
        Entry *t = lt_template_for(L, kind, arg, &xs, &os);
        if (t == NULL || (e = lt_instantiate(L, t, arg, &xs, &os)) == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
    }
    /* the Communicator's state: nothing queued or running, not broken, not traced */
    PyObject *cd = L->comm_d, *ed = L->engine_d;
    if (!is_none(cd, S_broken) || !is_none(cd, S_tracer) || !is_none(L->direct_d, S_stop) ||
        PyDict_GetItemWithError(ed, S_closed) != Py_False || PyDict_GetItemWithError(ed, S_inline) != Py_False ||
        get_long(ed, S_inflight) != 0) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (e->stage != NULL && PyDict_GetItemWithError(L->direct_d, S_stage) != e->stage) {
        lt_entry_clear(e); /* the stage window was regrown: the Python path writes the program again */
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *tmo = PyDict_GetItemWithError(cd, S_timeout);
    double timeout = tmo != NULL ? PyFloat_AsDouble(tmo) : -1.0;
    int64_t seq = get_long(cd, S_seq), epoch = get_long(L->sig_d, S_epoch) + 1;
    if (PyErr_Occurred() || seq < 0 || epoch <= 0 || timeout < 0) return NULL;
    if (set_long(cd, S_seq, seq + 1) || PyDict_SetItem(cd, S_last, e->plan) || set_long(L->sig_d, S_epoch, epoch) ||
        PyDict_SetItem(ed, S_inline, Py_True))
        return NULL;
    e->wire[1] = seq;
    e->wire[L->nf + 1] = -seq;
    L->busy = 1;
    int64_t base = 8 * epoch, par = epoch & 1;
    PyObject *plan = Py_NewRef(e->plan);
    int64_t rc = rz_execute(e->words[par], base, rz_now() + timeout, &L->pace);
    PyObject *result = NULL;
    if (rc == 0) {
        e->runs++;
        L->runs++;
        if (PyDict_SetItem(L->direct_d, S_road, e->road) == 0) result = Py_NewRef(out);
    } else if (rc == RC_SIGNAL) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
        PyObject *r = PyObject_CallFunction(L->on_error, "OLO", plan, (long long)seq, v != NULL ? v : Py_None);
        Py_XDECREF(r); /* it raises */
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    } else {
        int64_t q = -1, phase = 0;
        const char *what = rc == RC_MISMATCH ? "mismatch" : rc == RC_CHANGED ? "changed" : "timeout";
        if (rc > 0) phase = e->words[par][rc + 1], q = e->words[par][rc + 2];
        if (rc == RC_CHANGED) { /* peers passed other arrays: written again from Python, template too */
            Entry *t = lt_template_for(L, e->kind, e->arg, &e->x, &e->o);
            if (t != NULL) lt_entry_clear(t);
            lt_entry_clear(e);
        }
        finish_busy(L); /* (e is not used again: the Python path may add entries) */
        result = PyObject_CallFunction(L->on_stop, "OLLsLLOOO", plan, (long long)seq, (long long)base, what,
                                       (long long)q, (long long)phase, x, out, arg);
    }
    Py_DECREF(plan);
    finish_busy(L);
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (leave(L) < 0) {
        if (t == NULL) PyErr_Fetch(&t, &v, &tb);
        else PyErr_Clear();
    }
    if (t != NULL) {
        Py_XDECREF(result);
        PyErr_Restore(t, v, tb);
        return NULL;
    }
    return result;
}

static void lane_dealloc(Lane *L) {
    lt_lane_clear_all(L);
    PyMem_Free(L->spans);
    Py_XDECREF(L->ndarray);
    Py_XDECREF(L->tensor);
    for (int i = 0; i < 5; i++) Py_XDECREF(L->tdesc[i]);
    Py_XDECREF(L->comm_d);
    Py_XDECREF(L->engine_d);
    Py_XDECREF(L->direct_d);
    Py_XDECREF(L->sig_d);
    Py_XDECREF(L->on_stop);
    Py_XDECREF(L->on_error);
    Py_XDECREF(L->engine_leave);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

static PyObject *dict_of(PyObject *o) {
    PyObject *d = PyObject_GetAttrString(o, "__dict__");
    if (d != NULL && !PyDict_Check(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "Lane: an object without an instance dict");
        return NULL;
    }
    return d;
}

/* Lane(comm, engine, direct, signals, on_stop, on_error, rank, nf, spin, yield, max_sleep,
 *      probe, probe_address, probe_flags) */
static PyObject *lane_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *comm, *engine, *direct, *sig, *on_stop, *on_error, *probe;
    long long rank, nf, paddr;
    int pflags;
    double spin, yld, max_sleep;
    if (!PyArg_ParseTuple(args, "OOOOOOLLdddOLi", &comm, &engine, &direct, &sig, &on_stop, &on_error, &rank, &nf,
                          &spin, &yld, &max_sleep, &probe, &paddr, &pflags))
        return NULL;
    NpArray *r = (NpArray *)probe;
    PyObject *dt = PyObject_GetAttrString(probe, "dtype");
    if (dt == NULL) return NULL;
    int ok = (int64_t)(intptr_t)r->data == paddr && r->nd == 2 && r->dims[0] == 2 && r->dims[1] == 3 &&
             (r->flags & NP_FLAGS) == (pflags & NP_FLAGS) && r->descr == dt;
    Py_DECREF(dt);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "Lane: numpy's array layout is not the one lane.c reads");
        return NULL;
    }
    Lane *L = (Lane *)type->tp_alloc(type, 0);
    if (L == NULL) return NULL;
    for (int i = 0; i < SLOTS; i++) L->slots[i].kind = -1;
    for (int i = 0; i < TEMPLATES; i++) L->tmpl[i].kind = -1;
    L->ndarray = Py_NewRef(Py_TYPE(probe));
    L->rank = rank, L->nf = nf, L->pace.spin = spin, L->pace.yld = yld, L->pace.max_sleep = max_sleep;
    L->on_stop = Py_NewRef(on_stop), L->on_error = Py_NewRef(on_error);
    L->engine_leave = PyObject_GetAttrString(engine, "leave_inline");
    L->comm_d = dict_of(comm), L->engine_d = dict_of(engine), L->direct_d = dict_of(direct), L->sig_d = dict_of(sig);
    if (L->engine_leave == NULL || !L->comm_d || !L->engine_d || !L->direct_d || !L->sig_d) {
        Py_DECREF(L);
        return NULL;
    }
    return (PyObject *)L;
}

static PyMethodDef lane_methods[] = {
    {"run", (PyCFunction)(void (*)(void))lane_run, METH_FASTCALL, "run(kind, x, out, arg) -> out or None"},
    {"add", (PyCFunction)(void (*)(void))lane_add, METH_FASTCALL, "add a call's program (and its shape's template)"},
    {"clear", (PyCFunction)lane_clear, METH_O, "clear(spans or None): forget every program"},
    {"stats", (PyCFunction)lane_stats, METH_NOARGS, "entries, templates, runs, relocated"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "collectives._fastpath.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = lane_new,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_methods = lane_methods,
    .tp_doc = "A Communicator's blocking calls taken into C by what their arrays are (lane.c).",
};

int rz_add_lane(PyObject *m) {
    const char *names[] = {"seq", "last", "broken", "tracer", "timeout", "_inflight", "_inline", "_closed", "_queue",
                           "epoch", "road", "stop", "stage_window", "data_ptr", "numel", "dtype", "is_contiguous",
                           "is_cpu"};
    PyObject **slots[] = {&S_seq, &S_last, &S_broken, &S_tracer, &S_timeout, &S_inflight, &S_inline, &S_closed,
                          &S_queue, &S_epoch, &S_road, &S_stop, &S_stage, &S_data_ptr, &S_numel, &S_dtype,
                          &S_is_contiguous, &S_is_cpu};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        if ((*slots[i] = PyUnicode_InternFromString(names[i])) == NULL) return -1;
    if (PyType_Ready(&LaneType) < 0 || PyModule_AddObjectRef(m, "Lane", (PyObject *)&LaneType) < 0) return -1;
    static RzLaneApi api = {RZ_LANE_API_VERSION, rz_lane_run_sides};
    PyObject *cap = PyCapsule_New(&api, RZ_LANE_API_NAME, NULL);
    if (cap == NULL) return -1;
    int rc = PyModule_AddObjectRef(m, "LANE_API", cap);
    Py_DECREF(cap);
    return rc;
}

