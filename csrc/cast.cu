// cast.cu: precision casts and the scale of avg, for mixed precision.
//
//   rz_cast_<src>_<dst>(src, dst, n, head, nvec, loose): dst[i] = round(src[i]),
//     f32 -> bf16 / f16 rounds to nearest even (NaN stays NaN, overflow -> inf);
//     bf16 / f16 -> f32 is exact. V = 4 elements per vector: 16 bytes of
//     float32 on one side, 8 bytes of 16-bit values on the other. loose bit 0:
//     src is at another phase than dst and is read element by element.
//   rz_scale_<dtype>(x, n, head, nvec, loose, divisor): x[i] = x[i] / divisor in
//     place, the second half of avg; half types divide in float32 and round
//     once; integers truncate toward zero (C division). V = 16/E elements.
//
// bytes: rz_cast read 1S write 1D   (S, D = source and destination element sizes)
// bytes: rz_scale read 1E write 1E   (E = element size in bytes)
// Napkin: f32 -> bf16 of 256 Mi elements moves 1.5 GiB; at 4.8 TB/s about
// 0.34 ms.
// Built with: nvcc -arch=sm_90 -c (the test) or NVRTC through cupy's binding (kernels/cuda_kernels.py).
#include "rz_common.cuh"

template <typename S, typename D> struct Convert;
template <> struct Convert<float, bf16_t> { static __device__ __forceinline__ bf16_t go(float x) { return bf16_rn(x); } };
template <> struct Convert<float, f16_t> { static __device__ __forceinline__ f16_t go(float x) { return f16_rn(x); } };
template <> struct Convert<bf16_t, float> { static __device__ __forceinline__ float go(bf16_t x) { return to_float(x); } };
template <> struct Convert<f16_t, float> { static __device__ __forceinline__ float go(f16_t x) { return to_float(x); } };

template <typename S, typename D>
__device__ __forceinline__ void cast_body(const S* src, D* dst, i64 n, i64 head, i64 nvec, int loose) {
    constexpr int V = 4;
    const i64 tid = rz_tid(), stride = rz_stride();
    constexpr int U = RZ_UNROLL;  // vectors loaded before any is used (rz_common.cuh)
    for (i64 i0 = tid; i0 < nvec; i0 += stride * U) {
        Vec<S, V> x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) x[u] = vload_in<S, V>(src + head, i, loose & 1);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) {
                Vec<D, V> y;
#pragma unroll
                for (int j = 0; j < V; ++j) y.e[j] = Convert<S, D>::go(x[u].e[j]);
                vstore<D, V>(dst + head, i, y);
            }
        }
    }
    const i64 tail0 = head + nvec * V;
    const i64 nscalar = head + (n - tail0);
    for (i64 i = tid; i < nscalar; i += stride) {
        const i64 k = rz_scalar_index(i, head, tail0);
        dst[k] = Convert<S, D>::go(src[k]);
    }
}

#define RZ_CAST(SSUF, S, DSUF, D)                                                      \
    extern "C" __global__ void __launch_bounds__(256, 4)                                \
    rz_cast_##SSUF##_##DSUF(const S* src, D* dst, i64 n, i64 head, i64 nvec, int loose) { \
        cast_body<S, D>(src, dst, n, head, nvec, loose);                               \
    }

RZ_CAST(f32, float, bf16, bf16_t)
RZ_CAST(f32, float, f16, f16_t)
RZ_CAST(bf16, bf16_t, f32, float)
RZ_CAST(f16, f16_t, f32, float)

template <typename T>
__device__ __forceinline__ void scale_body(T* x, i64 n, i64 head, i64 nvec, typename Acc<T>::type divisor) {
    typedef Acc<T> A;
    constexpr int V = 16 / sizeof(T);
    const i64 tid = rz_tid(), stride = rz_stride();
    constexpr int U = RZ_UNROLL;
    for (i64 i0 = tid; i0 < nvec; i0 += stride * U) {
        Vec<T, V> v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) v[u] = vload<T, V>(x + head, i);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) {
#pragma unroll
                for (int j = 0; j < V; ++j) v[u].e[j] = A::store(A::load(v[u].e[j]) / divisor);
                vstore<T, V>(x + head, i, v[u]);
            }
        }
    }
    const i64 tail0 = head + nvec * V;
    const i64 nscalar = head + (n - tail0);
    for (i64 i = tid; i < nscalar; i += stride) {
        const i64 k = rz_scalar_index(i, head, tail0);
        x[k] = A::store(A::load(x[k]) / divisor);
    }
}

#define RZ_SCALE(SUF, T)                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 4)                                          \
    rz_scale_##SUF(T* x, i64 n, i64 head, i64 nvec, int /*loose: x is written, never loose*/,   \
                   Acc<T>::type divisor) {                                                       \
        scale_body<T>(x, n, head, nvec, divisor);                                                \
    }

RZ_SCALE(f16, f16_t)
RZ_SCALE(bf16, bf16_t)
RZ_SCALE(f32, float)
RZ_SCALE(f64, double)
RZ_SCALE(i32, int)
RZ_SCALE(i64, i64)
