// rz_ring.cuh: what the ring kernels (ring.cu, ring_small.cu) share: the workspace each rank
// keeps in device memory, the launch arguments, and the waits that have deadlines.
//
// The workspace of one rank, at the start of one device allocation (collectives/gpu_ring/
// layout.py computes the same sizes; tests/test_ring_host.py checks them against these structs
// through the host build):
//   RzHead            abort word (any rank sets it), claim word (this rank's first failing
//                     block takes it), probe counter (the two-process handshake)
//   RzChan[channel]   ready  (the left neighbour writes: messages it put in my slots)
//                     freed  (the right neighbour writes: my messages it has consumed)
//                     credit (the right neighbour writes: calls it has entered; direct mode)
//                     sent, recvd, calls: my own state, carried from call to call;
//                     waiting: whom my lead thread is stuck on (others read it, see rz_fail)
//   RzSmall[block]    arrive[p] (peer p writes: barriers it has reached), my own state
//   slots             at slots_off: [channel][slot] of slot_stride bytes, the receive FIFOs
//   stage             at stage_off: [2][stage_bytes] inputs, [2][stage_bytes] results (small kernels)
// Every counter lives with the rank that polls it, only grows, and is never reset between
// calls (layout.py's reset() zeroes them all once, after a failure, on every rank).
//
// Signalling: one thread per block waits (ld.acquire.sys), a __syncthreads hands what it saw
// to the block, the block moves data, a __syncthreads orders its stores, and one thread
// publishes (st.release.sys). Every wait has a deadline on %globaltimer and watches this
// rank's abort word and the host's; the first block to give up writes the error record
// (host-mapped) and sets the neighbours' abort words, so the ring leaves at once.
//
// The host build (csrc/ring/host_shim.h) defines RZ_HOST_RING and supplies the handful of
// primitives below with std::atomic orders; everything else is the same text.
#pragma once
#include "rz_common.cuh"

#define RZ_MAX_RANKS 8      // ranks of one ring; ranks of one launch
#define RZ_MAX_CHANNELS 32  // blocks per rank in one launch
#define RZ_DIRECT 1         // RzRank.flags: all-gather data goes straight into right_out

// what a block waited for (RzErr.kind) and why it gave up (RzErr.cause)
enum { RZ_WAIT_DATA = 1, RZ_WAIT_SLOT = 2, RZ_WAIT_CREDIT = 3, RZ_WAIT_ARRIVE = 4, RZ_WAIT_ENTRY = 5 };
enum { RZ_TIMEOUT = 1, RZ_ABORTED = 2, RZ_HOST_ABORT = 3 };

struct RzHead {
    u64 abort;  // 0, or rz_abort_word(): who gave up first and whom it waited for
    u64 pad0[15];
    u64 claim;  // 0 until one block of this rank has written the error record
    u64 pad1[15];
    u64 probe;        // handshake rounds the peer has reached (the peer writes)
    u64 probe_local;  // handshake rounds this rank has run
    u64 pad2[14];
};
struct RzChan {
    u64 ready;
    u64 pad0[15];
    u64 freed;
    u64 pad1[15];
    u64 credit;
    u64 pad2[15];
    u64 sent, recvd, calls;
    u64 waiting;  // peer + 1 while this channel's lead thread is stuck waiting for it (diagnostics)
    u64 pad3[12];
};
struct RzSmall {
    u64 arrive[RZ_MAX_RANKS];
    u64 pad0[8];
    u64 bars, calls;
    u64 waiting;  // peer + 1 while this block waits for it at the barrier (diagnostics)
    u64 pad1[13];
};
struct RzWs {
    RzHead head;
    RzChan chan[RZ_MAX_CHANNELS];
    RzSmall small[RZ_MAX_CHANNELS];
};

// The error record, in pinned host-mapped memory; ``valid`` is written last.
struct RzErr {
    u64 valid;
    int rank, channel, step, coll;
    i64 round;
    int kind, cause, peer, blamed;  // blamed: where the chain of waiting ranks ends (rz_fail)
    u64 wanted, seen, abort, waited_ns;
};

