// ring_small.cu: the small-size kernels (one launch, every peer's workspace mapped) and the
// two-process handshake probe.
//
//   rz_oneshot_ar_<op>_<dtype>  every rank reads every peer's staged input and folds it in the
//                               ring's order (rz_fold), so all ranks get the ring's bits
//   rz_oneshot_rs_<op>_<dtype>  the same, for this rank's segment only
//   rz_oneshot_ag               every rank copies every peer's staged piece (bytes)
//   rz_twoshot_ar_<op>_<dtype>  reduce this rank's segment from every peer, publish it in this
//                               rank's result area, then copy every other segment from its owner
//   rz_probe                    two ranks bounce a counter ``rounds`` times under one deadline
// Each block takes part b of every segment (rz_part), stages it, and meets its peers'
// block b at an epoch barrier: arrive[p] counts the barriers peer p reached, in the poller's
// memory, never reset. Inputs and results are staged in two areas used in turn (the call's
// parity), so a rank may stage call e+1 while a slow peer still reads call e: a peer that
// reached call e+1's barrier has finished reading call e-1's area. No exit barrier.
// Bytes per rank, S = the buffer, u = its segment (even split): one-shot all-reduce reads
// (n+1)S and writes 2S; two-shot reads S + n u + (S - u) and writes S + 2u + (S - u)
// (plan.traffic states every kind; explain.py checks it against the host build's moves).
// Napkin: latency kernels: 4-64 KiB should cost a launch plus a few microseconds of barrier
// (unmeasured; collectives/gpu_ring/tuning.py holds the crossovers, unmeasured too).
#include "rz_move.cuh"

#define RZ_ONESHOT_AR 0
#define RZ_ONESHOT_RS 1
#define RZ_ONESHOT_AG 2
#define RZ_TWOSHOT_AR 3
#ifndef RZ_BLOCK
#define RZ_BLOCK 512
#endif

__device__ __forceinline__ char* rz_area(RzWs* ws, const RzLaunch& L, int which) {
    return reinterpret_cast<char*>(ws) + L.stage_off + (i64)which * L.stage_bytes;
}

// One epoch barrier of block b: tell every peer, then wait for every peer. Lead thread only.
__device__ __forceinline__ bool rz_barrier(const RzArgs& A, const RzRank& a, RzWhere& w, int b, u64 bar) {
    const int n = A.L.nranks;
    for (int p = 0; p < n; ++p)
        if (p != a.rank) rz_st_release(&a.peer[p]->small[b].arrive[a.rank], bar);
    for (int p = 0; p < n; ++p)
        if (p != a.rank && rz_wait(&a.ws->small[b].arrive[p], bar, w, RZ_WAIT_ARRIVE, p, true)) return true;
    return false;
}

template <typename T, typename Op, int KIND>
__device__ __forceinline__ void small_body(const RzArgs& A) {
    const RzLaunch& L = A.L;
    const int nb = L.nchannels, b = blockIdx.x % nb, n = L.nranks;
    const RzRank& a = A.r[blockIdx.x / nb];
    const int me = a.rank;
    const bool lead = threadIdx.x == 0;
    RzSmall* ms = &a.ws->small[b];
    RzWhere w{&L, &a, b, 0, 4 + KIND, 0};
    const u64 bars = rz_ld_relaxed(&ms->bars), calls = rz_ld_relaxed(&ms->calls);
    const int par = (int)(calls & 1);
    constexpr i64 E = sizeof(T), G = 16 / E;
    const i64 xbase = KIND == RZ_ONESHOT_AG ? L.offs[me] : 0;
    const i64 obase = KIND == RZ_ONESHOT_RS ? L.offs[me] : 0;
    bool bad = lead && rz_entry_aborted(w, true);
    if (__syncthreads_or(bad)) return;

    // 1. stage this block's part of the input: every segment (or, for the all-gather, ours)
    for (int s = 0; s < n; ++s) {
        if (KIND == RZ_ONESHOT_AG && s != me) continue;
        i64 lo, hi;
        rz_part(L.offs, s, b, nb, G, &lo, &hi);
        T* st = reinterpret_cast<T*>(rz_area(a.ws, L, par) + lo * E);
        const T* x = reinterpret_cast<const T*>(a.x + (lo - xbase) * E);
        rz_move<T, Op, false>(hi - lo, x, nullptr, st, nullptr);
        if (lead) RZ_TRACE_MOVE(me, b, 0, 0, s, lo, (hi - lo) * E, x, nullptr, st, nullptr);
    }
    __syncthreads();
    w.step = 1;
    bad = lead && rz_barrier(A, a, w, b, bars + 1);
    if (__syncthreads_or(bad)) return;

    // 2. fold (or copy) from every peer's staging area
    for (int s = 0; s < n; ++s) {
        const bool mine_only = KIND == RZ_ONESHOT_RS || KIND == RZ_TWOSHOT_AR;
        if (mine_only && s != me) continue;
        i64 lo, hi;
        rz_part(L.offs, s, b, nb, G, &lo, &hi);
        T* out = reinterpret_cast<T*>(a.out + (lo - obase) * E);
        if constexpr (KIND == RZ_ONESHOT_AG) {
            const T* from = reinterpret_cast<const T*>(rz_area(a.peer[s], L, par) + lo * E);
            rz_move<T, Op, false>(hi - lo, from, nullptr, out, nullptr);
            if (lead) RZ_TRACE_MOVE(me, b, 0, 1, s, lo, (hi - lo) * E, from, nullptr, out, nullptr);
        } else {
            // the ring's order: segment s starts at rank s+1 and ends at s
            T* pub = KIND == RZ_TWOSHOT_AR ? reinterpret_cast<T*>(rz_area(a.ws, L, 2 + par) + lo * E) : nullptr;
            rz_fold<T, Op>(hi - lo, a.peer, s + 1, n, L.stage_off + par * L.stage_bytes + lo * E, out, pub);
            if (lead) {  // the host build's log: one read per source, then the writes
                for (int k = 0; k < n; ++k)
                    RZ_TRACE_MOVE(me, b, 0, 1, s, lo, (hi - lo) * E, rz_area(a.peer[(s + 1 + k) % n], L, par) + lo * E,
                                  nullptr, nullptr, nullptr);
                RZ_TRACE_MOVE(me, b, 0, 1, s, lo, (hi - lo) * E, nullptr, nullptr, out, pub);
            }
        }
    }
    int nbar = 1;
    if constexpr (KIND == RZ_TWOSHOT_AR) {  // 3. every other segment from the rank that reduced it
        __syncthreads();
        w.step = 2;
        bad = lead && rz_barrier(A, a, w, b, bars + 2);
        if (__syncthreads_or(bad)) return;
        for (int s = 0; s < n; ++s) {
            if (s == me) continue;
            i64 lo, hi;
            rz_part(L.offs, s, b, nb, G, &lo, &hi);
            const T* from = reinterpret_cast<const T*>(rz_area(a.peer[s], L, 2 + par) + lo * E);
            rz_move<T, Op, false>(hi - lo, from, nullptr, reinterpret_cast<T*>(a.out + lo * E), nullptr);
            if (lead) RZ_TRACE_MOVE(me, b, 0, 2, s, lo, (hi - lo) * E, from, nullptr, a.out + lo * E, nullptr);
        }
        nbar = 2;
    }
    if (lead) {
        ms->bars = bars + nbar;
        ms->calls = calls + 1;
    }
}

