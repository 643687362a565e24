/* int8 weights, one float32 scale per output row (minillm.quant.int8), times float32 rows.

   The kernel multiplies integers: each row of x is first rounded to int16 with its own scale,
   then pairs of int8 weights (widened to int16) and int16 activations are multiplied and added
   into int32 (vpmaddwd, or AVX-512 VNNI's vpdpwssd), 32 (AVX-512) or 16 (AVX2) at a time: half
   the instructions of widening every weight to float. The int32 sum times s_x * scale[n] is the
   row's result. x's largest value is rounded to at most 32767, and less for long rows, so that
   no sum of K products of an int8 weight and q can leave int32:
   q_max = min(32767, (2^31 - 1) / (128 K)).
   Its relative rounding error, 1 / (2 q_max), stays far below the int8 weights' own (1 / 254)
   up to INT8_MAX_K.

   The work is cut into tiles of up to 4 rows of x by 4 weight rows, whose 16 sums stay in
   registers: each weight vector widened serves the tile's rows of x, each vector of x its 4
   weight rows. A decode step (1 to 3 rows) is one tile per 4 weight rows, streaming the weights
   with a prefetch; a prompt keeps 4 weight rows in L1 while a block of x's rows (sized for L2)
   passes by. The sums are integers, so a row's result is the same whatever tile computed it, and
   the same float32 step (an FMA, as the compiler fused the one-row code's) turns every sum into
   its output. */
#include <math.h>
#include <stdlib.h>

#include "minillm_kernels.h"
#include "simd.h"

/* x's rounded rows a block holds while 4 weight rows at a time pass over them: at most this
   many bytes, so that the block stays in L2 */
#define X_BLOCK_BYTES (512 * 1024)

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

/* R rows of x (K apart, R <= 4) times four consecutive weight rows (K apart): sums[r] holds
   row r's four sums. `fetch`: prefetch the next four weight rows (a decode step reads the
   weights from memory once). */
static inline __attribute__((always_inline)) void tile(const int8_t *w, const int16_t *x,
                                                       int64_t K, int R, int fetch,
                                                       __m128i sums[4]) {
    const int8_t *w1 = w + K, *w2 = w1 + K, *w3 = w2 + K;
    vi acc[4][4];
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = izero();
    int64_t k = 0;
    for (; k + IW <= K; k += IW) {
        if (fetch) {
            _mm_prefetch((const char *)(w3 + K + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(w3 + 2 * K + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(w3 + 3 * K + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(w3 + 4 * K + k), _MM_HINT_T0);
        }
        vi v0 = wide8(w + k), v1 = wide8(w1 + k), v2 = wide8(w2 + k), v3 = wide8(w3 + k);
        for (int r = 0; r < R; r++) {
            vi xv = ld16(x + r * K + k);
            acc[r][0] = dot16(acc[r][0], v0, xv);
            acc[r][1] = dot16(acc[r][1], v1, xv);
            acc[r][2] = dot16(acc[r][2], v2, xv);
            acc[r][3] = dot16(acc[r][3], v3, xv);
        }
    }
    for (int r = 0; r < R; r++) {
        sums[r] = isum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        if (k < K) {
            int32_t rest[4] = {0, 0, 0, 0};
            const int16_t *xr = x + r * K;
            for (int64_t j = k; j < K; j++) {
                rest[0] += (int32_t)w[j] * xr[j];
                rest[1] += (int32_t)w1[j] * xr[j];
                rest[2] += (int32_t)w2[j] * xr[j];
                rest[3] += (int32_t)w3[j] * xr[j];
            }
            sums[r] = _mm_add_epi32(sums[r], _mm_loadu_si128((const __m128i *)rest));
        }
    }
}

/* the outputs of four weight rows from n for row m: sum * (s_x * scale) + bias, fused */
static inline void put4(float *y, __m128i sums, float sx, const float *scale, const float *bias) {
    __m128 s = _mm_mul_ps(_mm_set1_ps(sx), _mm_loadu_ps(scale));
    __m128 b = bias ? _mm_loadu_ps(bias) : _mm_setzero_ps();
    _mm_storeu_ps(y, _mm_fmadd_ps(_mm_cvtepi32_ps(sums), s, b));
}

static inline float put1(int32_t sum, float sx, float scale, const float *bias) {
    return fmaf((float)sum, sx * scale, bias ? *bias : 0.0f);
}

/* rows m0 .. m0 + M of x (rounded: xq, sx) times weight rows n .. n + 4 */
static inline __attribute__((always_inline)) void quad(const int8_t *W, const float *scale,
                                                       const float *bias, const int16_t *xq,
                                                       const float *sx, float *Y, int64_t m0,
                                                       int64_t M, int64_t n, int64_t N,
                                                       int64_t K, int fetch) {
    __m128i sums[4];
    const int8_t *w = W + n * K;
    const float *b = bias ? bias + n : NULL;
    int64_t m = m0;
    for (; m + 4 <= m0 + M; m += 4) {
        tile(w, xq + m * K, K, 4, fetch, sums);
        for (int r = 0; r < 4; r++)
            put4(Y + (m + r) * N + n, sums[r], sx[m + r], scale + n, b);
    }
    int R = (int)(m0 + M - m);
    if (R == 3)
        tile(w, xq + m * K, K, 3, fetch, sums);
    else if (R == 2)
        tile(w, xq + m * K, K, 2, fetch, sums);
    else if (R == 1)
        tile(w, xq + m * K, K, 1, fetch, sums);
    for (int r = 0; r < R; r++)
        put4(Y + (m + r) * N + n, sums[r], sx[m + r], scale + n, b);
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
    int64_t quads = N / 4, block = X_BLOCK_BYTES / (2 * K) / 4 * 4;
    block = block < 4 ? 4 : block;
    int fetch = M < 4;  /* a decode step's few rows: the weights come from memory */
    for (int64_t m0 = 0; m0 < M; m0 += block) {
        int64_t rows = M - m0 < block ? M - m0 : block;
        #pragma omp parallel for schedule(static) num_threads(threads) \
            if (threads > 1 && rows * N * K > (1 << 16))
        for (int64_t p = 0; p < quads + N % 4; p++) {
            if (p < quads) {
                if (fetch)
                    quad(W, scale, bias, xq, sx, Y, m0, rows, 4 * p, N, K, 1);
                else
                    quad(W, scale, bias, xq, sx, Y, m0, rows, 4 * p, N, K, 0);
                continue;
            }
            int64_t n = 4 * quads + (p - quads);
            for (int64_t m = m0; m < m0 + rows; m++)
                Y[m * N + n] = put1(dot_int8_int16(W + n * K, xq + m * K, K), sx[m], scale[n],
                                    bias ? bias + n : NULL);
        }
    }
    free(xq);
    return 0;
}
