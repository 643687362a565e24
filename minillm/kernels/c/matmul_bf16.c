/* bfloat16 weights in the (out, in) layout times one float32 row (gemv_bf16) or several
   (gemm_bf16). A bf16 is the top half of a float32: shifted left by 16 it is one, so each weight
   is widened in registers and the bytes read are half of float32's. On CPUs without bf16
   arithmetic PyTorch multiplies bf16 matrices in a slow generic loop. */
#include <stdlib.h>
#include <string.h>

#include "gemm_tile.h"
#include "minillm_kernels.h"
#include "simd.h"

void gemv_bf16(const uint16_t *W, const float *x, float *y, int64_t N, int64_t K, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = W + n * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i w0 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k))), 16);
            __m256i w1 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k + 8))), 16);
            a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(w0), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(w1), _mm256_loadu_ps(x + k + 8), a1);
        }
        float total = vsum8(_mm256_add_ps(a0, a1));
        for (; k < K; k++) {
            uint32_t bits = (uint32_t)row[k] << 16;
            float w;
            memcpy(&w, &bits, 4);
            total += w * x[k];
        }
        y[n] = total;
    }
}

/* Y = X W^T (+ bias) for many rows: X (M, K) float32, W bfloat16 (N, K) (the (out, in)
   layout), Y (M, N). gemm_f32's tiles (gemm_tile.h) on a float32 copy of one strip of
   GEMM_COLS rows of W at a time, widened and laid out (in, out) in a panel of K * GEMM_COLS
   floats that stays in the L2 cache while every row of X goes by it: the widening is paid once
   per weight and call, the multiply is float32's. x stays float32, so the sums are those of
   widening W and multiplying in float32, in k's order. */
static inline float bf16_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float w;
    memcpy(&w, &bits, 4);
    return w;
}

/* panel[k][j] = W[j][k] widened, for the strip's `width` rows of W; a few k at a time, so
   that the panel's lines being written stay in the L1 cache */
#define WIDEN_SPAN 16
static void widen_strip(const uint16_t *W, int64_t K, int64_t width, float *panel) {
    for (int64_t k0 = 0; k0 < K; k0 += WIDEN_SPAN) {
        int64_t k1 = k0 + WIDEN_SPAN < K ? k0 + WIDEN_SPAN : K;
        for (int64_t j = 0; j < width; j++) {
            const uint16_t *row = W + j * K;
            for (int64_t k = k0; k < k1; k++)
                panel[k * GEMM_COLS + j] = bf16_float(row[k]);
        }
    }
}

int gemm_bf16(const uint16_t *W, const float *bias, const float *X, float *Y, int64_t M,
              int64_t N, int64_t K, int threads) {
    int64_t tiles = (N + GEMM_COLS - 1) / GEMM_COLS;
    int64_t parts = threads > 1 && tiles > 1 ? threads : 1, per = (tiles + parts - 1) / parts;
    int failed = 0;
    #pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        float *panel = (float *)malloc((size_t)(K * GEMM_COLS) * sizeof(float));
        if (!panel) {
            #pragma omp atomic write
            failed = 1;
            continue;
        }
        int64_t t1 = (p + 1) * per < tiles ? (p + 1) * per : tiles;
        for (int64_t t = p * per; t < t1; t++) {
            int64_t n = t * GEMM_COLS, width = N - n < GEMM_COLS ? N - n : GEMM_COLS;
            widen_strip(W + n * K, K, width, panel);
            gemm_strip(panel, GEMM_COLS, X, K, bias ? bias + n : NULL, Y + n, N, M, width, 0, K);
        }
        free(panel);
    }
    return failed ? -1 : 0;
}