#define RZ_SMALL(NAME, KIND, OPNAME, OP, SUF, T)                                                        \
    extern "C" __global__ void __launch_bounds__(RZ_BLOCK, 1) rz_##NAME##_##OPNAME##_##SUF(const __grid_constant__ RzArgs A) { \
        small_body<T, OP, KIND>(A);                                                                       \
    }
#define RZ_SMALL_KIND(NAME, KIND, SUF, T)                                                   \
    RZ_SMALL(NAME, KIND, sum, OpSum, SUF, T) RZ_SMALL(NAME, KIND, prod, OpProd, SUF, T)      \
    RZ_SMALL(NAME, KIND, max, OpMax, SUF, T) RZ_SMALL(NAME, KIND, min, OpMin, SUF, T)
#define RZ_SMALL_ALL(SUF, T)                                                                \
    RZ_SMALL_KIND(oneshot_ar, RZ_ONESHOT_AR, SUF, T) RZ_SMALL_KIND(oneshot_rs, RZ_ONESHOT_RS, SUF, T) \
    RZ_SMALL_KIND(twoshot_ar, RZ_TWOSHOT_AR, SUF, T)

RZ_SMALL_ALL(bf16, bf16_t)
RZ_SMALL_ALL(f32, float)
#ifndef RZ_FEW_DTYPES  // (the host tests' variant builds keep bf16 and f32 only)
RZ_SMALL_ALL(f16, f16_t)
RZ_SMALL_ALL(f64, double)
RZ_SMALL_ALL(i32, int)
RZ_SMALL_ALL(i64, i64)
#endif

extern "C" __global__ void __launch_bounds__(RZ_BLOCK, 1) rz_oneshot_ag(const __grid_constant__ RzArgs A) {
    small_body<unsigned char, OpSum, RZ_ONESHOT_AG>(A);
}

// The handshake: ``rounds`` round trips with the peer, all within deadline_ns of the start.
// result[0] = 1 on success, result[1] = rounds done, result[2] = nanoseconds taken.
extern "C" __global__ void __launch_bounds__(32, 1) rz_probe(const __grid_constant__ RzProbe P) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const u64 base = rz_ld_relaxed(&P.ws->head.probe_local), t0 = rz_globaltimer();
    int done = 0;
    bool late = false;
    for (int i = 1; i <= P.rounds && !late; ++i) {
        rz_st_release(&P.peer->head.probe, base + i);
        while (rz_ld_acquire(&P.ws->head.probe) < base + i) {
            if (rz_globaltimer() - t0 > P.deadline_ns) {
                late = true;
                break;
            }
            rz_pause();
        }
        done += !late;
    }
    P.ws->head.probe_local = base + done;
    P.result[1] = (u64)done;
    P.result[2] = rz_globaltimer() - t0;
    rz_st_release(&P.result[0], late ? 2 : 1);
}
