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
   with a prefetch (on VNNI, tiles of bytes: tile_bytes below); 4 to 15 rows keep 4 weight rows
   in L1 while x's rows pass by, and a prompt's many rows go to AMX's tiles where the CPU has
   them, else to groups of weight rows packed for the vector units (below). The sums are
   integers, so a row's result is the same
   whatever tile computed it, and the same float32 step (an FMA, as the compiler fused the
   one-row code's) turns every sum into its output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "amx.h"
#include "groups.h"
#include "minillm_kernels.h"
#include "simd.h"

/* x's rounded rows a block holds while 4 weight rows at a time pass over them: at most this
   many bytes, so that the block stays in L2 */
#define X_BLOCK_BYTES (1 << 19)

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
   row r's four sums. `fetch`: ask for the weights ahead (a decode step reads them from memory
   once). */
static inline __attribute__((always_inline)) void tile(const int8_t *w, const int16_t *x,
                                                       int64_t K, int R, int fetch,
                                                       __m128i sums[4]) {
    const int8_t *w1 = w + K, *w2 = w1 + K, *w3 = w2 + K;
    vi acc[4][4];
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = izero();
    int64_t k = 0;
    for (; k + IW <= K; k += IW) {
        if (fetch) {  /* the four rows lie one after another: 4 IW bytes of them a step */
            fetch_ahead(w + 4 * k);
            fetch_ahead(w + 4 * k + 64);
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

#ifdef __AVX512VNNI__
/* A decode step's rows with VNNI's vpdpbusd, which multiplies 64 unsigned bytes by 64 signed
   ones (the weights, as stored) into int32 sums of 4 products in one instruction: half the work
   of widening the weights to int16. x's int16 values go in as two byte planes of u = x + 2^15
   (u = 2^8 hi + lo, hi and lo 0..255), and a row's sum of x times w is
   2^8 (hi . w) + (lo . w) - 2^15 (sum of w), with the sum of w a third vpdpbusd against ones.
   In int32 that wraps, and the true sum fits (q_max above): the same integer as the int16
   tiles', bit for bit. K a multiple of 64. */
static inline __attribute__((always_inline)) __m128i tile_bytes(const int8_t *w, const uint8_t *hi,
                                                                const uint8_t *lo, int64_t K) {
    const vi ones = _mm512_set1_epi8(1);
    vi high[4], low[4], total[4];
    for (int r = 0; r < 4; r++)
        high[r] = low[r] = total[r] = izero();
    for (int64_t k = 0; k < K; k += 64) {
        fetch_ahead(w + 4 * k);  /* the four rows lie one after another: four lines a step */
        fetch_ahead(w + 4 * k + 64);
        fetch_ahead(w + 4 * k + 128);
        fetch_ahead(w + 4 * k + 192);
        vi h = iload(hi + k), l = iload(lo + k);
        vi v[4] = {iload(w + k), iload(w + K + k), iload(w + 2 * K + k), iload(w + 3 * K + k)};
        for (int r = 0; r < 4; r++) {
            high[r] = dot_bytes(high[r], h, v[r]);
            low[r] = dot_bytes(low[r], l, v[r]);
            total[r] = dot_bytes(total[r], ones, v[r]);
        }
    }
    for (int r = 0; r < 4; r++)
        high[r] = _mm512_sub_epi32(iadd(_mm512_slli_epi32(high[r], 8), low[r]),
                                   _mm512_slli_epi32(total[r], 15));
    return isum4(high[0], high[1], high[2], high[3]);
}
#endif

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

/* what the groups' and amx_run's functions read: the weights, x (int16 values, or the tiles'
   two byte planes), the scales, the output */
struct int8_operands {
    const int8_t *W, *hi;
    const uint8_t *lo;
    const int16_t *xq;
    const float *sx, *scale, *bias;
    float *Y;
    int64_t M, N, K;
};

/* A prompt's many rows (from AMX_FROM_ROWS) where the tiles are not (or past their last 32
   weight rows), groups.h's groups: a group of VW weight rows widened once to int16, two
   consecutive values of each row per int32 lane, and two of x's int16 values broadcast to
   every lane, so that one dot16 (vpdpwssd with VNNI) adds a step of every row's sum at once.
   The sums are the same integers and the float step the same as the other paths': the same
   numbers, bit for bit. */
#define INT8_GROUP_X 8  /* rows of x a pass: 8 sums in registers at either width */

static size_t int8_group_bytes(int64_t K) {
    return 2 * GROUP_ROWS * sizeof(float)
           + (size_t)((K + 1) / 2 * 2 * GROUP_ROWS) * sizeof(int16_t);
}

/* v[i]'s 32-bit lanes j (row i's pair j) to v[j]'s lanes i */
static inline void transpose_pairs8(__m256i v[8]) {
    __m256i a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
    }
}

/* weight rows n .. n + rows into space: their scales and biases, a vector each (the lanes past
   them zero), then value k of row r at q[(k / 2) 2 VW + 2 r + k % 2] (an odd K's last value's
   partner zero) */
static void pack_int8_group(const struct int8_operands *o, int64_t n, int64_t rows,
                            char *space) {
    float *lanes = (float *)space;
    int16_t *q = (int16_t *)(lanes + 2 * GROUP_ROWS);
    memset(space, 0, int8_group_bytes(o->K));
    memcpy(lanes, o->scale + n, (size_t)rows * sizeof(float));
    if (o->bias)
        memcpy(lanes + GROUP_ROWS, o->bias + n, (size_t)rows * sizeof(float));
    const int8_t *W = o->W;  /* locals: the stores below may alias o's fields */
    const int64_t K = o->K, whole = K / 16 * 16;
    /* 8 rows by 16 values at a time: widened to int16, then an 8 x 8 transpose of their pairs */
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t k = 0; k < whole; k += 16) {
            __m256i v[8];
            for (int i = 0; i < 8; i++)
                v[i] = r0 + i < rows ? _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                           (const __m128i *)(W + (n + r0 + i) * K + k)))
                                     : _mm256_setzero_si256();
            transpose_pairs8(v);
            for (int j = 0; j < 8; j++)
                _mm256_storeu_si256((__m256i *)(q + (k / 2 + j) * 2 * GROUP_ROWS + 2 * r0), v[j]);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = whole; k < K; k++)
            q[k / 2 * 2 * GROUP_ROWS + 2 * r + k % 2] = W[(n + r) * K + k];
}

