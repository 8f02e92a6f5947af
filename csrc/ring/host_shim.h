// host_shim.h: enough CUDA for g++ to compile csrc/ring/*.cu as they are, with every GPU
// thread of every block of every rank an OS thread, so kernels that wait for one another run
// on the CPU (bench/ring_on_host.py builds and drives it; collectives/gpu_ring uses it in tests).
//
// Included before the kernel source (g++ -include). What it maps:
//   __global__, __device__, __forceinline__, __noinline__, __launch_bounds__ -> plain C++
//   threadIdx, blockIdx, blockDim, gridDim   -> thread_local, set when each thread starts
//   __syncthreads, __syncthreads_or          -> a barrier per block (mutex + condition variable)
//   rz_ld_acquire / rz_st_release / rz_ld_relaxed / rz_st_relaxed / rz_cas -> __atomic builtins, the same
//       orders (acquire, release, relaxed, acq_rel), so ThreadSanitizer sees what the GPU's
//       memory model promises and nothing more
//   rz_globaltimer (%globaltimer)            -> std::chrono::steady_clock, in nanoseconds
//   rz_pause                                 -> sched_yield (hundreds of threads share 2 cores)
//   __ldcg / __stcg                          -> plain loads and stores (races stay visible)
//   the f16 conversions                      -> _Float16 casts, nearest even (RZ_HOST_F16)
//   RZ_TRACE_MOVE                            -> a log of every block's moves (explain.py)
// Launch: rzhost_start(entry, grid, block, args, nbytes) starts grid x block threads that
// each call the entry with their own copy of the argument struct; rzhost_join waits for them.
#pragma once
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#define RZ_HOST_RING 1
#define RZ_HOST_F16 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__

struct rz_dim3 { unsigned x, y, z; };
static thread_local rz_dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };

static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float rz_host_f16_to_f32(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
static inline unsigned short rz_host_f32_to_f16(float f) {
    _Float16 h = (_Float16)f;
    unsigned short b;
    std::memcpy(&b, &h, 2);
    return b;
}

template <typename T> static inline T __ldcg(const T* p) { return *p; }
template <typename T> static inline void __stcg(T* p, T v) { *p = v; }

static inline unsigned long long rz_ld_acquire(const unsigned long long* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline unsigned long long rz_ld_relaxed(const unsigned long long* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void rz_st_release(unsigned long long* p, unsigned long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void rz_st_relaxed(unsigned long long* p, unsigned long long v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long rz_cas(unsigned long long* p, unsigned long long cmp, unsigned long long val) {
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return cmp;  // the old value, as atomicCAS returns
}
static inline unsigned long long rz_globaltimer() {
    return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline void rz_pause() { sched_yield(); }

// ---- __syncthreads: one barrier per block; the OR of every thread's predicate comes back.
struct RzBlock {
    std::mutex m;
    std::condition_variable cv;
    unsigned n = 0, count = 0, gen = 0;
    int acc = 0, result = 0;
};
static thread_local RzBlock* rz_block_;

static inline int __syncthreads_or(int pred) {
    RzBlock* b = rz_block_;
    std::unique_lock<std::mutex> lock(b->m);
    b->acc |= pred != 0;
    const unsigned gen = b->gen;
    if (++b->count == b->n) {
        b->result = b->acc;
        b->acc = 0;
        b->count = 0;
        ++b->gen;
        b->cv.notify_all();
        return b->result;
    }
    b->cv.wait(lock, [&] { return b->gen != gen; });
    return b->result;  // no later barrier can finish before this thread arrives at it
}
static inline void __syncthreads() { (void)__syncthreads_or(0); }

// ---- the move log (lead thread of each block, one entry per step)
struct RzTraceEvent { long long v[11]; };
static std::mutex rz_trace_mutex;
static std::vector<RzTraceEvent> rz_trace_log;
static int rz_trace_on = 0;  // set between launches only

static inline void rz_trace_move(long long rank, long long ch, long long round, long long step, long long seg,
                                 long long g0, long long nbytes, const void* a, const void* b, const void* d0,
                                 const void* d1) {
    if (!rz_trace_on) return;
    RzTraceEvent e{{rank, ch, round, step, seg, g0, nbytes, (long long)a, (long long)b, (long long)d0, (long long)d1}};
    std::lock_guard<std::mutex> g(rz_trace_mutex);
    rz_trace_log.push_back(e);
}
#define RZ_TRACE_MOVE(rank, ch, round, step, seg, g0, nbytes, a, b, d0, d1) \
    rz_trace_move(rank, ch, round, step, seg, g0, nbytes, a, b, d0, d1)

extern "C" void rzhost_trace(int on) {
    std::lock_guard<std::mutex> g(rz_trace_mutex);
    rz_trace_on = on;
    rz_trace_log.clear();
}
extern "C" long long rzhost_trace_count() { return (long long)rz_trace_log.size(); }
extern "C" void rzhost_trace_get(long long i, long long* out) { std::memcpy(out, rz_trace_log[i].v, sizeof(rz_trace_log[i].v)); }

// ---- launches
typedef void (*rz_entry_fn)(const void*);
template <typename A> static inline void rz_invoke(void (*k)(A), const void* p) {
    k(*static_cast<const typename std::remove_cv<typename std::remove_reference<A>::type>::type*>(p));
}
template <typename A> static inline long long rz_arg_size(void (*)(A)) {
    return (long long)sizeof(typename std::remove_reference<A>::type);
}

struct RzRun;
struct RzThread { RzRun* run; unsigned b, t; pthread_t id; };
struct RzRun {
    rz_entry_fn f;
    unsigned grid, block;
    std::vector<char> args;
    std::vector<RzBlock> blocks;
    std::vector<RzThread> threads;
};

static void* rz_thread_main(void* p) {
    RzThread* th = static_cast<RzThread*>(p);
    RzRun* run = th->run;
    threadIdx = {th->t, 0, 0};
    blockIdx = {th->b, 0, 0};
    blockDim = {run->block, 1, 1};
    gridDim = {run->grid, 1, 1};
    rz_block_ = &run->blocks[th->b];
    run->f(run->args.data());
    return nullptr;
}

extern "C" void* rzhost_start(rz_entry_fn f, unsigned grid, unsigned block, const void* args, long long nbytes) {
    RzRun* run = new RzRun{f, grid, block, std::vector<char>((const char*)args, (const char*)args + nbytes),
                           std::vector<RzBlock>(grid), std::vector<RzThread>((size_t)grid * block)};
    for (auto& b : run->blocks) b.n = block;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) {
            RzThread& th = run->threads[(size_t)b * block + t];
            th.run = run, th.b = b, th.t = t;
            if (pthread_create(&th.id, &attr, rz_thread_main, &th) != 0) __builtin_trap();
        }
    pthread_attr_destroy(&attr);
    return run;
}

extern "C" void rzhost_join(void* h) {
    RzRun* run = static_cast<RzRun*>(h);
    for (auto& th : run->threads) pthread_join(th.id, nullptr);
    delete run;
}
