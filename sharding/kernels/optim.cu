// optim.cu: fused optimizer steps over a flat float32 shard, one pass each.
//
// AdamW, in torch.optim.AdamW's order of operations, with torch's CPU kernel's
// fused multiply-adds written out as fmaf and nothing else contracted (the
// module is built with --fmad=false), so the result matches
// sharding/optim_numpy.py (which sharding/optim_ref.py runs) bit for bit:
//   g  = grad * grad_scale
//   p  = p * (1 - lr*wd)                           decoupled weight decay
//   m  = lerp(m, g, 1 - beta1)                     torch's lerp: fma(w, g-m, m) for w < 0.5, else fma(w-1, g-m, g)
//   v  = fma((1 - beta2) * g, g, v * beta2)
//   p  = p + (-lr/bc1 * m) / (sqrt(v) / sqrt(bc2) + eps)
//   with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (computed on the host)
// SGD with momentum, in torch.optim.SGD's order:
//   g  = grad * grad_scale;  g = fma(p, wd, g)       (if wd != 0)
//   b  = first_step ? g : fma(g, 1 - dampening, b * momentum)  (if momentum != 0)
//   g  = nesterov ? fma(b, momentum, g) : b                    (if momentum != 0)
//   p  = fma(g, -lr, p)
// Either step optionally writes the new weights rounded to bf16 or f16
// (nearest even) in the same pass: rz_adamw_f32_bf16, rz_sgd_f32_f16, ...
// Entry points: rz_adamw_f32[_bf16|_f16], rz_sgd_f32[_bf16|_f16]; the
// variants without a suffix ignore their lowp pointer. Arguments: the
// buffers, n, head, nvec, loose (bit 1: grad is at another 16-byte phase
// than the buffers written, and is read element by element), the scalars.
//
// bytes: rz_adamw read 16 write 12 lowp 2   (p, g, m, v read; p, m, v written)
// bytes: rz_sgd read 12 write 8 lowp 2      (with momentum; without it read 8 write 4)
// Napkin: AdamW over 256 Mi parameters moves 7 GiB (7.5 with the bf16
// copy); at 4.8 TB/s about 1.6 ms. Target: >= 80% of a device copy.
// Built with: nvcc -arch=sm_90 --fmad=false -c (the test) or NVRTC.
#include "rz_common.cuh"

struct none_t { unsigned short bits; };

template <typename L> struct Low;
template <> struct Low<none_t> { static __device__ __forceinline__ none_t go(float) { none_t z; z.bits = 0; return z; } };
template <> struct Low<bf16_t> { static __device__ __forceinline__ bf16_t go(float x) { return bf16_rn(x); } };
template <> struct Low<f16_t> { static __device__ __forceinline__ f16_t go(float x) { return f16_rn(x); } };
template <typename L> struct HasLow { static const bool value = true; };
template <> struct HasLow<none_t> { static const bool value = false; };

struct AdamWArgs {
    float grad_scale, decay, w1, one_minus_w1, beta2, c2, bc2_sqrt, eps, neg_step;
};

__device__ __forceinline__ void adamw_elem(float& p, float g, float& m, float& v, const AdamWArgs& a) {
    g = g * a.grad_scale;
    p = p * a.decay;
    m = (a.w1 < 0.5f) ? fmaf(a.w1, g - m, m) : fmaf(-a.one_minus_w1, g - m, g);  // torch's lerp, both branches
    v = fmaf(a.c2 * g, g, v * a.beta2);
    const float denom = sqrtf(v) / a.bc2_sqrt + a.eps;
    p = p + (a.neg_step * m) / denom;
}

template <typename L>
__device__ __forceinline__ void adamw_body(float* p, const float* g, float* m, float* v, L* lowp,
                                           i64 n, i64 head, i64 nvec, int loose, const AdamWArgs& a) {
    constexpr int V = 4;
    const i64 tid = rz_tid(), stride = rz_stride();
    for (i64 i = tid; i < nvec; i += stride) {
        Vec<float, V> pv = vload<float, V>(p + head, i), gv = vload_in<float, V>(g + head, i, loose & 2);
        Vec<float, V> mv = vload<float, V>(m + head, i), vv = vload<float, V>(v + head, i);
        Vec<L, V> lv;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            adamw_elem(pv.e[j], gv.e[j], mv.e[j], vv.e[j], a);
            lv.e[j] = Low<L>::go(pv.e[j]);
        }
        vstore<float, V>(p + head, i, pv);
        vstore<float, V>(m + head, i, mv);
        vstore<float, V>(v + head, i, vv);
        if (HasLow<L>::value) vstore<L, V>(lowp + head, i, lv);
    }
    const i64 tail0 = head + nvec * V;
    const i64 nscalar = head + (n - tail0);
    for (i64 i = tid; i < nscalar; i += stride) {
        const i64 k = rz_scalar_index(i, head, tail0);
        float pk = p[k], mk = m[k], vk = v[k];
        adamw_elem(pk, g[k], mk, vk, a);
        p[k] = pk;
        m[k] = mk;
        v[k] = vk;
        if (HasLow<L>::value) lowp[k] = Low<L>::go(pk);
    }
}

