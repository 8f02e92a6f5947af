// kernels_on_host.h: just enough CUDA for g++ to compile csrc/*.cu as they are,
// so bench/kernels_on_host.py can run every kernel on the CPU, thread by thread.
//
// Included before the kernel source (g++ -include). What it maps:
//   __global__, __device__, __forceinline__, __launch_bounds__  -> plain C++
//   threadIdx, blockIdx, blockDim, gridDim                      -> globals the launcher sets
//   uint2, uint4                                                -> 8- and 16-byte aligned structs
//   __float_as_uint, __uint_as_float                            -> memcpy bit casts
//   __f*_rn intrinsics                                          -> plain IEEE operations (the
//       build uses -ffp-contract=off, so a*b+c stays two roundings, as with --fmad=false;
//       sqrtf is glibc's, correctly rounded like -prec-sqrt=true)
//   the f16 conversions (PTX cvt in rz_common.cuh)              -> _Float16 casts, round to
//       nearest even, via RZ_HOST_F16
// No kernel in csrc/ uses shared memory, __syncthreads or warp intrinsics: the threads of a
// launch never talk to each other, so running them one after another is one legal schedule.
// kernels_on_host.py refuses a source that uses any of them instead of running it wrongly.
#pragma once
#include <cmath>
#include <cstring>
#include <cstddef>
#include <utility>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define RZ_HOST_F16 1

struct rz_dim3 { unsigned x, y, z; };
static rz_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };

static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }

static inline float rz_host_f16_to_f32(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
static inline unsigned short rz_host_f32_to_f16(float f) {
    _Float16 h = (_Float16)f;
    unsigned short b;
    std::memcpy(&b, &h, 2);
    return b;
}

// rz_run(kernel, grid, block, params): every thread of a 1-D launch, block by block, thread
// by thread; params[i] points at argument i, as in cuLaunchKernel's kernelParams.
template <typename... A, std::size_t... I>
static inline void rz_call(void (*k)(A...), void** p, std::index_sequence<I...>) {
    k(*static_cast<typename std::remove_reference<A>::type*>(p[I])...);
}

// rz_param_sizes(kernel, out): sizeof each parameter, so the caller can check that what it
// passes matches (the driver, too, copies sizeof(parameter) bytes from each pointer).
template <typename... A>
static inline int rz_param_sizes(void (*)(A...), int* out) {
    int i = 0;
    ((out[i++] = (int)sizeof(A)), ...);
    return (int)sizeof...(A);
}

template <typename... A>
static inline void rz_run(void (*k)(A...), unsigned grid, unsigned block, void** params) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        for (unsigned t = 0; t < block; ++t) {
            threadIdx = {t, 0, 0};
            rz_call(k, params, std::index_sequence_for<A...>{});
        }
    }
}
