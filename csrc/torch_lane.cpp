// torch_lane.cpp: the ringzero process group's blocking one-tensor calls, read with torch's
// own C++ API and handed to the Communicator's Lane (collectives/torch_backend/fast.py builds
// and loads it; csrc/lane.c runs the call).
//
// A TorchCall stands in for one method of a RingzeroProcessGroup (allreduce,
// all_gather_single, reduce_scatter_single, broadcast): the group sets it as an
// instance attribute over the Python method, so torch.distributed's `group.allreduce(
// [t], opts)` calls it. Python reads of `opts.reduceOp` and `opts.asyncOp` and of five
// tensor attributes cost about 2 us a call; here they are field reads. A call
// the lane takes (blocking, plain op, CPU contiguous tensors whose program the lane
// holds) runs there and returns None, torch's "finished already"; anything else
// goes to the Python method unchanged, which is the one place that decides what a
// call means. A TorchCall is not a builtin function: pybind11 takes builtins for
// its own C++ methods and would skip the override when torch's C++ calls the group.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <pybind11/pybind11.h>

#include "lane_api.h"

namespace py = pybind11;

namespace {

enum Kind { ALL_REDUCE = 0, REDUCE_SCATTER = 1, ALL_GATHER = 2, BROADCAST = 3 };
constexpr int kPlainOps = 8;  // RedOpType SUM .. BXOR; PREMUL_SUM and beyond: the Python method

rz_run_sides_fn run_sides = nullptr;
PyObject *S_lane = nullptr;  // "lane": the Communicator's Lane (or None) in its instance dict

struct TorchCall {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    PyObject *group;     // the RingzeroProcessGroup
    PyObject *method;    // its class's Python method (unbound): every call the lane does not take
    PyObject *comm_d;    // the Communicator's instance dict
    PyObject *ops;       // tuple: the Communicator's op name (or None) per RedOpType
    PyObject *timeout;   // collectives.errors.CollectiveTimeout
    PyObject *translate; // torch_backend.errors.torch_error
};

// What tensor `obj` is, as lane.h's lt_side_of reads it: 1, or 0 when the lane does not take it.
int side_of(PyObject *obj, Side *s) {
    if (!THPVariable_Check(obj)) return 0;
    try {
        const at::Tensor &t = THPVariable_Unpack(obj);
        if (!t.defined() || t.layout() != c10::kStrided || !t.is_cpu() || !t.has_storage() || t.is_conj() ||
            t.is_neg() || !t.is_contiguous())
            return 0;
        int64_t n = t.numel();
        if (n <= 0) return 0;
        s->type = (PyObject *)Py_TYPE(obj);
        s->dtype = (PyObject *)torch::getTHPDtype(t.scalar_type());
        s->addr = (int64_t)(intptr_t)t.data_ptr();
        s->count = n;
        s->flags = 1;
        return 1;
    } catch (...) {  // a tensor without data (a wrapper subclass): the Python method's
        return 0;
    }
}

template <typename T>
T *options(PyObject *obj) {
    py::detail::make_caster<T> c;
    try {
        if (!c.load(py::handle(obj), false)) return nullptr;
        return &py::detail::cast_op<T &>(c);
    } catch (...) {
        PyErr_Clear();
        return nullptr;
    }
}

// The Communicator's op name for a plain ReduceOp; nullptr for the rest.
PyObject *op_name(TorchCall *c, const c10d::ReduceOp &op) {
    int k = (int)op.op_;
    if (k < 0 || k >= kPlainOps || k >= PyTuple_GET_SIZE(c->ops)) return nullptr;
    PyObject *name = PyTuple_GET_ITEM(c->ops, k);
    return name == Py_None ? nullptr : name;
}

// Run (kind, x, out, arg) on the lane: 1 ran, 0 not the lane's, -1 failed (error in torch's terms set).
int run(TorchCall *c, int kind, PyObject *x, PyObject *out, PyObject *arg) {
    Side xs, os;
    if (!side_of(x, &xs)) return 0;
    if (out == x) os = xs;
    else if (!side_of(out, &os)) return 0;
    PyObject *lane = PyDict_GetItemWithError(c->comm_d, S_lane);
    if (lane == nullptr) return PyErr_Occurred() ? -1 : 0;
    if (lane == Py_None) return 0;
    PyObject *r = run_sides(lane, kind, &xs, &os, x, out, arg);
    if (r != nullptr) {
        int ran = r != Py_None;
        Py_DECREF(r);
        return ran;
    }
    if (PyErr_ExceptionMatches(c->timeout)) {  // torch's DistBackendError, as the Python method raises
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != nullptr) PyException_SetTraceback(v, tb);
        PyObject *e = PyObject_CallOneArg(c->translate, v);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        if (e != nullptr) {
            PyErr_SetObject((PyObject *)Py_TYPE(e), e);
            Py_DECREF(e);
        }
    }
    return -1;
}