#define RZ_ADAMW(NAME, L)                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                              \
    NAME(float* p, const float* g, float* m, float* v, L* lowp, i64 n, i64 head, i64 nvec,         \
         int loose, float grad_scale, float decay, float w1, float one_minus_w1, float beta2, float c2,       \
         float bc2_sqrt, float eps, float neg_step) {                                              \
        AdamWArgs a = {grad_scale, decay, w1, one_minus_w1, beta2, c2, bc2_sqrt, eps, neg_step};   \
        adamw_body<L>(p, g, m, v, lowp, n, head, nvec, loose, a);                                         \
    }

RZ_ADAMW(rz_adamw_f32, none_t)
RZ_ADAMW(rz_adamw_f32_bf16, bf16_t)
RZ_ADAMW(rz_adamw_f32_f16, f16_t)

struct SgdArgs {
    float grad_scale, wd, momentum, damp1, neg_lr;
    int has_wd, has_momentum, first_step, nesterov;
};

__device__ __forceinline__ void sgd_elem(float& p, float g, float& b, const SgdArgs& a) {
    g = g * a.grad_scale;
    if (a.has_wd) g = fmaf(p, a.wd, g);
    if (a.has_momentum) {
        b = a.first_step ? g : fmaf(g, a.damp1, b * a.momentum);
        g = a.nesterov ? fmaf(b, a.momentum, g) : b;
    }
    p = fmaf(g, a.neg_lr, p);
}

// buf is read and written only when has_momentum (the host passes any
// valid pointer otherwise).
template <typename L>
__device__ __forceinline__ void sgd_body(float* p, const float* g, float* buf, L* lowp,
                                         i64 n, i64 head, i64 nvec, int loose, const SgdArgs& a) {
    constexpr int V = 4;
    const i64 tid = rz_tid(), stride = rz_stride();
    for (i64 i = tid; i < nvec; i += stride) {
        Vec<float, V> pv = vload<float, V>(p + head, i), gv = vload_in<float, V>(g + head, i, loose & 2);
        Vec<float, V> bv;
        if (a.has_momentum && !a.first_step) bv = vload<float, V>(buf + head, i);
        Vec<L, V> lv;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            sgd_elem(pv.e[j], gv.e[j], bv.e[j], a);
            lv.e[j] = Low<L>::go(pv.e[j]);
        }
        vstore<float, V>(p + head, i, pv);
        if (a.has_momentum) vstore<float, V>(buf + head, i, bv);
        if (HasLow<L>::value) vstore<L, V>(lowp + head, i, lv);
    }
    const i64 tail0 = head + nvec * V;
    const i64 nscalar = head + (n - tail0);
    for (i64 i = tid; i < nscalar; i += stride) {
        const i64 k = rz_scalar_index(i, head, tail0);
        float pk = p[k], bk = 0.0f;
        if (a.has_momentum && !a.first_step) bk = buf[k];
        sgd_elem(pk, g[k], bk, a);
        p[k] = pk;
        if (a.has_momentum) buf[k] = bk;
        if (HasLow<L>::value) lowp[k] = Low<L>::go(pk);
    }
}

#define RZ_SGD(NAME, L)                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                              \
    NAME(float* p, const float* g, float* buf, L* lowp, i64 n, i64 head, i64 nvec,                 \
         int loose, float grad_scale, float wd, float momentum, float damp1, float neg_lr,                    \
         int has_wd, int has_momentum, int first_step, int nesterov) {                             \
        SgdArgs a = {grad_scale, wd, momentum, damp1, neg_lr,                                      \
                     has_wd, has_momentum, first_step, nesterov};                                  \
        sgd_body<L>(p, g, buf, lowp, n, head, nvec, loose, a);                                            \
    }

RZ_SGD(rz_sgd_f32, none_t)
RZ_SGD(rz_sgd_f32_bf16, bf16_t)
RZ_SGD(rz_sgd_f32_f16, f16_t)