struct RzRank {          // one rank's part of a launch
    RzWs* ws;            // its workspace
    RzWs* left;          // the left neighbour's (mapped once: IPC, or a plain pointer)
    RzWs* right;
    const char* x;       // input
    char* out;           // output
    char* right_out;     // direct mode: the right neighbour's output, mapped
    RzErr* err;          // host-mapped error record
    const u64* host_abort;       // host-mapped: the host sets it to make every block leave
    RzWs* peer[RZ_MAX_RANKS];    // every rank's workspace (the one-/two-shot kernels)
    int rank, flags;
};
struct RzLaunch {
    i64 offs[RZ_MAX_RANKS + 1];  // segment s is elements [offs[s], offs[s+1]), the same on every rank
    i64 slot_bytes, slot_stride, slots_off;  // payload per slot (multiple of 16), its pitch, where slots start
    i64 stage_bytes, stage_off;
    u64 timeout_ns;              // deadline of every wait
    int nranks, nslots, nchannels, nlocal;  // nlocal ranks in this launch: block b is rank b / nchannels
};
struct RzArgs {                  // a launch's one parameter: the shared part, then nlocal ranks
    RzLaunch L;
    RzRank r[RZ_MAX_RANKS];
};

struct RzProbe {                 // rz_probe's parameter (ring_small.cu)
    RzWs* ws;
    RzWs* peer;
    u64* result;                 // host-mapped: done (1 in time, 2 late), rounds done, nanoseconds
    u64 deadline_ns;
    int rounds, pad;
};

#ifndef RZ_HOST_RING
__device__ __forceinline__ u64 rz_ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
    return v;
}
__device__ __forceinline__ u64 rz_ld_relaxed(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
    return v;
}
__device__ __forceinline__ void rz_st_release(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}
__device__ __forceinline__ void rz_st_relaxed(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}
__device__ __forceinline__ u64 rz_cas(u64* p, u64 cmp, u64 val) {
    return atomicCAS_system((unsigned long long*)p, cmp, val);
}
__device__ __forceinline__ u64 rz_globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void rz_pause() {}
#endif

#ifndef RZ_TRACE_MOVE  // the host build records every block's moves for collectives/gpu_ring/explain.py
#define RZ_TRACE_MOVE(rank, ch, round, step, seg, g0, nbytes, a, b, d0, d1) ((void)0)
#endif

// The abort word: who gave up first (origin), whom it blames (the end of the chain of waiting
// ranks from the one it waited for, see rz_blame) and what it waited for (kind).
__device__ __forceinline__ u64 rz_abort_word(int origin, int peer, int kind) {
    return (u64)(origin + 1) | ((u64)(peer + 1) << 16) | ((u64)kind << 32);
}

struct RzWhere {  // where a block is, for the error record
    const RzLaunch* L;
    const RzRank* a;
    int ch, step, coll;  // coll >= 4: a small kernel (its blocks' state is RzSmall)
    i64 round;
    __device__ __forceinline__ u64* waiting() const {
        return coll >= 4 ? &a->ws->small[ch].waiting : &a->ws->chan[ch].waiting;
    }
    // packed for rz_fail, so that nothing of it has to live in local memory
    __device__ __forceinline__ u64 pos() const {
        return (u64)(ch & 0xff) | ((u64)(step & 0xffff) << 8) | ((u64)(coll & 0xff) << 24) | ((u64)round << 32);
    }
};

// Who is to blame when rank ``me`` gave up on ``peer``: follow the ranks that are themselves
// stuck waiting (their ``waiting`` words) until one is not; a dead or absent rank never is.
__device__ __forceinline__ int rz_blame(const RzLaunch* L, const RzRank* a, int ch, bool small, int peer) {
    int cur = peer;
    for (int hop = 0; hop < L->nranks && cur >= 0 && a->peer[cur] != nullptr; ++hop) {
        RzWs* p = a->peer[cur];
        const u64 w = rz_ld_relaxed(small ? &p->small[ch].waiting : &p->chan[ch].waiting);
        if (w == 0 || (int)w - 1 == a->rank) break;  // not waiting, or waiting for us: the chain ends
        cur = (int)w - 1;
    }
    return cur;
}

