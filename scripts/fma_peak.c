/* This core's multiply-add peak: 12 independent chains of 16-wide fused multiply-adds
 * (enough in flight to hide the FMA latency on current x86 cores), counted as 2 FLOPs each;
 * and, where the compiler targets AVX512_BF16, the same chains of bf16 dot products with fp32
 * accumulation (vdpbf16ps: 32 bf16 products summed pairwise into 16 fp32 lanes, 64 FLOPs).
 * scripts/closed_ceiling.py takes a figure as --peak: the fastest any arithmetic at that dtype
 * can go here, whatever the library.
 *
 *     cc -O2 -march=native -o /tmp/fma_peak scripts/fma_peak.c && taskset -c 0 /tmp/fma_peak
 */
#include <stdio.h>
#include <time.h>
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64)));

#define STEP(a) a = a * b + c
#define ITERATIONS 100000000L

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static void fp32_peak(void) {
    v16 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, b, c;
    for (int j = 0; j < 16; j++) {
        a0[j] = 0.1f; a1[j] = 0.2f; a2[j] = 0.3f; a3[j] = 0.4f; a4[j] = 0.5f; a5[j] = 0.6f;
        a6[j] = 0.7f; a7[j] = 0.8f; a8[j] = 0.9f; a9[j] = 1.0f; a10[j] = 1.1f; a11[j] = 1.2f;
        b[j] = 0.999999f;  /* stays finite over the loop */
        c[j] = 1e-7f;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long n = 0; n < ITERATIONS; n++) {
        STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4); STEP(a5);
        STEP(a6); STEP(a7); STEP(a8); STEP(a9); STEP(a10); STEP(a11);
    }
    double seconds = seconds_since(&t0);
    v16 sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    float total = 0.0f;
    for (int j = 0; j < 16; j++) total += sum[j];
    /* Printing the sum keeps the compiler from dropping the loop. */
    printf("%.1f GFLOP/s fp32 FMA peak, one thread (checksum %g)\n",
           (double)ITERATIONS * 12 * 16 * 2 / seconds / 1e9, total);
}

#ifdef __AVX512BF16__
#define DOT(a) a = _mm512_dpbf16_ps(a, x, y)

static void bf16_peak(void) {
    /* Small operands: each lane's fp32 sum grows by 2e-6 an iteration until that rounds away
     * (at 32), so it stays finite; the instructions run all the same. */
    __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    __m512bh y = x;
    __m512 a0 = _mm512_set1_ps(0.1f), a1 = _mm512_set1_ps(0.2f), a2 = _mm512_set1_ps(0.3f),
           a3 = _mm512_set1_ps(0.4f), a4 = _mm512_set1_ps(0.5f), a5 = _mm512_set1_ps(0.6f),
           a6 = _mm512_set1_ps(0.7f), a7 = _mm512_set1_ps(0.8f), a8 = _mm512_set1_ps(0.9f),
           a9 = _mm512_set1_ps(1.0f), a10 = _mm512_set1_ps(1.1f), a11 = _mm512_set1_ps(1.2f);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long n = 0; n < ITERATIONS; n++) {
        DOT(a0); DOT(a1); DOT(a2); DOT(a3); DOT(a4); DOT(a5);
        DOT(a6); DOT(a7); DOT(a8); DOT(a9); DOT(a10); DOT(a11);
    }
    double seconds = seconds_since(&t0);
    __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                               _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    printf("%.1f GFLOP/s bf16 dot-product peak (fp32 accumulation), one thread (checksum %g)\n",
           (double)ITERATIONS * 12 * 64 / seconds / 1e9, _mm512_reduce_add_ps(sum));
}
#endif

int main(void) {
    fp32_peak();
#ifdef __AVX512BF16__
    bf16_peak();
#else
    printf("bf16: not compiled for AVX512_BF16 (-march=native on a CPU without it)\n");
#endif
    return 0;
}