/* XR rows of x (K apart; an odd K's partner of the last value read past it, times a zero
   weight) times a packed group: each row's GROUP_ROWS integer sums */
static inline __attribute__((always_inline)) void int8_group_sums(
    const int16_t *q, const int16_t *x, int64_t K, const int XR, vi sums[INT8_GROUP_X]) {
    for (int c = 0; c < XR; c++)
        sums[c] = izero();
    for (int64_t p = 0; p < (K + 1) / 2; p++) {
        vi w = iload(q + p * 2 * GROUP_ROWS);
        for (int c = 0; c < XR; c++)
            sums[c] = dot16(sums[c], w, ibroadcast4(x + c * K + 2 * p));
    }
}

/* weight rows n .. n + rows packed into space, times every row of x, into Y */
static void int8_group(const void *operands, int64_t n, int64_t rows, char *space) {
    const struct int8_operands *o = operands;
    const int64_t K = o->K, M = o->M, N = o->N;
    pack_int8_group(o, n, rows, space);
    const float *lanes = (const float *)space;
    const int16_t *q = (const int16_t *)(lanes + 2 * GROUP_ROWS);
    vf s = vload(lanes), add = vload(lanes + GROUP_ROWS);
    for (int64_t m = 0; m < M; m += INT8_GROUP_X) {
        int xr = M - m < INT8_GROUP_X ? (int)(M - m) : INT8_GROUP_X;
        const int16_t *x = o->xq + m * K;
        vi sums[INT8_GROUP_X];
        if (xr == INT8_GROUP_X)
            int8_group_sums(q, x, K, INT8_GROUP_X, sums);
        else
            for (int c = 0; c < xr; c++)
                int8_group_sums(q, x + c * K, K, 1, sums + c);
        for (int c = 0; c < xr; c++)
            store_lanes(o->Y + (m + c) * N + n,
                        vfma(vfloat(sums[c]), vmul(vset1(o->sx[m + c]), s), add), rows);
    }
}

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
/* A prompt's many rows on AMX's tiles (Sapphire Rapids and later): 16 x 64-byte tile registers
   multiply bytes into int32 sums (TDPBSSD, TDPBUSD), 1024 a cycle. x's int16 values are split
   into their high byte (signed) and low byte (unsigned), x = 2^8 hi + lo, so each sum is
   2^8 (hi . w) + (lo . w): the same integer as the vector tiles' (int32 arithmetic wraps, and
   the true sum fits). x's two byte planes (16 rows by 64 values a tile) are the first operand;
   the weights the second, copied a slice at a time into AMX's layout (4 consecutive values of a
   weight row per 32-bit word, 16 weight rows a 64-byte row) and used for every row of x. Used
   where Linux lets the process use the tiles (arch_prctl), K is a multiple of 64, and there
   are at least AMX_FROM_ROWS rows. */

