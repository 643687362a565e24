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
/* A prompt's many rows on AMX's bf16 tiles (Sapphire Rapids and later), which multiply pairs of
   bf16 values and add them into float32 sums (TDPBF16PS), 512 a cycle. x stays float32 in
   effect: each x is cut into three bf16 numbers, x = hi + mid + lo exactly (hi its top 8
   significant bits, mid the next 8, lo the last 8, each by truncation), and the tiles add
   w * hi + w * mid + w * lo. A bf16 times a bf16 is exact in float32, so the sums are those
   of the widened weight times x in float32, in another order of the sums (x's below 2^-110,
   where lo would be a subnormal, which the tiles read as zero, lose their last bits).
   x's three planes (16 rows by 32 values a tile) are the first operand; the weights the second,
   copied a slice at a time into AMX's layout (2 consecutive values of a weight row per 32-bit
   word, 16 weight rows a 64-byte row). Used where Linux lets the process use the tiles, K is a
   multiple of 32, and there are at least AMX_FROM_ROWS rows. */
#include "amx.h"

int gemm_bf16_amx(void) {
    return amx_granted();
}

/* a float32 whose last 16 bits are zero, as a bf16 */
static inline uint16_t bf16_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return (uint16_t)(bits >> 16);
}

/* x's rows as three bf16 planes (hi, mid, lo), each M x K; rows M .. Mpad zero */
static void split_x(const float *X, int64_t M, int64_t Mpad, int64_t K, uint16_t *hi,
                    uint16_t *mid, uint16_t *lo) {
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    int64_t k = 0, count = M * K;
    for (; k + 16 <= count; k += 16) {
        vf x = vload(X + k);
        __m512 h = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), top));
        __m512 r = _mm512_sub_ps(x, h);
        __m512 m = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r), top));
        __m512 l = _mm512_sub_ps(r, m);
        _mm256_storeu_si256((__m256i *)(hi + k),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(h), 16)));
        _mm256_storeu_si256((__m256i *)(mid + k),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(m), 16)));
        _mm256_storeu_si256((__m256i *)(lo + k),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(l), 16)));
    }
    for (; k < count; k++) {
        uint32_t bits;
        float h, m, r;
        memcpy(&bits, X + k, 4);
        bits &= 0xFFFF0000u;
        memcpy(&h, &bits, 4);
        r = X[k] - h;
        memcpy(&bits, &r, 4);
        bits &= 0xFFFF0000u;
        memcpy(&m, &bits, 4);
        hi[k] = bf16_bits(h), mid[k] = bf16_bits(m), lo[k] = bf16_bits(r - m);
    }
    size_t pad = (size_t)((Mpad - M) * K) * sizeof(uint16_t);
    memset(hi + count, 0, pad), memset(mid + count, 0, pad), memset(lo + count, 0, pad);
}

/* what amx_run's pack and tile read: the weights, x's three planes, the output */
struct bf16_operands {
    const uint16_t *W, *hi, *mid, *lo;
    const float *bias;
    float *Y;
    int64_t N, K;
};

/* weight rows 16 half .. + 16 (K apart) in AMX's B layout, K / 32 tiles of 1 KB: tile c's row
   g holds the 16 rows' values 32 c + 2 g, + 1, one 32-bit word each */
static void pack_w_bf16(const void *operands, int64_t half, char *out) {
    const struct bf16_operands *o = operands;
    const uint32_t *words = (const uint32_t *)(o->W + 16 * half * o->K);
    uint32_t *packed = (uint32_t *)out;
    int64_t pairs = o->K / 2;
    for (int64_t g = 0; g < pairs; g++)
        for (int64_t n = 0; n < 16; n++)
            packed[16 * g + n] = words[n * pairs + g];
}

/* x's rows m .. m + rows (three planes, K apart) times packed weight rows 32 g .. + 32, into Y */
static void amx_bf16_tile(const void *operands, int64_t m, int64_t rows, int64_t g,
                          const char *packed) {
    const struct bf16_operands *o = operands;
    const int64_t K = o->K, N = o->N, n = 32 * g;
    const uint16_t *hi = o->hi + m * K, *mid = o->mid + m * K, *lo = o->lo + m * K;
    const uint16_t *wp = (const uint16_t *)packed;
    float part[2][16][16];
    _tile_zero(5);
    _tile_zero(6);
    for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(0, hi + k, 2 * K);
        _tile_loadd(1, mid + k, 2 * K);
        _tile_loadd(2, lo + k, 2 * K);
        _tile_loadd(3, wp + 16 * k, 64);
        _tile_loadd(4, wp + 16 * K + 16 * k, 64);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(6, 0, 4);
        _tile_dpbf16ps(5, 1, 3);
        _tile_dpbf16ps(6, 1, 4);
        _tile_dpbf16ps(5, 2, 3);
        _tile_dpbf16ps(6, 2, 4);
    }
    _tile_stored(5, part[0], 64);
    _tile_stored(6, part[1], 64);
    for (int64_t r = 0; r < rows; r++)
        for (int side = 0; side < 2; side++) {
            vf sum = vload(part[side][r]);
            if (o->bias)
                sum = vadd(sum, vload(o->bias + n + 16 * side));
            vstore(o->Y + (m + r) * N + n + 16 * side, sum);
        }
}

/* rows 0 .. M of X times weight rows 0 .. N - N % 32 on the tiles; -1 if it cannot allocate */
static int amx_bf16_rows(const uint16_t *W, const float *bias, const float *X, float *Y,
                         int64_t M, int64_t N, int64_t K, int threads) {
    int64_t Mpad = (M + 15) / 16 * 16;
    uint16_t *planes = (uint16_t *)malloc((size_t)(3 * Mpad * K) * sizeof(uint16_t));
    if (!planes)
        return -1;
    uint16_t *hi = planes, *mid = planes + Mpad * K, *lo = planes + 2 * Mpad * K;
    split_x(X, M, Mpad, K, hi, mid, lo);
    struct bf16_operands operands = {W, hi, mid, lo, bias, Y, N, K};
    struct amx_job job = {&operands, M, N / 32, 32 * K, &AMX_16_ROWS_OF_64, pack_w_bf16,
                          amx_bf16_tile};
    int status = amx_run(&job, threads);
    free(planes);
    return status;
}
#else
int gemm_bf16_amx(void) { return 0; }
#endif

int gemm_bf16(const uint16_t *W, const float *bias, const float *X, float *Y, int64_t M,
              int64_t N, int64_t K, int threads) {
    int64_t ldy = N;  /* Y's row length; the strips below may start past AMX's columns */
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
    if (M >= AMX_FROM_ROWS && K % 32 == 0 && N >= 32 && gemm_bf16_amx()) {
        if (amx_bf16_rows(W, bias, X, Y, M, N, K, threads) != 0)
            return -1;
        int64_t first = N - N % 32;
        if (first == N)
            return 0;
        W += first * K, Y += first, N -= first;
        bias = bias ? bias + first : NULL;
    }
#endif
    return gemm_panels(W, widen_strip, bias, X, Y, ldy, M, N, K, threads);
}