// The blocking one-tensor call in args, on the lane: 1 ran, 0 not taken, -1 failed.
int fast(TorchCall *c, PyObject *const *args, Py_ssize_t n) {
    if (c->kind == ALL_REDUCE || c->kind == BROADCAST) {  // (tensors, opts)
        if (n != 2 || !(PyList_CheckExact(args[0]) || PyTuple_CheckExact(args[0])) || PySequence_Fast_GET_SIZE(args[0]) != 1)
            return 0;
        PyObject *t = PySequence_Fast_GET_ITEM(args[0], 0);
        if (c->kind == ALL_REDUCE) {
            auto *o = options<c10d::AllreduceOptions>(args[1]);
            if (o == nullptr || o->asyncOp || o->sparseIndices.has_value()) return 0;
            PyObject *name = op_name(c, o->reduceOp);
            return name == nullptr ? 0 : run(c, ALL_REDUCE, t, t, name);
        }
        auto *o = options<c10d::BroadcastOptions>(args[1]);
        if (o == nullptr || o->asyncOp || o->rootTensor != 0) return 0;
        PyObject *root = PyLong_FromLongLong(o->rootRank);
        if (root == nullptr) return -1;
        int rc = run(c, BROADCAST, t, t, root);
        Py_DECREF(root);
        return rc;
    }
    if (n != 3) return 0;  // (output, input, opts)
    if (c->kind == ALL_GATHER) {
        auto *o = options<c10d::AllgatherOptions>(args[2]);
        return o == nullptr || o->asyncOp ? 0 : run(c, ALL_GATHER, args[1], args[0], Py_None);
    }
    auto *o = options<c10d::ReduceScatterOptions>(args[2]);
    if (o == nullptr || o->asyncOp) return 0;
    PyObject *name = op_name(c, o->reduceOp);
    return name == nullptr ? 0 : run(c, REDUCE_SCATTER, args[1], args[0], name);
}

PyObject *call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    auto *c = (TorchCall *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == nullptr) {
        int rc = fast(c, args, n);
        if (rc > 0) Py_RETURN_NONE;
        if (rc < 0) return nullptr;
    }
    // the Python method, with the group first
    Py_ssize_t total = n + (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8];
    PyObject **all = total + 1 <= 8 ? small : (PyObject **)PyMem_Malloc((total + 1) * sizeof(PyObject *));
    if (all == nullptr) return PyErr_NoMemory();
    all[0] = c->group;
    for (Py_ssize_t i = 0; i < total; i++) all[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(c->method, all, n + 1, kwnames);
    if (all != small) PyMem_Free(all);
    return r;
}

int traverse(PyObject *self, visitproc visit, void *arg) {
    auto *c = (TorchCall *)self;
    Py_VISIT(c->group);
    Py_VISIT(c->method);
    Py_VISIT(c->comm_d);
    Py_VISIT(c->ops);
    Py_VISIT(c->timeout);
    Py_VISIT(c->translate);
    return 0;
}

int clear(PyObject *self) {
    auto *c = (TorchCall *)self;
    Py_CLEAR(c->group);
    Py_CLEAR(c->method);
    Py_CLEAR(c->comm_d);
    Py_CLEAR(c->ops);
    Py_CLEAR(c->timeout);
    Py_CLEAR(c->translate);
    return 0;
}

void dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    clear(self);
    Py_TYPE(self)->tp_free(self);
}

// TorchCall(kind, group, method, comm, ops, timeout, translate)
PyObject *make(PyTypeObject *type, PyObject *args, PyObject *kw) {
    int kind;
    PyObject *group, *method, *comm, *ops, *timeout, *translate;
    if (!PyArg_ParseTuple(args, "iOOOO!OO", &kind, &group, &method, &comm, &PyTuple_Type, &ops, &timeout, &translate))
        return nullptr;
    if (kind < ALL_REDUCE || kind > BROADCAST) {
        PyErr_Format(PyExc_ValueError, "TorchCall: kind %d is not 0-3", kind);
        return nullptr;
    }
    PyObject *d = PyObject_GenericGetDict(comm, nullptr);
    if (d == nullptr) return nullptr;
    auto *c = (TorchCall *)type->tp_alloc(type, 0);
    if (c == nullptr) {
        Py_DECREF(d);
        return nullptr;
    }
    c->vectorcall = call;
    c->kind = kind;
    c->group = Py_NewRef(group), c->method = Py_NewRef(method), c->comm_d = d, c->ops = Py_NewRef(ops);
    c->timeout = Py_NewRef(timeout), c->translate = Py_NewRef(translate);
    return (PyObject *)c;
}

PyMemberDef members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(TorchCall, vectorcall), READONLY, nullptr},
    {"kind", T_INT, offsetof(TorchCall, kind), READONLY, "0 all-reduce, 1 reduce-scatter, 2 all-gather, 3 broadcast"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject TorchCallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_torch_lane",
                      "The ringzero group's blocking one-tensor calls, read in C++ (csrc/torch_lane.cpp).", -1, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__torch_lane(void) {
    auto *api = (RzLaneApi *)PyCapsule_Import(RZ_LANE_API_NAME, 0);
    if (api == nullptr) return nullptr;
    if (api->version != RZ_LANE_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "_torch_lane: the lane's API is version %d, this build knows %d",
                     api->version, RZ_LANE_API_VERSION);
        return nullptr;
    }
    run_sides = api->run_sides;
    if ((S_lane = PyUnicode_InternFromString("lane")) == nullptr) return nullptr;
    TorchCallType.tp_name = "collectives.torch_backend._torch_lane.TorchCall";
    TorchCallType.tp_basicsize = sizeof(TorchCall);
    TorchCallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    TorchCallType.tp_call = PyVectorcall_Call;
    TorchCallType.tp_vectorcall_offset = offsetof(TorchCall, vectorcall);
    TorchCallType.tp_new = make;
    TorchCallType.tp_dealloc = dealloc;
    TorchCallType.tp_traverse = traverse;
    TorchCallType.tp_clear = clear;
    TorchCallType.tp_members = members;
    TorchCallType.tp_doc = "One blocking method of a RingzeroProcessGroup, taken into the lane (torch_lane.cpp).";
    if (PyType_Ready(&TorchCallType) < 0) return nullptr;
    PyObject *m = PyModule_Create(&module);
    if (m == nullptr) return nullptr;
    if (PyModule_AddObjectRef(m, "TorchCall", (PyObject *)&TorchCallType) < 0 ||
        PyModule_AddStringConstant(m, "TORCH_VERSION", RZ_TORCH_VERSION) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
