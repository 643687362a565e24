/* int8 weights, one float32 scale per output row (minillm.quant.int8), times a few float32 rows.

   The kernel multiplies integers: each row of x is first rounded to int16 with its own scale,
   then pairs of int8 weights (widened to int16) and int16 activations are multiplied and added
   into int32 (vpmaddwd, or AVX-512 VNNI's vpdpwssd), 32 (AVX-512) or 16 (AVX2) at a time: half
   the instructions of widening every weight to float. The int32 sum times s_x * scale[n] is the
   row's result. x's largest value is rounded to at most 32767, and less for long rows, so that
   no sum of K products of an int8 weight and q can leave int32:
   q_max = min(32767, (2^31 - 1) / (128 K)).
   Its relative rounding error, 1 / (2 q_max), stays far below the int8 weights' own (1 / 254)
   up to INT8_MAX_K. */
#include <math.h>
#include <stdlib.h>

#include "minillm_kernels.h"
#include "simd.h"

static inline int32_t dot_int8_int16(const int8_t *w, const int16_t *x, int64_t K) {
    vi a0 = izero(), a1 = izero();
    int64_t k = 0;
    for (; k + 2 * IW <= K; k += 2 * IW) {
        a0 = dot16(a0, wide8(w + k), ld16(x + k));
        a1 = dot16(a1, wide8(w + k + IW), ld16(x + k + IW));
    }
    for (; k + IW <= K; k += IW)
        a0 = dot16(a0, wide8(w + k), ld16(x + k));
    int32_t total = isum(iadd(a0, a1));
    for (; k < K; k++)
        total += (int32_t)w[k] * (int32_t)x[k];
    return total;
}

/* A weight row is read from memory once; the other rows of x find it in cache. */
int gemm_int8(const int8_t *W, const float *scale, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    if (M < 1 || M > INT8_MAX_ROWS || K < 1 || K > INT8_MAX_K)
        return -1;
    int16_t *xq = (int16_t *)malloc((size_t)(M * K) * sizeof(int16_t));
    float sx[INT8_MAX_ROWS];
    if (!xq)
        return -1;
    int64_t most = INT32_MAX / (128 * K);
    float qmax = most < 32767 ? (float)most : 32767.0f;
    for (int64_t m = 0; m < M; m++) {
        const float *x = X + m * K;
        float big = 0.0f;
        for (int64_t k = 0; k < K; k++)
            big = fabsf(x[k]) > big ? fabsf(x[k]) : big;
        sx[m] = big > 0.0f ? big / qmax : 1.0f;
        float inv = 1.0f / sx[m];
        for (int64_t k = 0; k < K; k++)
            xq[m * K + k] = (int16_t)lrintf(x[k] * inv);
    }
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const int8_t *row = W + n * K;
        float b = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++)
            Y[m * N + n] = (float)dot_int8_int16(row, xq + m * K, K) * (sx[m] * scale[n]) + b;
    }
    free(xq);
    return 0;
}
