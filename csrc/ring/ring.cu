// ring.cu: one launch runs a whole chunked, pipelined ring reduce-scatter, all-gather or
// all-reduce (the two in one loop, safe in place), with no host in the loop.
//
// Entry points: rz_ring_rs_<op>_<dtype>, rz_ring_ar_<op>_<dtype> (op sum, prod, max, min;
// dtype f16, bf16, f32, f64, i32, i64) and rz_ring_ag (bytes: the all-gather only copies),
// each taking one RzArgs (rz_ring.cuh). Built with NVRTC or nvcc -arch=sm_90 (--std=c++17,
// include path csrc/), or by g++ through csrc/ring/host_shim.h.
//
// Channels are blocks: block b serves channel b % nchannels of rank b / nchannels (so one
// launch can carry every virtual rank of a process). Each channel is its own ring over its
// part of every segment (rz_part: whole 16-byte granules). The steps are the host ring's
// (collectives/schedule.py): reduce-scatter step t sends segment me-t-1 to the right, and
// what a rank receives at step t it reduces, op(mine, incoming), and sends at t+1; the
// all-gather forwards what it received. A step moves one slice (at most slot_bytes) of its
// segment; the steps of slice 0 of every segment, then of slice 1, ... ("rounds"), so all
// ranks agree on every message without a word. Every step of every round sends and
// receives one message, empty or not, so the counters stay in step on every rank.
//
// Flow control per channel: message k lands in the receiver's slot k % nslots; the sender
// waits until freed >= k + 1 - nslots, the receiver until ready >= k + 1. A step needs one
// slot and a channel has at least two, so a sender is never blocked by a receiver one step
// behind (no cycle of waits can close around the ring). In direct mode the all-gather's
// data goes straight into the right neighbour's output (no slot, no free-slot wait), once
// it has said it entered this call (credit); the reduce-scatter half always uses slots, so
// an in-place all-reduce never overwrites an input a neighbour has not read.
//
// Bytes per rank, u = one segment: all-reduce (6n-4)u through slots, (5n-4)u direct, against
// 2n u minimal (read the input, write the output); reduce-scatter (3n-1)u vs (n+1)u;
// all-gather (3n-1)u, (2n-1)u direct, vs (n+1)u. Napkin: a 64 MiB f32 all-reduce on 2 ranks
// of one H200 moves 2 x 4 x 64 MiB = 512 MiB of HBM traffic, about 112 us at 4.8 TB/s;
// across NVLink the aim is NCCL's ring, ~370 GB/s busbw on 8 x H100. Unmeasured here.
#include "rz_move.cuh"

#define RZ_RS 0
#define RZ_AG 1
#define RZ_AR 2
#ifndef RZ_BLOCK
#define RZ_BLOCK 512
#endif

struct RzStep {
    int seg;
    bool recv, send, reduce, gather, final_;
};

// Step t of collective ``coll`` on rank me of n: which segment, and what the step does.
__device__ __forceinline__ RzStep rz_step(int coll, int me, int n, int t) {
    RzStep s;
    const int nsteps = coll == RZ_AR ? 2 * n - 1 : n;
    s.recv = t > 0;
    s.send = t < nsteps - 1;
    s.gather = coll == RZ_AG || (coll == RZ_AR && t >= n);  // moves final data
    s.reduce = !s.gather && t > 0;
    s.final_ = !s.gather && t == n - 1;  // the reduce that finishes segment me
    const int k = coll == RZ_AR && t >= n ? t - (n - 1) : t;
    s.seg = ((s.gather ? me - k : me - k - 1) % n + n) % n;
    return s;
}

__device__ __forceinline__ char* rz_slot(RzWs* ws, const RzLaunch& L, int ch, u64 k, unsigned phase) {
    return reinterpret_cast<char*>(ws) + L.slots_off + ((i64)ch * L.nslots + (i64)(k % (u64)L.nslots)) * L.slot_stride
           + phase;
}