int gemm_int8_amx(void) {
    return amx_granted();
}

/* weight rows 16 half .. + 16 (K apart) in AMX's B layout, K / 64 tiles of 1 KB: tile c's row
   g holds the 16 rows' values 64 c + 4 g .. + 4, one 32-bit word each */
static void pack_w(const void *operands, int64_t half, char *out) {
    const struct int8_operands *o = operands;
    const int8_t *w = o->W + 16 * half * o->K;
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                             5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)o->K));
    for (int64_t k = 0; k < o->K; k += 4)
        _mm512_storeu_si512((void *)(out + 16 * k),
                            _mm512_i32gather_epi32(rows, (const void *)(w + k), 1));
}

/* x's rows m .. m + rows (hi, lo: K apart) times packed weight rows 32 g .. + 32: into Y,
   scaled */
static void amx_tile(const void *operands, int64_t m, int64_t rows, int64_t g,
                     const char *packed) {
    const struct int8_operands *o = operands;
    const int64_t K = o->K, N = o->N, n = 32 * g;
    const int8_t *hi = o->hi + m * K, *wp = (const int8_t *)packed;
    const uint8_t *lo = o->lo + m * K;
    int32_t part[4][16][16];
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t k = 0; k < K; k += 64) {
        _tile_loadd(0, hi + k, K);
        _tile_loadd(1, lo + k, K);
        _tile_loadd(2, wp + 16 * k, 64);
        _tile_loadd(3, wp + 16 * K + 16 * k, 64);
        _tile_dpbssd(4, 0, 2);
        _tile_dpbusd(5, 1, 2);
        _tile_dpbssd(6, 0, 3);
        _tile_dpbusd(7, 1, 3);
    }
    _tile_stored(4, part[0], 64);
    _tile_stored(5, part[1], 64);
    _tile_stored(6, part[2], 64);
    _tile_stored(7, part[3], 64);
    for (int64_t r = 0; r < rows; r++)
        for (int side = 0; side < 2; side++) {
            vi h = iload(part[2 * side][r]), l = iload(part[2 * side + 1][r]);
            vf sum = vfloat(iadd(_mm512_slli_epi32(h, 8), l));
            vf s = vmul(vset1(o->sx[m + r]), vload(o->scale + n + 16 * side));
            vf add = o->bias ? vload(o->bias + n + 16 * side) : vzero();
            vstore(o->Y + (m + r) * N + n + 16 * side, vfma(sum, s, add));
        }
}

