// two processes: the read-in-place all-reduce (process_vm_readv) with its gather phase from the kernel
// (variant 7: peer's out) or from a shared-memory copy the owner wrote while reducing (variant 6); in place, 2 ranks
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void waitv(volatile int64_t *f, int64_t v) { while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < v) ; }
static void setv(volatile int64_t *f, int64_t v) { __atomic_store_n(f, v, __ATOMIC_RELEASE); }
static void add(float *d, const float *a, const float *b, size_t n) { for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i]; }
static void rd(pid_t pid, void *dst, const void *src, size_t n) {
    struct iovec l = {dst, n}, r = {(void *)src, n};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)n) { perror("readv"); exit(1); }
}
int main(int argc, char **argv) {
    size_t nb = atol(argv[1]); int variant = atoi(argv[2]); int iters = 200;
    size_t chunk = argc > 3 ? atol(argv[3]) : 524288;
    size_t n = nb / 4, half = n / 2;
    size_t sb = (nb + 4095) / 4096 * 4096;
    char *shm = mmap(NULL, 8192 + 4 * sb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(shm, 0, 8192);
    pid_t parent = getpid();
    pid_t child = fork();
    int r = child == 0 ? 1 : 0;
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(r, &cs); sched_setaffinity(0, sizeof cs, &cs);
    volatile int64_t *me = (int64_t *)(shm + r * 4096), *peer = (int64_t *)(shm + (1 - r) * 4096);
    pid_t ppid = r ? parent : child;
    float *x = aligned_alloc(4096, sb + 4096);
    x = (float *)((char *)x + 64 * (r + 1)); // not page-aligned alike on both
    float *scratch = aligned_alloc(4096, chunk + 4096);
    me[8] = (int64_t)(uintptr_t)x;
    float *stage[2][2];
    for (int q = 0; q < 2; q++) for (int p = 0; p < 2; p++) stage[q][p] = (float *)(shm + 8192 + (q * 2 + p) * sb);
    for (size_t i = 0; i < n; i++) x[i] = 1;
    setv(&me[9], 1); waitv(&peer[9], 1);
    float *px = (float *)(uintptr_t)peer[8];
    double t0 = 0;
    size_t o = r ? half : 0, oc = r ? n - half : half, po = r ? 0 : half, pc = r ? half : n - half;
    size_t ce = chunk / 4;
    for (int it = 1; it <= iters + 20; it++) {
        if (it == 21) t0 = now();
        int p = it & 1; int64_t b = 8 * it;
        setv(&me[0], b + 1); waitv(&peer[0], b + 1);
        for (size_t lo = 0; lo < oc; lo += ce) {
            size_t c = lo + ce > oc ? oc - lo : ce;
            rd(ppid, scratch, px + o + lo, c * 4);
            add(x + o + lo, x + o + lo, scratch, c);
            if (variant == 6) memcpy(stage[r][p] + o + lo, x + o + lo, c * 4);
        }
        setv(&me[0], b + 3); waitv(&peer[0], b + 3);
        if (variant == 6) memcpy(x + po, stage[1 - r][p] + po, pc * 4);
        else rd(ppid, x + po, px + po, pc * 4);
        setv(&me[0], b + 4); waitv(&peer[0], b + 4);
    }
    double t = (now() - t0) / iters;
    if (r == 0) { wait(NULL); printf("%zu variant %d chunk %zu: %.1f us\n", nb, variant, chunk, t * 1e6); }
    return 0;
}
