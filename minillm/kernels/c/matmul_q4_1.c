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
   product of 4-bit and 8-bit numbers (vpmaddubsw, or AVX-512 VNNI's vpdpbusd) times d * dx;
   the m part needs only the block's sum of x (sx), kept exact in float32.

   x's rounded copy is laid out for the weights, in groups of 4 blocks (128 bytes): the first
   16 values of blocks 0..3, then their last 16, so that one byte permute (AVX-512 VBMI) of a
   group's 80 bytes of weights gives the 64 bytes of 4-bit pairs in x's order: low nibbles
   against the first half, high nibbles against the second. Beside it, per block, dx and sx,
   interleaved as the group's 4 (d, m) pairs are, so one float16 conversion and one multiply
   make all 4 blocks' d * dx and m * sx. A last group of fewer than 4 blocks is padded with
   zeros in x's copy (the weights past the row are never read). */
#define GROUP 4
#define GROUP_BYTES (GROUP * 32)

/* x's blocks rounded as above: xq (groups * GROUP_BYTES), xs (groups * 2 * GROUP) */
static void round_x(const float *x, int64_t blocks, int8_t *xq, float *xs) {
    int64_t padded = (blocks + GROUP - 1) / GROUP * GROUP;
    for (int64_t b = 0; b < padded; b++) {
        int8_t *first = xq + (b / GROUP) * GROUP_BYTES + 16 * (b % GROUP), *last = first + 64;
        if (b >= blocks) {
            memset(first, 0, 16), memset(last, 0, 16);
            xs[2 * b] = xs[2 * b + 1] = 0.0f;
            continue;
        }
        const float *v = x + 32 * b;
#ifdef __AVX512F__
        __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
        float big = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(v0, v1));
        float inv = big > 0.0f ? 127.0f / big : 0.0f;
        /* rounded to nearest even, as lrintf does */
        _mm_storeu_si128((__m128i *)first,
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)))));
        _mm_storeu_si128((__m128i *)last,
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)))));
#else
        float big = 0.0f, sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            big = fabsf(v[j]) > big ? fabsf(v[j]) : big;
            sum += v[j];
        }
        float inv = big > 0.0f ? 127.0f / big : 0.0f;
        for (int j = 0; j < 16; j++) {
            first[j] = (int8_t)lrintf(v[j] * inv);
            last[j] = (int8_t)lrintf(v[16 + j] * inv);
        }
#endif
        xs[2 * b] = big / 127.0f;
        xs[2 * b + 1] = sum;
    }
}

#if defined(__AVX512VBMI__) && defined(__AVX512VL__)
/* A group's bytes: its 4 blocks' 16 bytes of 4-bit pairs (from 80 bytes: 0..63, then 64..79),
   and its 4 (d, m) pairs (bytes 0..3, 20..23, 40..43, 60..63) */
static const uint8_t PAIRS_AT[64] = {
    4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
    24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39,
    44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79};
static const uint8_t SCALES_AT[64] = {0, 1, 2, 3, 20, 21, 22, 23, 40, 41, 42, 43, 60, 61, 62, 63};
/* the dot product's 16 int32 lanes hold blocks 0,0,0,0,1,1,1,1,...; their d * dx sit in lanes
   0, 2, 4, 6 of the products */
static const int32_t SPREAD[16] = {0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6};

/* R rows' sums over one group (80 bytes a row, at rows[r]) into acc[r] (d * dx parts) and
   mins[r] (m * sx parts, lanes 1, 3, 5, 7) */
static inline __attribute__((always_inline)) void q4_1_group(
    const uint8_t *const *rows, int R, int64_t offset, __mmask64 first, int whole,
    const int8_t *xq, const float *xs, __m512 *acc, __m512 *mins) {
    const __m512i pairs_at = _mm512_loadu_si512((const void *)PAIRS_AT);
    const __m512i scales_at = _mm512_loadu_si512((const void *)SCALES_AT);
    const __m512i spread = _mm512_loadu_si512((const void *)SPREAD);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i x_first = _mm512_loadu_si512((const void *)xq);
    __m512i x_last = _mm512_loadu_si512((const void *)(xq + 64));
    __m256 x_scales = _mm256_loadu_ps(xs);
    for (int r = 0; r < R; r++) {
        const uint8_t *g = rows[r] + offset;
        __m512i a, b;
        if (whole) {
            a = _mm512_loadu_si512((const void *)g);
            b = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(g + 64)));
        } else {  /* fewer than 4 blocks: at most 60 bytes, the rest never read */
            a = _mm512_maskz_loadu_epi8(first, g);
            b = _mm512_setzero_si512();
        }
        __m512i q = _mm512_permutex2var_epi8(a, pairs_at, b);
        __m512i lo = _mm512_and_si512(q, low4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
#ifdef __AVX512VNNI__
        __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x_first),
                                          hi, x_last);