/* rows 0 .. M of x times weight rows 0 .. N - N % 32 on the tiles; -1 if it cannot allocate */
static int amx_rows(const int8_t *W, const float *scale, const float *bias, const int16_t *xq,
                    const float *sx, float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    int8_t *planes = (int8_t *)malloc((size_t)(2 * (M + 16) * K));
    if (!planes)
        return -1;
    int8_t *hi = planes;
    uint8_t *lo = (uint8_t *)planes + (M + 16) * K;
    for (int64_t i = 0; i < M * K; i++)
        hi[i] = (int8_t)(xq[i] >> 8), lo[i] = (uint8_t)(xq[i] & 0xFF);
    memset(hi + M * K, 0, (size_t)(16 * K)), memset(lo + M * K, 0, (size_t)(16 * K));
    struct int8_operands operands = {.W = W, .hi = hi, .lo = lo, .sx = sx, .scale = scale,
                                     .bias = bias, .Y = Y, .N = N, .K = K};
    struct amx_job job = {&operands, M, N / 32, 16 * K, &AMX_16_ROWS_OF_64, pack_w, amx_tile,
                          16};
    int status = amx_run(&job, threads);
    free(planes);
    return status;
}
#else
int gemm_int8_amx(void) { return 0; }
#endif

#ifdef __AVX512VNNI__
/* a decode step's M < 4 rows (xq, sx) times every weight row, four at a time on tile_bytes */
static int decode_rows(const int8_t *W, const float *scale, const float *bias, const int16_t *xq,
                       const float *sx, float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    uint8_t *planes = (uint8_t *)malloc((size_t)(2 * M * K));  /* row m: hi, then lo */
    if (!planes)
        return -1;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            uint16_t u = (uint16_t)(xq[m * K + k] + (1 << 15));
            planes[2 * m * K + k] = (uint8_t)(u >> 8);
            planes[(2 * m + 1) * K + k] = (uint8_t)(u & 0xFF);
        }
    int64_t quads = N / 4;
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && M * N * K > (1 << 16))
    for (int64_t p = 0; p < quads + N % 4; p++) {
        int64_t n = p < quads ? 4 * p : 4 * quads + (p - quads);
        const float *b = bias ? bias + n : NULL;
        for (int64_t m = 0; m < M; m++) {
            if (p < quads)
                put4(Y + m * N + n, tile_bytes(W + n * K, planes + 2 * m * K,
                                               planes + (2 * m + 1) * K, K), sx[m], scale + n, b);
            else
                Y[m * N + n] = put1(dot_int8_int16(W + n * K, xq + m * K, K), sx[m], scale[n], b);
        }
    }
    free(planes);
    return 0;
}
#endif

/* x's largest |value| */
static float largest(const float *x, int64_t K) {
    int64_t k = 0;
    float big = 0.0f;
#ifdef __AVX512F__
    vf most = vzero();
    for (; k + 16 <= K; k += 16)
        most = _mm512_max_ps(most, _mm512_abs_ps(vload(x + k)));
    big = _mm512_reduce_max_ps(most);
#else
    __m256 most = vzero8(), sign = _mm256_set1_ps(-0.0f);
    for (; k + 8 <= K; k += 8)
        most = _mm256_max_ps(most, _mm256_andnot_ps(sign, vload8(x + k)));
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    big = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
#endif
    for (; k < K; k++)
        big = fabsf(x[k]) > big ? fabsf(x[k]) : big;
    return big;
}

/* q = x * inv rounded to the nearest integer (even on a tie, as lrintf) */
static void round_to_int16(const float *x, float inv, int16_t *q, int64_t K) {
    int64_t k = 0;
#ifdef __AVX512F__
    vf scale = vset1(inv);
    for (; k + 16 <= K; k += 16)
        _mm256_storeu_si256((__m256i *)(q + k),
                            _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(vmul(vload(x + k), scale))));
