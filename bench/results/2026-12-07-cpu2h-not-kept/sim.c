// two processes, shared memory: staged in-place all-reduce variants, 2 ranks
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/uio.h>
typedef struct { volatile int64_t flag[16]; } Slot;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void waitv(volatile int64_t *f, int64_t v) { while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < v) ; }
static void setv(volatile int64_t *f, int64_t v) { __atomic_store_n(f, v, __ATOMIC_RELEASE); }
static void add(float *d, const float *a, const float *b, size_t n) { for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i]; }
int main(int argc, char **argv) {
    size_t nb = atol(argv[1]); int variant = atoi(argv[2]); int iters = 200;
    size_t n = nb / 4, half = n / 2;
    size_t sb = (nb + 4095) / 4096 * 4096;
    char *shm = mmap(NULL, 4096 * 2 + 2 * 2 * sb + 2 * sb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    Slot *slots = (Slot *)shm; // slot r at shm + r*4096
    memset(shm, 0, 8192);
    int r = fork() == 0 ? 1 : 0;
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(r, &cs); sched_setaffinity(0, sizeof cs, &cs);
    Slot *me = (Slot *)(shm + r * 4096), *peer = (Slot *)(shm + (1 - r) * 4096);
    float *stage[2][2]; // [rank][parity]
    for (int q = 0; q < 2; q++) for (int p = 0; p < 2; p++) stage[q][p] = (float *)(shm + 8192 + (q * 2 + p) * sb);
    float *heapx[2] = {(float *)(shm + 8192 + 4 * sb), (float *)(shm + 8192 + 5 * sb)};
    float *x = variant == 3 ? heapx[r] : aligned_alloc(4096, sb);
    for (size_t i = 0; i < n; i++) x[i] = 1;
    double t0 = 0;
    for (int it = 1; it <= iters + 20; it++) {
        if (it == 21) t0 = now();
        int p = it & 1; int64_t b = 8 * it;
        float *mine = stage[r][p], *theirs = stage[1 - r][p];
        // READY: peer finished previous call
        setv(&me->flag[0], b + 1); waitv(&peer->flag[0], b + 1);
        if (variant == 0) { // one-phase: copy all, flag, reduce all
            memcpy(mine, x, nb); setv(&me->flag[1], b + 2); waitv(&peer->flag[1], b + 2);
            add(x, x, theirs, n);
        } else if (variant == 1) { // pull, partial copy: copy peer's half, reduce own half into stage, copy to x; then peer's reduced half
            size_t o = r ? half : 0, po = r ? 0 : half, oc = r ? n - half : half, pc = r ? half : n - half;
            memcpy(mine + po, x + po, pc * 4); setv(&me->flag[1], b + 2); waitv(&peer->flag[1], b + 2);
            add(mine + o, x + o, theirs + o, oc); memcpy(x + o, mine + o, oc * 4);
            setv(&me->flag[1], b + 3); waitv(&peer->flag[1], b + 3);
            memcpy(x + po, theirs + po, pc * 4);
        } else if (variant == 2) { // pull variant: reduce own half into x, then copy x half into stage
            size_t o = r ? half : 0, po = r ? 0 : half, oc = r ? n - half : half, pc = r ? half : n - half;
            memcpy(mine + po, x + po, pc * 4); setv(&me->flag[1], b + 2); waitv(&peer->flag[1], b + 2);
            add(x + o, x + o, theirs + o, oc); memcpy(mine + o, x + o, oc * 4);
            setv(&me->flag[1], b + 3); waitv(&peer->flag[1], b + 3);
            memcpy(x + po, theirs + po, pc * 4);
        } else if (variant == 3) { // heap push: x in shm; reduce own half, write to both
            size_t o = r ? half : 0, oc = r ? n - half : half;
            float *px = heapx[1 - r];
            setv(&me->flag[1], b + 2); waitv(&peer->flag[1], b + 2);
            add(x + o, x + o, px + o, oc); memcpy(px + o, x + o, oc * 4);
            setv(&me->flag[1], b + 3); waitv(&peer->flag[1], b + 3);
        } else if (variant == 5) { // pull with partial copy, chunked
            size_t o = r ? half : 0, po = r ? 0 : half, oc = r ? n - half : half, pc = r ? half : n - half;
            size_t ch = 65536; int64_t e = b * 64; int k;
            // phase 1: the peer's half of x into our stage
            k = 0; for (size_t lo = 0; lo < pc; lo += ch, k++) { size_t c = lo + ch > pc ? pc - lo : ch;
                memcpy(mine + po + lo, x + po + lo, c * 4); setv(&me->flag[2], e + k + 1); }
            // phase 2: our half, chunk by chunk, once the peer staged it
            k = 0; for (size_t lo = 0; lo < oc; lo += ch, k++) { size_t c = lo + ch > oc ? oc - lo : ch;
                waitv(&peer->flag[2], e + k + 1);
                add(x + o + lo, x + o + lo, theirs + o + lo, c); memcpy(mine + o + lo, x + o + lo, c * 4);
                setv(&me->flag[3], e + k + 1); }
            // phase 3: the peer's reduced half
            k = 0; for (size_t lo = 0; lo < pc; lo += ch, k++) { size_t c = lo + ch > pc ? pc - lo : ch;
                waitv(&peer->flag[3], e + k + 1); memcpy(x + po + lo, theirs + po + lo, c * 4); }
        } else if (variant == 4) { // one-phase chunked by 256K
            size_t ch = 65536; int k = 0;
            for (size_t lo = 0; lo < n; lo += ch, k++) { size_t c = lo + ch > n ? n - lo : ch;
                memcpy(mine + lo, x + lo, c * 4); setv(&me->flag[2], b * 64 + k + 1); waitv(&peer->flag[2], b * 64 + k + 1);
                add(x + lo, x + lo, theirs + lo, c); }
        }
        setv(&me->flag[0], b + 4);
    }
    double t = (now() - t0) / iters;
    if (r == 0) { wait(NULL); printf("%zu variant %d: %.1f us\n", nb, variant, t * 1e6); }
    return 0;
}
