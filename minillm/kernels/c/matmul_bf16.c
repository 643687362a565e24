/* bfloat16 weights in the (out, in) layout times one float32 row (gemv_bf16) or several
   (gemm_bf16). A bf16 is the top half of a float32: shifted left by 16 it is one, so each weight
   is widened in registers and the bytes read are half of float32's. On CPUs without bf16
   arithmetic PyTorch multiplies bf16 matrices in a slow generic loop. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gemm_tile.h"
#include "minillm_kernels.h"
#include "simd.h"

void gemv_bf16(const uint16_t *W, const float *x, float *y, int64_t N, int64_t K, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = W + n * K;
        __m256 a0 = vzero8(), a1 = vzero8();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i w0 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k))), 16);
            __m256i w1 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k + 8))), 16);
            a0 = vfma8(_mm256_castsi256_ps(w0), vload8(x + k), a0);
            a1 = vfma8(_mm256_castsi256_ps(w1), vload8(x + k + 8), a1);
        }
        float total = vsum8(vadd8(a0, a1));
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
   per weight and call, the multiply is float32's: the sums of widening W and multiplying by
   the X given in float32, in k's order (without AMX's bf16 tiles X is x itself; with them, the
   weight rows past the tiles' last 32 get x rounded to bf16, as the tiles do). */
static inline float bf16_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float w;
    memcpy(&w, &bits, 4);
    return w;
}

/* panel[k][j] = W[j][k] widened, for the strip's `width` rows of W; a few k at a time, so
   that the panel's lines being written stay in the L1 cache */
#define WIDEN_SPAN 16
static void widen_strip(const void *W, int64_t n, int64_t N, int64_t K, int64_t width,
                        float *panel) {
    (void)N;
    const uint16_t *strip = (const uint16_t *)W + n * K;
    for (int64_t k0 = 0; k0 < K; k0 += WIDEN_SPAN) {
        int64_t k1 = k0 + WIDEN_SPAN < K ? k0 + WIDEN_SPAN : K;
        for (int64_t j = 0; j < width; j++) {
            const uint16_t *row = strip + j * K;
            for (int64_t k = k0; k < k1; k++)
                panel[k * GEMM_COLS + j] = bf16_float(row[k]);
        }
    }
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
/* Several rows on AMX's bf16 tiles (Sapphire Rapids and later), which multiply pairs of bf16
   values and add them into float32 sums (TDPBF16PS). As transformers' bf16 and llama.cpp's bf16
   multiplies do, x is rounded to bf16 (to nearest, ties to even, as PyTorch's .to(bfloat16)
   rounds) for the products: a bf16 times a bf16 is exact in float32, so each output is the sum,
   in float32, of the weights times x rounded (bf16 subnormals, below 2^-126, count as zero on
   the tiles). One row (gemv_bf16: batch-1 decode) keeps x in float32, and so do the panels
   below on a CPU without the tiles: there the weights' bytes, not the arithmetic, set the
   time.
   x's bf16 rows (16 rows by 32 values a tile) are the first operand; the weights the second,
   copied a slice at a time into AMX's layout (2 consecutive values of a weight row per 32-bit
   word, 16 weight rows a 64-byte row). Used where Linux lets the process use the tiles, K is a
   multiple of 32, and there are at least BF16_AMX_FROM_ROWS rows: from two, since a tile of 16
   rows costs what two rows do. */
#include "amx.h"

#define BF16_AMX_FROM_ROWS 2

int gemm_bf16_amx(void) {
    return amx_granted();
}

/* x's rows as bf16, M x K, rounded to nearest even (a NaN stays a NaN); rows M .. Mpad zero.
   The rows split between `threads`; K is a multiple of 32. */
static void round_x(const float *X, int64_t M, int64_t Mpad, int64_t K, uint16_t *out,
                    int threads) {
    const __m512i half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    const __m512i quiet_nan = _mm512_set1_epi32(0x7FC0);
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = m * K; k < (m + 1) * K; k += 16) {
            vf x = vload(X + k);
            __m512i bits = _mm512_castps_si512(x);
            __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
            __m512i top = _mm512_srli_epi32(
                _mm512_add_epi32(bits, _mm512_add_epi32(half, odd)), 16);
            top = _mm512_mask_mov_epi32(top, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), quiet_nan);
            _mm256_storeu_si256((__m256i *)(out + k), _mm512_cvtepi32_epi16(top));
        }
    memset(out + M * K, 0, (size_t)((Mpad - M) * K) * sizeof(uint16_t));
}