#else
    __m256 scale = vset8(inv);
    for (; k + 8 <= K; k += 8) {
        __m256i v = _mm256_cvtps_epi32(vmul8(vload8(x + k), scale));
        _mm_storeu_si128((__m128i *)(q + k), _mm_packs_epi32(_mm256_castsi256_si128(v),
                                                             _mm256_extracti128_si256(v, 1)));
    }
#endif
    for (; k < K; k++)
        q[k] = (int16_t)lrintf(x[k] * inv);
}

int gemm_int8(const int8_t *W, const float *scale, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    if (M < 1 || M > INT8_MAX_ROWS || K < 1 || K > INT8_MAX_K)
        return -1;
    int16_t *xq = (int16_t *)malloc((size_t)(M * K + 1) * sizeof(int16_t));  /* + an odd K's
                                                                               partner */
    float sx[INT8_MAX_ROWS + 16];  /* room for a last group of 16 rows on the tiles */
    if (!xq)
        return -1;
    int64_t most = INT32_MAX / (128 * K);
    float qmax = most < 32767 ? (float)most : 32767.0f;
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && M * K > (1 << 16))
    for (int64_t m = 0; m < M; m++) {
        float big = largest(X + m * K, K);
        sx[m] = big > 0.0f ? big / qmax : 1.0f;
        round_to_int16(X + m * K, 1.0f / sx[m], xq + m * K, K);
    }
    for (int64_t m = M; m < M + 16; m++)
        sx[m] = 1.0f;
    int64_t first = 0;  /* weight rows from which the vector tiles take over */
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
    if (M >= AMX_FROM_ROWS && K % 64 == 0 && N >= 32 && gemm_int8_amx()) {
        if (amx_rows(W, scale, bias, xq, sx, Y, M, N, K, threads) != 0) {
            free(xq);
            return -1;
        }
        first = N - N % 32;
    }
#endif
    if (M >= AMX_FROM_ROWS) {
        xq[M * K] = 0;
        struct int8_operands operands = {.W = W, .xq = xq, .sx = sx, .scale = scale,
                                         .bias = bias, .Y = Y, .M = M, .N = N, .K = K};
        struct groups_job job = {&operands, N, first, int8_group_bytes(K), int8_group};
        int status = first < N ? groups_run(&job, threads) : 0;
        free(xq);
        return status;
    }
#ifdef __AVX512VNNI__
    if (M < 4 && K % 64 == 0) {
        int status = decode_rows(W, scale, bias, xq, sx, Y, M, N, K, threads);
        free(xq);
        return status;
    }
#endif
    int64_t quads = (N - first) / 4, block = X_BLOCK_BYTES / (2 * K) / 4 * 4;
    block = block < 4 ? 4 : block;
    int fetch = M < 4;  /* a decode step's few rows: the weights come from memory */
    for (int64_t m0 = 0; m0 < M; m0 += block) {
        int64_t rows = M - m0 < block ? M - m0 : block;
        #pragma omp parallel for schedule(static) num_threads(threads) \
            if (threads > 1 && rows * N * K > (1 << 16))
        for (int64_t p = 0; p < quads + (N - first) % 4; p++) {
            if (p < quads) {
                if (fetch)
                    quad(W, scale, bias, xq, sx, Y, m0, rows, first + 4 * p, N, K, 1);
                else
                    quad(W, scale, bias, xq, sx, Y, m0, rows, first + 4 * p, N, K, 0);
                continue;
            }
            int64_t n = first + 4 * quads + (p - quads);
            for (int64_t m = m0; m < m0 + rows; m++)
                Y[m * N + n] = put1(dot_int8_int16(W + n * K, xq + m * K, K), sx[m], scale[n],
                                    bias ? bias + n : NULL);
        }
    }
    free(xq);
    return 0;
}