#else
        const __m512i ones = _mm512_set1_epi16(1);
        __m512i dot = _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(lo, x_first), ones),
                                       _mm512_madd_epi16(_mm512_maddubs_epi16(hi, x_last), ones));
#endif
        __m256 dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi8(scales_at, a)));
        __m512 products = _mm512_castps256_ps512(_mm256_mul_ps(dm, x_scales));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(spread, products),
                                 acc[r]);
        mins[r] = _mm512_mask_add_ps(mins[r], 0xAA, mins[r], products);
    }
}

/* R consecutive rows (R <= 4) times one row of x: y[r] */
static inline __attribute__((always_inline)) void q4_1_rows(
    const uint8_t *row, int64_t row_bytes, int R, const int8_t *xq, const float *xs,
    int64_t blocks, float *y) {
    const uint8_t *rows[4];
    __m512 acc[4], mins[4];
    for (int r = 0; r < R; r++) {
        rows[r] = row + r * row_bytes;
        acc[r] = mins[r] = _mm512_setzero_ps();
    }
    int64_t whole = blocks / GROUP, g = 0;
    for (; g < whole; g++)
        q4_1_group(rows, R, g * GROUP * Q4_1_BLOCK_BYTES, 0, 1, xq + g * GROUP_BYTES,
                   xs + g * 2 * GROUP, acc, mins);
    if (blocks % GROUP) {
        __mmask64 first = _cvtu64_mask64((1ULL << (Q4_1_BLOCK_BYTES * (blocks % GROUP))) - 1);
        q4_1_group(rows, R, g * GROUP * Q4_1_BLOCK_BYTES, first, 0, xq + g * GROUP_BYTES,
                   xs + g * 2 * GROUP, acc, mins);
    }
    for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], mins[r]));
}
#else
static inline float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* One block a step: its 32 weights as bytes 0..15 (low nibbles, then high) against x's first
   and last 16 values. */
static float dot_q4_1(const uint8_t *row, const int8_t *xq, const float *xs, int64_t blocks) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = row + Q4_1_BLOCK_BYTES * b;
        const int8_t *first = xq + (b / GROUP) * GROUP_BYTES + 16 * (b % GROUP);
        __m128i q = _mm_loadu_si128((const __m128i *)(blk + 4));
        __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4),
                                     _mm_and_si128(q, low4));
        __m256i x = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(first + 64)),
                                     _mm_loadu_si128((const __m128i *)first));
        __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_at(blk) * xs[2 * b]),
                              acc);
        mins += half_at(blk + 2) * xs[2 * b + 1];
    }
    return vsum8(acc) + mins;
}
#endif

/* K a multiple of 32 (the wrapper checks it) */
int gemm_q4_1(const uint8_t *W, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    int64_t blocks = K / 32, groups = (blocks + GROUP - 1) / GROUP;
    int64_t row_bytes = blocks * Q4_1_BLOCK_BYTES;
    int8_t *xq = (int8_t *)malloc((size_t)(M * groups) * (GROUP_BYTES + 2 * GROUP * sizeof(float)));
    if (!xq)
        return -1;
    float *xs = (float *)(xq + M * groups * GROUP_BYTES);
    for (int64_t m = 0; m < M; m++)
        round_x(X + m * K, blocks, xq + m * groups * GROUP_BYTES, xs + m * groups * 2 * GROUP);
#if defined(__AVX512VBMI__) && defined(__AVX512VL__)
    int64_t quads = N / 4;  /* four rows a pass share x's loads */
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && N * K > (1 << 17))
    for (int64_t p = 0; p < quads + N % 4; p++) {
        int64_t n = p < quads ? 4 * p : 4 * quads + (p - quads);
        float y[4];
        for (int64_t m = 0; m < M; m++) {
            const int8_t *xqm = xq + m * groups * GROUP_BYTES;
            const float *xsm = xs + m * groups * 2 * GROUP;
            int R = p < quads ? 4 : 1;
            if (R == 4)
                q4_1_rows(W + n * row_bytes, row_bytes, 4, xqm, xsm, blocks, y);
            else
                q4_1_rows(W + n * row_bytes, row_bytes, 1, xqm, xsm, blocks, y);
            for (int r = 0; r < R; r++)
                Y[m * N + n + r] = y[r] + (bias ? bias[n + r] : 0.0f);
        }
    }
#else
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && N * K > (1 << 17))
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = W + n * row_bytes;
        float b = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++)
            Y[m * N + n] = dot_q4_1(row, xq + m * groups * GROUP_BYTES,
                                    xs + m * groups * 2 * GROUP, blocks) + b;
    }
#endif
    free(xq);
    return 0;
}
