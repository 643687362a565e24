/* GGUF's Q4_1 blocks times a few float32 rows, the blocks read as the model file stores them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "minillm_kernels.h"
#include "simd.h"

/* GGUF's Q4_1: a row is K/32 blocks of 20 bytes: d and m (float16), then 16 bytes whose low
   nibbles are weights 0..15 and high nibbles weights 16..31; weight = q * d + m.
   Like llama.cpp, the kernel multiplies integers: each block of 32 values of x is rounded to
   int8 with its own scale (dx = max|x| / 127), so a block's sum of q * x is an integer dot
   product of 4-bit and 8-bit numbers (vpmaddubsw, or AVX-512 VNNI's vpdpbusd, 32 or 64 at a
   time) times d * dx; the m part needs only the block's sum of x, kept exact in float32.
   A block is Q4_1_BLOCK_BYTES (20) bytes. */
static inline float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* the 32 weights of a block as bytes 0..15, in x's order: low nibbles, then high */
static inline __m256i q4_1_nibbles(const uint8_t *blk) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    __m128i q = _mm_loadu_si128((const __m128i *)(blk + 4));
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
}

static float dot_q4_1(const uint8_t *row, const int8_t *xq, const float *dx, const float *sx,
                      int64_t blocks) {
    float mins = 0.0f;
    int64_t b = 0;
#ifdef __AVX512BW__
    __m512 acc = _mm512_setzero_ps();
    for (; b + 2 <= blocks; b += 2) {  /* two blocks a step: 64 weights in one register */
        const uint8_t *b0 = row + Q4_1_BLOCK_BYTES * b, *b1 = b0 + Q4_1_BLOCK_BYTES;
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(q4_1_nibbles(b0)),
                                       q4_1_nibbles(b1), 1);
        __m512i x = _mm512_loadu_si512((const void *)(xq + 32 * b));
#ifdef __AVX512VNNI__
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
#else
        __m512i dot = _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1));
#endif
        __m512 scale = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(half_at(b0) * dx[b]),
                                            _mm512_set1_ps(half_at(b1) * dx[b + 1]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
        mins += half_at(b0 + 2) * sx[b] + half_at(b1 + 2) * sx[b + 1];
    }
    float total = _mm512_reduce_add_ps(acc);
#else
    float total = 0.0f;
#endif
    __m256 acc8 = _mm256_setzero_ps();
    for (; b < blocks; b++) {  /* one block a step: 32 weights */
        const uint8_t *blk = row + Q4_1_BLOCK_BYTES * b;
        __m256i pairs = _mm256_maddubs_epi16(q4_1_nibbles(blk),
                                             _mm256_loadu_si256((const __m256i *)(xq + 32 * b)));
        __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
        acc8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_at(blk) * dx[b]),
                               acc8);
        mins += half_at(blk + 2) * sx[b];
    }
    return total + vsum8(acc8) + mins;
}


/* K a multiple of 32 (the wrapper checks it) */
int gemm_q4_1(const uint8_t *W, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    int64_t blocks = K / 32;
    int8_t *xq = (int8_t *)malloc((size_t)(M * K));
    float *dx = (float *)malloc((size_t)(M * blocks) * sizeof(float));
    float *sx = (float *)malloc((size_t)(M * blocks) * sizeof(float));
    if (!xq || !dx || !sx) {
        free(xq), free(dx), free(sx);
        return -1;
    }
    for (int64_t i = 0; i < M * blocks; i++) {
        const float *x = X + 32 * i;
        float big = 0.0f, sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            big = fabsf(x[j]) > big ? fabsf(x[j]) : big;
            sum += x[j];
        }
        dx[i] = big / 127.0f;
        sx[i] = sum;
        float inv = big > 0.0f ? 127.0f / big : 0.0f;
        for (int j = 0; j < 32; j++)
            xq[32 * i + j] = (int8_t)lrintf(x[j] * inv);
    }
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 17))
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = W + n * blocks * Q4_1_BLOCK_BYTES;
        float b = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++)
            Y[m * N + n] = dot_q4_1(row, xq + m * K, dx + m * blocks, sx + m * blocks, blocks) + b;
    }
    free(xq), free(dx), free(sx);
    return 0;
}
