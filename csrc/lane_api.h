/* lane_api.h: a Lane's entry for C and C++ callers that have read a call's arrays themselves
 * (csrc/torch_lane.cpp reads torch tensors and options with torch's own C++ API).
 * fastpath.c exports it as the capsule collectives._fastpath.LANE_API. */
#pragma once
#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one array of a call is: the lane's key (type, dtype, address, element count, flags).
 * A torch tensor: torch.Tensor, its torch.dtype, data_ptr(), numel(), flags 1. */
typedef struct {
    PyObject *type, *dtype; /* borrowed */
    int64_t addr, count, flags;
} Side;

/* run_sides(lane, kind, x side, out side, x, out, arg): Lane.run for arrays already read:
 * out (new reference) when the program ran, None when the call is not the lane's (nothing
 * was touched), NULL with an exception set when it failed. */
typedef PyObject *(*rz_run_sides_fn)(PyObject *lane, int64_t kind, const Side *xs, const Side *os, PyObject *x,
                                     PyObject *out, PyObject *arg);

typedef struct {
    int version; /* RZ_LANE_API_VERSION */
    rz_run_sides_fn run_sides;
} RzLaneApi;

#define RZ_LANE_API_VERSION 1
#define RZ_LANE_API_NAME "collectives._fastpath.LANE_API"

#ifdef __cplusplus
}
#endif