/* what amx_run's pack and tile read: the weights, x's bf16 rows, the output */
struct bf16_operands {
    const uint16_t *W, *x;
    const float *bias;
    float *Y;
    int64_t N, K;
};

/* 16 vectors of 16 words, rows to columns: r[c] becomes what column c was */
static inline void transpose_16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {  /* per 128-bit lane: (a0 b0 a1 b1), (a2 b2 a3 b3) */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    __m512i u[16];  /* u[4 q + j]'s lane L: rows 4 q .. 4 q + 4 of column 4 L + j */
    for (int q = 0; q < 4; q++) {
        __m512i *a = t + 4 * q;
        u[4 * q] = _mm512_unpacklo_epi64(a[0], a[2]);
        u[4 * q + 1] = _mm512_unpackhi_epi64(a[0], a[2]);
        u[4 * q + 2] = _mm512_unpacklo_epi64(a[1], a[3]);
        u[4 * q + 3] = _mm512_unpackhi_epi64(a[1], a[3]);
    }
    for (int j = 0; j < 4; j++) {  /* the 128-bit lanes, 4 by 4 */
        __m512i w0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
        __m512i w1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i w2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        __m512i w3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_i32x4(w0, w2, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(w0, w2, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(w1, w3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(w1, w3, 0xDD);
    }
}

/* weight rows 16 half .. + 16 (K apart) in AMX's B layout, K / 32 tiles of 1 KB: tile c's row
   g holds the 16 rows' values 32 c + 2 g, + 1, one 32-bit word each (the 16 rows' words
   transposed, 16 pairs at a time; K / 2 is a multiple of 16) */
static void pack_w_bf16(const void *operands, int64_t half, char *out) {
    const struct bf16_operands *o = operands;
    const uint32_t *words = (const uint32_t *)(o->W + 16 * half * o->K);
    uint32_t *packed = (uint32_t *)out;
    int64_t pairs = o->K / 2;
    for (int64_t g = 0; g < pairs; g += 16) {
        __m512i r[16];
        for (int n = 0; n < 16; n++)
            r[n] = _mm512_loadu_si512(words + n * pairs + g);
        transpose_16x16(r);
        for (int c = 0; c < 16; c++)
            _mm512_storeu_si512(packed + 16 * (g + c), r[c]);
    }
}

/* x's rows m .. m + rows (bf16, K apart; up to 32: two tiles of x against the two of weights,
   four sums, so that each tile loaded serves two products) times packed weight rows
   32 g .. + 32, into Y: each sum tile starts at the bias and is stored straight into Y, or
   where x's last tile is part of one (rows past M), through `part` */
static void amx_bf16_tile(const void *operands, int64_t m, int64_t rows, int64_t g,
                          const char *packed) {
    const struct bf16_operands *o = operands;
    const int64_t K = o->K, N = o->N;
    const uint16_t *x = o->x + m * K;
    const uint16_t *wp = (const uint16_t *)packed;
    float *y = o->Y + m * N + 32 * g;
    float bias_rows[2][16][16], part[16][16];
    if (o->bias) {
        for (int side = 0; side < 2; side++)
            for (int r = 0; r < 16; r++)
                vstore(bias_rows[side][r], vload(o->bias + 32 * g + 16 * side));
        _tile_loadd(4, bias_rows[0], 64);
        _tile_loadd(5, bias_rows[1], 64);
        _tile_loadd(6, bias_rows[0], 64);
        _tile_loadd(7, bias_rows[1], 64);
    } else {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
    }
    if (rows <= 16) {
        for (int64_t k = 0; k < K; k += 32) {
            _tile_loadd(0, x + k, 2 * K);
            _tile_loadd(2, wp + 16 * k, 64);
            _tile_loadd(3, wp + 16 * K + 16 * k, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
        }
    } else {
        for (int64_t k = 0; k < K; k += 32) {
            _tile_loadd(0, x + k, 2 * K);
            _tile_loadd(1, x + 16 * K + k, 2 * K);
            _tile_loadd(2, wp + 16 * k, 64);
            _tile_loadd(3, wp + 16 * K + 16 * k, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
        }
    }
    int64_t first = rows < 16 ? rows : 16, second = rows - first;
    if (first == 16) {
        _tile_stored(4, y, 4 * N);
        _tile_stored(5, y + 16, 4 * N);
    } else {
        _tile_stored(4, part, 64);
        for (int64_t r = 0; r < first; r++)
            vstore(y + r * N, vload(part[r]));
        _tile_stored(5, part, 64);
        for (int64_t r = 0; r < first; r++)
            vstore(y + r * N + 16, vload(part[r]));
    }
    if (second == 16) {
        _tile_stored(6, y + 16 * N, 4 * N);
        _tile_stored(7, y + 16 * N + 16, 4 * N);
    } else if (second > 0) {
        _tile_stored(6, part, 64);
        for (int64_t r = 0; r < second; r++)
            vstore(y + (16 + r) * N, vload(part[r]));
        _tile_stored(7, part, 64);
        for (int64_t r = 0; r < second; r++)
            vstore(y + (16 + r) * N + 16, vload(part[r]));
    }
}

/* rows 0 .. M of X times weight rows 0 .. N - N % 32 on the tiles, and the weight rows past
   them (fewer than 32) on float32 strips with the same x rounded to bf16; -1 if it cannot
   allocate (nothing written) */
static int amx_bf16_rows(const uint16_t *W, const float *bias, const float *X, float *Y,
                         int64_t M, int64_t N, int64_t K, int threads) {
    int64_t Mpad = (M + 15) / 16 * 16, first = N - N % 32;
    uint16_t *x = (uint16_t *)malloc((size_t)(Mpad * K) * sizeof(uint16_t));
    float *rounded = first < N ? (float *)malloc((size_t)(M * K) * sizeof(float)) : NULL;
    if (!x || (first < N && !rounded)) {
        free(x), free(rounded);
        return -1;
    }
    round_x(X, M, Mpad, K, x, threads);
    struct bf16_operands operands = {W, x, bias, Y, N, K};
    struct amx_job job = {&operands, M, N / 32, 32 * K, &AMX_16_ROWS_OF_64, pack_w_bf16,
                          amx_bf16_tile, 32};
    int status = amx_run(&job, threads);
    if (status == 0 && rounded) {
        for (int64_t i = 0; i < M * K; i++)
            rounded[i] = bf16_float(x[i]);
        status = gemm_panels(W + first * K, widen_strip, bias ? bias + first : NULL, rounded,
                             Y + first, N, M, N - first, K, threads);
    }
    free(x), free(rounded);
    return status;
}
#else
int gemm_bf16_amx(void) { return 0; }
#endif

int gemm_bf16(const uint16_t *W, const float *bias, const float *X, float *Y, int64_t M,
              int64_t N, int64_t K, int threads) {
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
    if (M >= BF16_AMX_FROM_ROWS && K % 32 == 0 && N >= 32 && gemm_bf16_amx())
        return amx_bf16_rows(W, bias, X, Y, M, N, K, threads);
#endif
    return gemm_panels(W, widen_strip, bias, X, Y, N, M, N, K, threads);
}