template <typename T, typename Op, int COLL>
__device__ __forceinline__ void ring_body(const RzArgs& A) {
    const RzLaunch& L = A.L;
    const int nch = L.nchannels, ch = blockIdx.x % nch, n = L.nranks;
    const RzRank& a = A.r[blockIdx.x / nch];
    const int me = a.rank, left = (me + n - 1) % n, right = (me + 1) % n;
    const int nsteps = COLL == RZ_AR ? 2 * n - 1 : n;
    const bool lead = threadIdx.x == 0, direct = COLL != RZ_RS && (a.flags & RZ_DIRECT);
    RzChan* mc = &a.ws->chan[ch];
    RzChan* lc = &a.left->chan[ch];
    RzChan* rc = &a.right->chan[ch];
    RzWhere w{&L, &a, ch, -1, COLL, -1};
    // this rank's carried state: read by every thread before the first barrier, written
    // back by the lead thread after the last one
    u64 sent = rz_ld_relaxed(&mc->sent), recvd = rz_ld_relaxed(&mc->recvd);
    const u64 calls = rz_ld_relaxed(&mc->calls);
    bool bad = false;
    if (lead) {
        bad = rz_entry_aborted(w, false);
        if (!bad) rz_st_release(&lc->credit, calls + 1);  // the left may now write into my output
        if (!bad && direct) bad = rz_wait(&mc->credit, calls + 1, w, RZ_WAIT_CREDIT, right, false);
    }
    if (__syncthreads_or(bad)) return;

    constexpr i64 E = sizeof(T), G = 16 / E;
    const i64 slice = L.slot_bytes / E;
    i64 rounds = 0;
    for (int s = 0; s < n; ++s) {
        i64 lo, hi;
        rz_part(L.offs, s, ch, nch, G, &lo, &hi);
        const i64 r = (hi - lo + slice - 1) / slice;
        rounds = r > rounds ? r : rounds;
    }
    const i64 xbase = COLL == RZ_AG ? L.offs[me] : 0;  // x is only this rank's segment
    const i64 obase = COLL == RZ_RS ? L.offs[me] : 0;  // out is only this rank's segment
    for (i64 round = 0; round < rounds; ++round) {
        for (int t = 0; t < nsteps; ++t) {
            const RzStep st = rz_step(COLL, me, n, t);
            i64 lo, hi;
            rz_part(L.offs, st.seg, ch, nch, G, &lo, &hi);
            const i64 g0 = lo + round * slice < hi ? lo + round * slice : hi;
            const i64 len = hi - g0 < slice ? hi - g0 : slice;
            const bool send_direct = direct && st.send && (st.gather || st.final_);
            const bool recv_direct = direct && st.recv && st.gather;
            w.round = round;
            w.step = t;
            if (lead) {
                if (st.recv) bad = rz_wait(&mc->ready, recvd + 1, w, RZ_WAIT_DATA, left, false);
#ifndef RZ_BROKEN_NO_FREE_WAIT
                if (!bad && st.send && !send_direct)
                    bad = rz_wait(&mc->freed, sent + 1 > (u64)L.nslots ? sent + 1 - L.nslots : 0, w, RZ_WAIT_SLOT, right,
                                  false);
#endif
            }
            if (__syncthreads_or(bad)) return;

            const unsigned ph = (unsigned)((g0 * E) & 15);
            const T* in = st.recv && !recv_direct ? reinterpret_cast<const T*>(rz_slot(a.ws, L, ch, recvd, ph)) : nullptr;
            T* nxt = nullptr;
            if (st.send)
                nxt = send_direct ? reinterpret_cast<T*>(a.right_out + g0 * E)
                                  : reinterpret_cast<T*>(rz_slot(a.right, L, ch, sent, ph));
            T* mine = st.final_ || st.gather ? reinterpret_cast<T*>(a.out + (g0 - obase) * E) : nullptr;
            const T* x = !st.gather || t == 0 ? reinterpret_cast<const T*>(a.x + (g0 - xbase) * E) : nullptr;
            const void *sa = nullptr, *sb = nullptr;
            void *d0 = nullptr, *d1 = nullptr;
            if (len > 0) {
                if constexpr (COLL != RZ_AG) {
                    if (!st.gather) {  // reduce-scatter half: x alone, or op(x, incoming)
                        T* to = st.final_ ? mine : nxt;
                        T* also = st.final_ ? nxt : nullptr;
                        if (st.reduce) rz_move<T, Op, true>(len, x, in, to, also);
                        else rz_move<T, Op, false>(len, x, nullptr, to, nullptr);
                        sa = x, sb = in, d0 = to, d1 = also;
                    }
                }
                if (st.gather) {
                    const T* from = t == 0 ? x : recv_direct ? mine : in;
                    T* to = st.send ? nxt : mine;
                    T* also = st.send && !recv_direct && from != mine ? mine : nullptr;
                    if (from != to) rz_move<T, Op, false>(len, from, nullptr, to, also);
                    if (from != to) sa = from, d0 = to, d1 = also;  // (direct, last step: nothing moves)
                }
            }
            if (lead) RZ_TRACE_MOVE(me, ch, round, t, st.seg, g0, len * E, sa, sb, d0, d1);
#ifdef RZ_BROKEN_EARLY_POST  // (a deliberately broken protocol, for the host tests: published before the barrier)
            if (lead) {
                if (st.recv) rz_st_release(&lc->freed, recvd + 1);
                if (st.send) rz_st_release(&rc->ready, sent + 1);
            }
            __syncthreads();
#else
            __syncthreads();  // every thread's loads and stores of this step are done
            if (lead) {
                if (st.recv) rz_st_release(&lc->freed, recvd + 1);
                if (st.send) rz_st_release(&rc->ready, sent + 1);
            }
#endif
            recvd += st.recv;
            sent += st.send;
        }
    }
    if (lead) {
        mc->sent = sent;
        mc->recvd = recvd;
        mc->calls = calls + 1;
    }
}

