/* This core's fp32 multiply-add peak: 12 independent chains of 16-wide fused multiply-adds
 * (enough in flight to hide the FMA latency on current x86 cores), counted as 2 FLOPs each.
 * scripts/closed_ceiling.py takes the figure as --peak: the fastest any fp32 arithmetic can
 * go here, whatever the library.
 *
 *     cc -O2 -march=native -o /tmp/fma_peak scripts/fma_peak.c && taskset -c 0 /tmp/fma_peak
 */
#include <stdio.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));

#define STEP(a) a = a * b + c

int main(void) {
    v16 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, b, c;
    for (int j = 0; j < 16; j++) {
        a0[j] = 0.1f; a1[j] = 0.2f; a2[j] = 0.3f; a3[j] = 0.4f; a4[j] = 0.5f; a5[j] = 0.6f;
        a6[j] = 0.7f; a7[j] = 0.8f; a8[j] = 0.9f; a9[j] = 1.0f; a10[j] = 1.1f; a11[j] = 1.2f;
        b[j] = 0.999999f;  /* stays finite over the loop */
        c[j] = 1e-7f;
    }
    const long iterations = 100000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long n = 0; n < iterations; n++) {
        STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4); STEP(a5);
        STEP(a6); STEP(a7); STEP(a8); STEP(a9); STEP(a10); STEP(a11);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    v16 sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    float total = 0.0f;
    for (int j = 0; j < 16; j++) total += sum[j];
    /* Printing the sum keeps the compiler from dropping the loop. */
    printf("%.1f GFLOP/s fp32 FMA peak, one thread (checksum %g)\n",
           (double)iterations * 12 * 16 * 2 / seconds / 1e9, total);
    return 0;
}
