// rz_common.cuh: element types, conversions and reduction ops shared by the
// ringzero kernels (reduce.cu, cast.cu, optim.cu).
//
// Self-contained on purpose: no host headers and no cuda_fp16.h/cuda_bf16.h,
// so the same text compiles under nvcc (the `make test` check) and under
// NVRTC through cupy's binding (not RawModule: it adds -ftz=true), whatever include paths the runtime has.
// Half types travel as their 16-bit patterns (unsigned short) and are
// converted with PTX (f16) or integer arithmetic (bf16), both rounding to
// nearest even, the same as ml_dtypes and collectives/kernels/reference.py.
#pragma once

typedef long long i64;
typedef unsigned long long u64;

struct f16_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

// The f16 conversions are single PTX instructions. A host build of these
// sources (bench/kernels_on_host.py, which runs every kernel on the CPU)
// defines RZ_HOST_F16 and supplies IEEE round-to-nearest-even versions of
// the two: the only lines that differ between the GPU and the host run.
#ifdef RZ_HOST_F16
__device__ __forceinline__ float to_float(f16_t h) { return rz_host_f16_to_f32(h.bits); }
__device__ __forceinline__ f16_t f16_rn(float f) {
    f16_t h;
    h.bits = rz_host_f32_to_f16(f);
    return h;
}
#else
__device__ __forceinline__ float to_float(f16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}

__device__ __forceinline__ f16_t f16_rn(float f) {
    f16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float to_float(bf16_t h) {
    return __uint_as_float(((unsigned)h.bits) << 16);
}

// Round to nearest even on the bit pattern; NaN stays a quiet NaN.
__device__ __forceinline__ bf16_t bf16_rn(float f) {
    unsigned u = __float_as_uint(f);
    bf16_t h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.bits = (unsigned short)((u >> 16) | 0x40u);
    } else {
        h.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return h;
}

// Acc<T>: the type a kernel computes in (float32 for half types).
template <typename T> struct Acc {
    typedef T type;
    static __device__ __forceinline__ T load(T x) { return x; }
    static __device__ __forceinline__ T store(T x) { return x; }
};
template <> struct Acc<f16_t> {
    typedef float type;
    static __device__ __forceinline__ float load(f16_t x) { return to_float(x); }
    static __device__ __forceinline__ f16_t store(float x) { return f16_rn(x); }
};
template <> struct Acc<bf16_t> {
    typedef float type;
    static __device__ __forceinline__ float load(bf16_t x) { return to_float(x); }
    static __device__ __forceinline__ bf16_t store(float x) { return bf16_rn(x); }
};

// Integer sums and products wrap in two's complement (as numpy does);
// done in unsigned arithmetic, where wrapping is defined.
__device__ __forceinline__ float rz_add(float a, float b) { return a + b; }
__device__ __forceinline__ double rz_add(double a, double b) { return a + b; }
__device__ __forceinline__ int rz_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ i64 rz_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ float rz_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double rz_mul(double a, double b) { return a * b; }
__device__ __forceinline__ int rz_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ i64 rz_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }

// max/min propagate NaN like numpy.maximum/minimum (fmaxf would drop it).
struct OpSum { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return rz_add(a, b); } };
struct OpProd { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return rz_mul(a, b); } };
struct OpMax { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return (a > b || a != a) ? a : b; } };
struct OpMin { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return (a < b || a != a) ? a : b; } };

// Vector lanes: V elements of T packed in one aligned load of sizeof(T)*V bytes.
template <int BYTES> struct VecWord;
template <> struct VecWord<16> { typedef uint4 type; };
template <> struct VecWord<8> { typedef uint2 type; };
template <> struct VecWord<4> { typedef unsigned type; };

template <typename T, int V> struct Vec {
    typedef typename VecWord<sizeof(T) * V>::type word;
    union { word w; T e[V]; };
    __device__ __forceinline__ Vec() {}
};

template <typename T, int V>
__device__ __forceinline__ Vec<T, V> vload(const T* base, i64 i) {
    Vec<T, V> v;
    v.w = reinterpret_cast<const typename Vec<T, V>::word*>(base)[i];
    return v;
}

// An input of the vector loop: one aligned vector, or, when ``loose`` (the
// input sits at another phase than the written buffers: launch.py's
// Split.loose), V elements one by one from the same positions.
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> vload_in(const T* base, i64 i, bool loose) {
    if (!loose) return vload<T, V>(base, i);
    Vec<T, V> v;
#pragma unroll
    for (int j = 0; j < V; ++j) v.e[j] = base[i * V + j];
    return v;
}

template <typename T, int V>
__device__ __forceinline__ void vstore(T* base, i64 i, const Vec<T, V>& v) {
    reinterpret_cast<typename Vec<T, V>::word*>(base)[i] = v.w;
}

// RZ_UNROLL: vectors each thread loads before it uses any (1, 2 or 4), in the
// vector loops of reduce.cu and cast.cu. One 16-byte load per input per
// iteration of a one-wave grid-stride loop left too few bytes in flight to
// cover HBM latency (reduce at 84.5% of a device copy on an H200 that way);
// U independent loads per input, at i, i + stride, ..., i + (U-1)*stride, keep
// every warp's accesses coalesced and put U times as many in flight.
// cuda_kernels.py passes -DRZ_UNROLL=U for a variant (bench/kernels.py
// --variants measures them side by side); the default is the value here.
// Measured on the H200, 1 GiB f32 buffers, share of a device copy, variants side
// by side in one run (bench/results/gpu-h200-run2 and -run3): reduce u4 90.7% and
// 95.2%, u2 91.8% and 93.8%, u1 93.5% and 89.5%. The ranking flips between runs
// by a few percent; u4 is the one at or above 90% in both, so it is the default.
#ifndef RZ_UNROLL
#define RZ_UNROLL 4
#endif
// 4 needs 57-64 registers in reduce.cu: 4 blocks of 256 per SM, MIN_BLOCKS_PER_SM in launch.py;
// reduce.cu and cast.cu declare __launch_bounds__(256, 4) so NVRTC keeps to 64 as nvcc does.
static_assert(RZ_UNROLL == 1 || RZ_UNROLL == 2 || RZ_UNROLL == 4, "RZ_UNROLL: 1, 2 or 4");

// Launch geometry shared by every kernel (see collectives/kernels/launch.py):
// elements [head, head + nvec*V) go through aligned vectors, the rest
// ([0, head) and [head + nvec*V, n)) element by element; both loops are
// grid-stride loops.
__device__ __forceinline__ i64 rz_tid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 rz_stride() { return (i64)gridDim.x * blockDim.x; }

// The i-th scalar element: the head first, then the tail.
__device__ __forceinline__ i64 rz_scalar_index(i64 i, i64 head, i64 tail0) {
    return i < head ? i : tail0 + (i - head);
}