#define RZ_RING(CNAME, COLL, OPNAME, OP, SUF, T)                                                     \
    extern "C" __global__ void __launch_bounds__(RZ_BLOCK, 1) rz_ring_##CNAME##_##OPNAME##_##SUF(const __grid_constant__ RzArgs A) { \
        ring_body<T, OP, COLL>(A);                                                                     \
    }
#define RZ_RING_OPS(SUF, T)                                                                          \
    RZ_RING(rs, RZ_RS, sum, OpSum, SUF, T) RZ_RING(rs, RZ_RS, prod, OpProd, SUF, T)                   \
    RZ_RING(rs, RZ_RS, max, OpMax, SUF, T) RZ_RING(rs, RZ_RS, min, OpMin, SUF, T)                     \
    RZ_RING(ar, RZ_AR, sum, OpSum, SUF, T) RZ_RING(ar, RZ_AR, prod, OpProd, SUF, T)                   \
    RZ_RING(ar, RZ_AR, max, OpMax, SUF, T) RZ_RING(ar, RZ_AR, min, OpMin, SUF, T)

RZ_RING_OPS(bf16, bf16_t)
RZ_RING_OPS(f32, float)
#ifndef RZ_FEW_DTYPES  // (the host tests' variant builds keep bf16 and f32 only, to build faster)
RZ_RING_OPS(f16, f16_t)
RZ_RING_OPS(f64, double)
RZ_RING_OPS(i32, int)
RZ_RING_OPS(i64, i64)
#endif

extern "C" __global__ void __launch_bounds__(RZ_BLOCK, 1) rz_ring_ag(const __grid_constant__ RzArgs A) {
    ring_body<unsigned char, OpSum, RZ_AG>(A);
}