// Record the failure (the first block of this rank only), then make every block of the ring
// leave: this rank's abort word, the neighbours', and with ``all`` every peer's.
__device__ __noinline__ bool rz_fail(const RzLaunch* L, const RzRank* a, u64 pos, int kind, int cause, int peer,
                                     u64 want, u64 seen, u64 word, u64 waited, bool all) {
    const int ch = (int)(pos & 0xff), coll = (int)((pos >> 24) & 0xff);
    int blamed = -1;
    if (cause == RZ_TIMEOUT) {
        blamed = rz_blame(L, a, ch, coll >= 4, peer);
        word = rz_abort_word(a->rank, blamed, kind);
    } else if (word) {
        blamed = (int)((word >> 16) & 0xffff) - 1;
    }
    if (rz_cas(&a->ws->head.claim, 0, 1) == 0) {
        RzErr* e = a->err;
        e->rank = a->rank;
        e->channel = ch;
        e->step = (int)((pos >> 8) & 0xffff);
        e->coll = coll;
        e->round = (i64)(pos >> 32);
        e->kind = kind;
        e->cause = cause;
        e->peer = peer;
        e->blamed = blamed;
        e->wanted = want;
        e->seen = seen;
        e->abort = word;
        e->waited_ns = waited;
        rz_st_release(&e->valid, 1);
    }
    rz_cas(&a->ws->head.abort, 0, word);
    rz_cas(&a->left->head.abort, 0, word);
    rz_cas(&a->right->head.abort, 0, word);
    if (all)
        for (int p = 0; p < L->nranks; ++p) rz_cas(&a->peer[p]->head.abort, 0, word);
    return true;
}

// Wait until *word >= want; true (after rz_fail) when the deadline passed or an abort came.
__device__ __forceinline__ bool rz_wait(const u64* word, u64 want, const RzWhere& w, int kind, int peer, bool all) {
    u64 seen = rz_ld_acquire(word);
    if (seen >= want) return false;
    const u64 t0 = rz_globaltimer();
    rz_st_relaxed(w.waiting(), (u64)(peer + 1));  // (the slow path only: for rz_blame)
    for (;;) {
        const u64 ab = rz_ld_relaxed(&w.a->ws->head.abort), host = rz_ld_relaxed(w.a->host_abort);
        const u64 waited = rz_globaltimer() - t0;
        if (ab | host) return rz_fail(w.L, w.a, w.pos(), kind, host ? RZ_HOST_ABORT : RZ_ABORTED, peer, want, seen, ab | host, waited,
                           all);
        if (waited > w.L->timeout_ns) return rz_fail(w.L, w.a, w.pos(), kind, RZ_TIMEOUT, peer, want, seen, 0, waited, all);
        rz_pause();
        seen = rz_ld_acquire(word);
        if (seen >= want) {
            rz_st_relaxed(w.waiting(), 0);
            return false;
        }
    }
}

// A block that finds an abort already set at entry leaves at once (the host resets first).
__device__ __forceinline__ bool rz_entry_aborted(const RzWhere& w, bool all) {
    const u64 ab = rz_ld_relaxed(&w.a->ws->head.abort), host = rz_ld_relaxed(w.a->host_abort);
    if (!(ab | host)) return false;
    return rz_fail(w.L, w.a, w.pos(), RZ_WAIT_ENTRY, host ? RZ_HOST_ABORT : RZ_ABORTED, -1, 0, 0, ab | host, 0, all);
}

// Part ``c`` of ``nch`` of segment s: whole granules (16 bytes) each, the last takes the rest.
__device__ __forceinline__ void rz_part(const i64* offs, int s, int c, int nch, i64 gran, i64* lo, i64* hi) {
    const i64 a = offs[s], units = (offs[s + 1] - a) / gran;
    *lo = a + units * c / nch * gran;
    *hi = c == nch - 1 ? offs[s + 1] : a + units * (c + 1) / nch * gran;
}
