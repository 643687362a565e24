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

/* Four consecutive weight rows (row_bytes apart) times x at once: each of x's vectors is
   loaded once for the four. */
static inline void dot4_int8_int16(const int8_t *w, int64_t row_bytes, const int16_t *x,
                                   int64_t K, int32_t *out) {
    const int8_t *w1 = w + row_bytes, *w2 = w1 + row_bytes, *w3 = w2 + row_bytes;
    vi a0 = izero(), a1 = izero(), a2 = izero(), a3 = izero();
    int64_t k = 0;
    for (; k + IW <= K; k += IW) {
        vi xv = ld16(x + k);
        _mm_prefetch((const char *)(w3 + row_bytes + k), _MM_HINT_T0);  /* the next four rows */
        _mm_prefetch((const char *)(w3 + 2 * row_bytes + k), _MM_HINT_T0);
        _mm_prefetch((const char *)(w3 + 3 * row_bytes + k), _MM_HINT_T0);
        _mm_prefetch((const char *)(w3 + 4 * row_bytes + k), _MM_HINT_T0);
        a0 = dot16(a0, wide8(w + k), xv);
        a1 = dot16(a1, wide8(w1 + k), xv);
        a2 = dot16(a2, wide8(w2 + k), xv);
        a3 = dot16(a3, wide8(w3 + k), xv);
    }
    out[0] = isum(a0), out[1] = isum(a1), out[2] = isum(a2), out[3] = isum(a3);
    for (; k < K; k++) {
        out[0] += (int32_t)w[k] * (int32_t)x[k];
        out[1] += (int32_t)w1[k] * (int32_t)x[k];
        out[2] += (int32_t)w2[k] * (int32_t)x[k];
        out[3] += (int32_t)w3[k] * (int32_t)x[k];
    }
}

/* x's largest |value| */
static float largest(const float *x, int64_t K) {
    int64_t k = 0;
    float big = 0.0f;
#ifdef __AVX512F__
    __m512 most = _mm512_setzero_ps();
    for (; k + 16 <= K; k += 16)
        most = _mm512_max_ps(most, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
    big = _mm512_reduce_max_ps(most);
#endif
    for (; k < K; k++)
        big = fabsf(x[k]) > big ? fabsf(x[k]) : big;
    return big;
}

/* q = x * inv rounded to the nearest integer (even on a tie, as lrintf) */
static void round_to_int16(const float *x, float inv, int16_t *q, int64_t K) {
    int64_t k = 0;
#ifdef __AVX512F__
    __m512 scale = _mm512_set1_ps(inv);
    for (; k + 16 <= K; k += 16)
        _mm256_storeu_si256((__m256i *)(q + k), _mm512_cvtsepi32_epi16(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), scale))));
#endif
    for (; k < K; k++)
        q[k] = (int16_t)lrintf(x[k] * inv);
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
        float big = largest(X + m * K, K);
        sx[m] = big > 0.0f ? big / qmax : 1.0f;
        round_to_int16(X + m * K, 1.0f / sx[m], xq + m * K, K);
    }
    int64_t quads = N / 4;  /* four rows a pass share x's loads */
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && N * K > (1 << 16))
    for (int64_t p = 0; p < quads + N % 4; p++) {
        int64_t n = p < quads ? 4 * p : 4 * quads + (p - quads);
        int R = p < quads ? 4 : 1;
        int32_t dots[4];
        for (int64_t m = 0; m < M; m++) {
            if (R == 4)
                dot4_int8_int16(W + n * K, K, xq + m * K, K, dots);
            else
                dots[0] = dot_int8_int16(W + n * K, xq + m * K, K);
            for (int r = 0; r < R; r++)
                Y[m * N + n + r] = (float)dots[r] * (sx[m] * scale[n + r])
                                   + (bias ? bias[n + r] : 0.0f);
        }
    }
    free(xq);
    return 0;
}
