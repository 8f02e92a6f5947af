// rz_move.cuh: how one block moves a slice: a copy, a reduce of two inputs, or the fold of
// every rank's copy in the ring's order, written to one or two places.
//
//   copy    d0[i] (= d1[i]) = a[i]
//   reduce  d0[i] (= d1[i]) = op(a[i], b[i])  a: this rank's data, b: what came in (the ring's order)
//   fold    acc = s[0][i]; acc = op(s[k][i], acc) for k = 1 .. n-1, rounded to T after every op,
//           which is what n-1 hops of the ring compute, so every rank gets the ring's bits.
// f16/bf16 are computed in float32 and rounded once per op (rz_common.cuh, as reduce.cu does).
// Every load goes through L2 (__ldcg: data that other GPUs and blocks wrote), every store is a
// global store; when every buffer of a slice is at the same 16-byte phase the body moves
// 16-byte vectors (LDG.E.128 / STG.E.128), RZ_MOVE_UNROLL in flight per thread, and only the
// head and tail go element by element; a slice whose buffers disagree goes element by element.
// Bytes: copy reads 1 writes 1 (or 2), reduce reads 2 writes 1 (or 2), fold reads n writes 1 (or 2).
#pragma once
#include "rz_ring.cuh"

#ifndef RZ_MOVE_UNROLL
#define RZ_MOVE_UNROLL 4
#endif

// One element through L2 (data written by other agents must not come from a stale L1 line).
template <typename U, typename T> __device__ __forceinline__ T rz_ld1_as(const T* p) {
    union { U u; T v; } c;
    c.u = __ldcg(reinterpret_cast<const U*>(p));
    return c.v;
}
template <typename T> __device__ __forceinline__ T rz_ld1(const T* p) {
    if constexpr (sizeof(T) == 1) return rz_ld1_as<unsigned char>(p);
    else if constexpr (sizeof(T) == 2) return rz_ld1_as<unsigned short>(p);
    else if constexpr (sizeof(T) == 4) return rz_ld1_as<unsigned>(p);
    else return rz_ld1_as<unsigned long long>(p);
}

template <typename T, typename Op> __device__ __forceinline__ T rz_op1(T a, T b) {
    typedef Acc<T> A;
    return A::store(Op::apply(A::load(a), A::load(b)));
}

template <typename T, typename Op> __device__ __forceinline__ uint4 rz_opv(uint4 a, uint4 b) {
    constexpr int V = 16 / sizeof(T);
    Vec<T, V> x, y, z;
    x.w = a;
    y.w = b;
#pragma unroll
    for (int j = 0; j < V; ++j) z.e[j] = rz_op1<T, Op>(x.e[j], y.e[j]);
    return z.w;
}

__device__ __forceinline__ unsigned rz_phase(const void* p) { return (unsigned)((unsigned long long)p & 15); }

// How n elements at 16-byte phase ``phase`` split: scalars [0, head), vectors, scalars from tail0.
template <typename T> struct RzSplit {
    i64 head, nvec, tail0;
    __device__ __forceinline__ RzSplit(i64 n, unsigned phase, bool vec) {
        constexpr int V = 16 / sizeof(T);
        head = vec ? (i64)((16 - phase) & 15) / (i64)sizeof(T) : n;
        if (head > n) head = n;
        nvec = (n - head) / V;
        tail0 = head + nvec * V;
    }
};

// copy (REDUCE false) or reduce (true) of n elements into d0 and, unless null, d1.
template <typename T, typename Op, bool REDUCE>
__device__ __forceinline__ void rz_move(i64 n, const T* a, const T* b, T* d0, T* d1) {
    constexpr int U = RZ_MOVE_UNROLL;
    const unsigned ph = rz_phase(a);
    const bool vec = (!REDUCE || rz_phase(b) == ph) && rz_phase(d0) == ph && (d1 == nullptr || rz_phase(d1) == ph);
    const RzSplit<T> sp(n, ph, vec);
    const i64 tid = threadIdx.x, nt = blockDim.x;
    const uint4* va = reinterpret_cast<const uint4*>(a + sp.head);
    const uint4* vb = reinterpret_cast<const uint4*>(REDUCE ? b + sp.head : a);
    uint4* v0 = reinterpret_cast<uint4*>(d0 + sp.head);
    uint4* v1 = d1 ? reinterpret_cast<uint4*>(d1 + sp.head) : nullptr;
    for (i64 i0 = tid; i0 < sp.nvec; i0 += nt * U) {
        uint4 x[U], y[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * nt;
            if (i < sp.nvec) {
                x[u] = __ldcg(va + i);
                if (REDUCE) y[u] = __ldcg(vb + i);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 i = i0 + u * nt;
            if (i < sp.nvec) {
                uint4 z = x[u];
                if constexpr (REDUCE) z = rz_opv<T, Op>(x[u], y[u]);
                __stcg(v0 + i, z);
                if (v1) __stcg(v1 + i, z);
            }
        }
    }
    const i64 nscalar = sp.head + (n - sp.tail0);
    for (i64 i = tid; i < nscalar; i += nt) {
        const i64 k = i < sp.head ? i : sp.tail0 + (i - sp.head);
        T z = rz_ld1(a + k);
        if constexpr (REDUCE) z = rz_op1<T, Op>(z, rz_ld1(b + k));
        d0[k] = z;
        if (d1) d1[k] = z;
    }
}

// The ring's fold into d0 and, unless null, d1: source k is the ns-rank table's entry
// (first + k) % ns, ``off`` bytes in (every rank's staged copy of the same elements).
template <typename T, typename Op>
__device__ __forceinline__ void rz_fold(i64 n, RzWs* const* peers, int first, int ns, i64 off, T* d0, T* d1) {
    const unsigned ph = rz_phase(d0);
    bool vec = d1 == nullptr || rz_phase(d1) == ph;
    for (int k = 0; k < ns; ++k) vec = vec && rz_phase(reinterpret_cast<const char*>(peers[k]) + off) == ph;
    const RzSplit<T> sp(n, ph, vec);
    const i64 tid = threadIdx.x, nt = blockDim.x;
    for (i64 i = tid; i < sp.nvec; i += nt) {
        uint4 x[RZ_MAX_RANKS];
#pragma unroll
        for (int k = 0; k < RZ_MAX_RANKS; ++k)
            if (k < ns) {
                const T* src = reinterpret_cast<const T*>(reinterpret_cast<const char*>(peers[(first + k) % ns]) + off);
                x[k] = __ldcg(reinterpret_cast<const uint4*>(src + sp.head) + i);
            }
        uint4 acc = x[0];
#pragma unroll
        for (int k = 1; k < RZ_MAX_RANKS; ++k)
            if (k < ns) acc = rz_opv<T, Op>(x[k], acc);
        __stcg(reinterpret_cast<uint4*>(d0 + sp.head) + i, acc);
        if (d1) __stcg(reinterpret_cast<uint4*>(d1 + sp.head) + i, acc);
    }
    const i64 nscalar = sp.head + (n - sp.tail0);
    for (i64 i = tid; i < nscalar; i += nt) {
        const i64 k = i < sp.head ? i : sp.tail0 + (i - sp.head);
        T acc = T();
        for (int j = 0; j < ns; ++j) {
            const T* src = reinterpret_cast<const T*>(reinterpret_cast<const char*>(peers[(first + j) % ns]) + off);
            acc = j == 0 ? rz_ld1(src + k) : rz_op1<T, Op>(rz_ld1(src + k), acc);
        }
        d0[k] = acc;
        if (d1) d1[k] = acc;
    }
}
