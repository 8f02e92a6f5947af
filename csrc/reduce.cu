// reduce.cu: elementwise reduction of two buffers, the ring's inner kernel.
//
//   out[i] = op(a[i], b[i])    op in sum, prod, max, min
//   dtypes f16, bf16, f32, f64, i32, i64; f16/bf16 computed in float32 and
//   rounded once (nearest even); integer sum/prod wrap; max/min keep NaN.
//   In place (dst = op(dst, src)) is the same kernel with out == a.
//   avg is sum followed by rz_scale_* (cast.cu).
//
// Entry points: rz_reduce_<op>_<dtype>(a, b, out, n, head, nvec, loose), e.g.
// rz_reduce_sum_bf16. 16-byte vectors (16/E elements) cover
// [head, head + nvec*V); launch.py picks head, nvec, grid and block. loose:
// bit 0 (a) or 1 (b) when that input is at another 16-byte phase than out,
// so the vector loop reads it element by element (still stores vectors).
//
// bytes: rz_reduce read 2E write 1E   (E = element size in bytes)
// Napkin: f32 on 1 GiB buffers moves 3 GiB; at H200's 4.8 TB/s HBM that is
// about 0.67 ms. Target: >= 90% of a device-to-device copy's bandwidth.
// Built with: nvcc -arch=sm_90 -c (the test) or NVRTC through cupy's binding (kernels/cuda_kernels.py).
#include "rz_common.cuh"

template <typename T, typename Op>
__device__ __forceinline__ void reduce_body(const T* a, const T* b, T* out, i64 n, i64 head, i64 nvec, int loose) {
    typedef Acc<T> A;
    constexpr int V = 16 / sizeof(T);
    const i64 tid = rz_tid(), stride = rz_stride();
    const T* va = a + head;
    const T* vb = b + head;
    T* vo = out + head;
    constexpr int U = RZ_UNROLL;  // vectors per input loaded before any is used (rz_common.cuh)
    for (i64 i0 = tid; i0 < nvec; i0 += stride * U) {
        Vec<T, V> x[U], y[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) {
                x[u] = vload_in<T, V>(va, i, loose & 1);
                y[u] = vload_in<T, V>(vb, i, loose & 2);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * stride;
            if (i < nvec) {
                Vec<T, V> z;
#pragma unroll
                for (int j = 0; j < V; ++j) z.e[j] = A::store(Op::apply(A::load(x[u].e[j]), A::load(y[u].e[j])));
                vstore<T, V>(vo, i, z);
            }
        }
    }
    const i64 tail0 = head + nvec * V;
    const i64 nscalar = head + (n - tail0);
    for (i64 i = tid; i < nscalar; i += stride) {
        const i64 k = rz_scalar_index(i, head, tail0);
        out[k] = A::store(Op::apply(A::load(a[k]), A::load(b[k])));
    }
}

#define RZ_REDUCE(OPNAME, OP, SUF, T)                                                         \
    extern "C" __global__ void __launch_bounds__(256, 4)                                       \
    rz_reduce_##OPNAME##_##SUF(const T* a, const T* b, T* out, i64 n, i64 head, i64 nvec,    \
                               int loose) {                                                   \
        reduce_body<T, OP>(a, b, out, n, head, nvec, loose);                                  \
    }

#define RZ_REDUCE_ALL_OPS(SUF, T)   \
    RZ_REDUCE(sum, OpSum, SUF, T)   \
    RZ_REDUCE(prod, OpProd, SUF, T) \
    RZ_REDUCE(max, OpMax, SUF, T)   \
    RZ_REDUCE(min, OpMin, SUF, T)

RZ_REDUCE_ALL_OPS(f16, f16_t)
RZ_REDUCE_ALL_OPS(bf16, bf16_t)
RZ_REDUCE_ALL_OPS(f32, float)
RZ_REDUCE_ALL_OPS(f64, double)
RZ_REDUCE_ALL_OPS(i32, int)
RZ_REDUCE_ALL_OPS(i64, i64)
