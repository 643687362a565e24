/* GGUF's Q4_1 blocks times float32 rows (a decode step's few, a prompt's many), the blocks read as
   the model file stores them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amx.h"
#include "groups.h"
#include "minillm_kernels.h"
#include "simd.h"

/* GGUF's Q4_1: a row is K/32 blocks of 20 bytes: d and m (float16), then 16 bytes whose low
   nibbles are weights 0..15 and high nibbles weights 16..31; weight = q * d + m.
   Like llama.cpp, the kernel multiplies integers: each block of 32 values of x is rounded to
   int8 with its own scale (dx = max|x| / 127), so a block's sum of q * x is an integer dot
   product of 4-bit and 8-bit numbers (vpmaddubsw, or AVX-512 VNNI's vpdpbusd, 32 or 64 at a
   time) times d * dx; the m part needs only the block's sum of x (sx), kept exact in float32.
   A block is Q4_1_BLOCK_BYTES (20) bytes.

   Rounding x to int8 is a step function: a change in x's last bit can move a rounded value by
   one, and the next layer's input with it. So at one level, below AMX_FROM_ROWS rows, every
   path adds a row's floats in the same order (a greedy decode gives the same tokens whichever
   runs, one row, a few, or a pass of several weight rows): with AVX-512, pairs of blocks into
   16 lanes, their sum, then the blocks' m * sx one pair at a time, then an odd last block; with
   AVX2, 8 blocks a step (q4_1_step). From AMX_FROM_ROWS rows (a prompt's) the floats are
   added in another order, AMX's tiles' order, and on a CPU without the tiles the vector units
   add them in that order too: a prompt's numbers are the same bits at every level. */

/* x's blocks: xq rounded to int8 (in x's order), and per block dx and sx, interleaved */
static void round_x(const float *x, int64_t blocks, int8_t *xq, float *xs) {
    for (int64_t b = 0; b < blocks; b++) {
        const float *v = x + 32 * b;
        float sum = 0.0f;
        for (int j = 0; j < 32; j++)
            sum += v[j];
#ifdef __AVX512F__
        vf v0 = vload(v), v1 = vload(v + 16);
        float big = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        vf inv = vset1(big > 0.0f ? 127.0f / big : 0.0f);
        /* rounded to nearest even, as lrintf */
        _mm_storeu_si128((__m128i *)(xq + 32 * b),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(vmul(v0, inv))));
        _mm_storeu_si128((__m128i *)(xq + 32 * b + 16),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(vmul(v1, inv))));
#else
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 most = vzero8();
        for (int j = 0; j < 32; j += 8)
            most = _mm256_max_ps(most, _mm256_andnot_ps(sign, vload8(v + j)));
        __m128 half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
        half = _mm_max_ps(half, _mm_movehl_ps(half, half));
        float big = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
        __m256 inv = vset8(big > 0.0f ? 127.0f / big : 0.0f);
        __m256i q[4];
        for (int i = 0; i < 4; i++)  /* rounded to nearest even, as lrintf */
            q[i] = _mm256_cvtps_epi32(vmul8(vload8(v + 8 * i), inv));
        /* packs work within 128-bit lanes (values 0-3, 8-11, 16-19, 24-27, then 4-7, ...) */
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                           _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(xq + 32 * b), _mm256_permutevar8x32_epi32(
            bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#endif
        xs[2 * b] = big / 127.0f;
        xs[2 * b + 1] = sum;
    }
}

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

/* an odd last block, one row: its d * dx part into acc8, its m * sx into mins */
static inline void q4_1_last_block(const uint8_t *blk, const int8_t *xq, const float *xs,
                                   __m256 *acc8, float *mins) {
    __m256i dot = dot_bytes8(_mm256_setzero_si256(), q4_1_nibbles(blk),
                             _mm256_loadu_si256((const __m256i *)xq));
    *acc8 = vfma8(vfloat8(dot), vset8(half_at(blk) * xs[0]), *acc8);
    *mins = fmaf(half_at(blk + 2), xs[1], *mins);
}

#ifdef __AVX512BW__
/* two blocks' 64 weights as bytes, in x's order */
static inline vi q4_1_pair_nibbles(const uint8_t *b0, const uint8_t *b1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(q4_1_nibbles(b0)), q4_1_nibbles(b1), 1);
}

/* lanes 0..7 a, 8..15 b */
static inline vf halves(float a, float b) {
    return _mm512_mask_blend_ps(0xFF00, vset1(a), vset1(b));
}

/* acc + (w . x, 4 bytes a lane) * scale */
static inline vf dot_fma(vi w, vi x, vf scale, vf acc) {
    return vfma(vfloat(dot_bytes(izero(), w, x)), scale, acc);
}
#endif

#if defined(__AVX512VBMI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
/* Four blocks (two pairs) a step from one 80-byte load: a byte permute (VBMI) spreads each
   pair's 4-bit pairs as [block 0's, block 0's, block 1's, block 1's] (the second copies then
   shifted to their high nibbles), and another gathers the 4 blocks' (d, m) for one float16
   conversion. Four rows a pass share x's loads. */
static const uint8_t PAIR_AT[2][64] = {
    {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
     4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
     24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39,
     24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
    {44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
     44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
     64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
     64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79}};
static const uint8_t SCALES_AT[64] = {0, 1, 2, 3, 20, 21, 22, 23, 40, 41, 42, 43, 60, 61, 62, 63};
/* lanes 0..7 of the pair's scale hold its first block's d * dx, lanes 8..15 its second's */
static const int32_t SPREAD[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2},
                                      {4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6}};

/* one pair of blocks (w: its weights as spread above), one row: into acc; and its
   m0 * sx0 + m1 * sx1 (fused as the one-row code's compiler fuses it), into mins */
#define Q4_1_PASS 4  /* rows of W a pass of q4_1_rows */
static inline vf q4_1_pair(vi w, vi x, vf scale, vf acc) {
    w = _mm512_and_si512(_mm512_mask_srli_epi16(w, 0xFF00FF00, w, 4), _mm512_set1_epi8(0x0F));
    return dot_fma(w, x, scale, acc);
}

/* R consecutive rows (R <= 4) times one row of x: y[r] */
static inline __attribute__((always_inline)) void q4_1_rows(
    const uint8_t *row, int64_t row_bytes, int R, const int8_t *xq, const float *xs,
    int64_t blocks, float *y) {
    const vi pair_at0 = iload(PAIR_AT[0]), pair_at1 = iload(PAIR_AT[1]);
    const vi scales_at = iload(SCALES_AT), spread0 = iload(SPREAD[0]), spread1 = iload(SPREAD[1]);
    vf acc[4];
    float mins[4];
    for (int r = 0; r < R; r++)
        acc[r] = vzero(), mins[r] = 0.0f;
    int64_t b = 0;
    for (; b < blocks - 1; b += 4) {  /* 4 blocks, or a last pair (a masked load of 40 bytes) */
        int whole = b + 4 <= blocks;
        vi x0 = iload(xq + 32 * b), x1 = whole ? iload(xq + 32 * b + 64) : x0;
        __m256 x_scales = whole ? vload8(xs + 2 * b)
                                : _mm256_castps128_ps256(_mm_loadu_ps(xs + 2 * b));
        for (int r = 0; r < R; r++) {
            const uint8_t *g = row + r * row_bytes + Q4_1_BLOCK_BYTES * b;
            fetch_ahead(g);
            fetch_ahead(g + 64);
            vi lo = whole ? iload(g) : _mm512_maskz_loadu_epi8(0xFFFFFFFFFFULL, g);
            vi hi = whole ? _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(g + 64)))
                          : izero();
            __m256 dm = _mm256_cvtph_ps(
                _mm512_castsi512_si128(_mm512_permutexvar_epi8(scales_at, lo)));
            __m256 products = vmul8(dm, x_scales);  /* d0 dx0, m0 sx0, d1 dx1, ... */
            vf wide = _mm512_castps256_ps512(products);
            acc[r] = q4_1_pair(_mm512_permutex2var_epi8(lo, pair_at0, hi), x0,
                               _mm512_permutexvar_ps(spread0, wide), acc[r]);
            /* lane 1: m0 * sx0 + (m1 * sx1), lane 5: m2 * sx2 + (m3 * sx3) */
            float fused[8];
            vstore8(fused, vfma8(dm, x_scales, _mm256_permute_ps(products, 0xFF)));
            mins[r] += fused[1];
            if (whole) {
                acc[r] = q4_1_pair(_mm512_permutex2var_epi8(lo, pair_at1, hi), x1,
                                   _mm512_permutexvar_ps(spread1, wide), acc[r]);
                mins[r] += fused[5];
            }
        }
        if (!whole)
            b -= 2;
    }
    for (int r = 0; r < R; r++) {
        __m256 acc8 = vzero8();
        if (b < blocks)
            q4_1_last_block(row + r * row_bytes + Q4_1_BLOCK_BYTES * b, xq + 32 * b,
                            xs + 2 * b, &acc8, &mins[r]);
        y[r] = vsum(acc[r]) + vsum8(acc8) + mins[r];
    }
}
#elif defined(__AVX512BW__)
static float dot_q4_1(const uint8_t *row, const int8_t *xq, const float *xs, int64_t blocks) {
    float mins = 0.0f;
    int64_t b = 0;
    vf acc = vzero();
    for (; b + 2 <= blocks; b += 2) {  /* two blocks a step: 64 weights in one register */
        const uint8_t *b0 = row + Q4_1_BLOCK_BYTES * b, *b1 = b0 + Q4_1_BLOCK_BYTES;
        vf scale = halves(half_at(b0) * xs[2 * b], half_at(b1) * xs[2 * b + 2]);
        acc = dot_fma(q4_1_pair_nibbles(b0, b1), iload(xq + 32 * b), scale, acc);
        mins += fmaf(half_at(b0 + 2), xs[2 * b + 1], half_at(b1 + 2) * xs[2 * b + 3]);
    }
    float total = vsum(acc);
    __m256 acc8 = vzero8();
    if (b < blocks)  /* an odd last block */
        q4_1_last_block(row + Q4_1_BLOCK_BYTES * b, xq + 32 * b, xs + 2 * b, &acc8, &mins);
    return total + vsum8(acc8) + mins;
}
#else
/* AVX2: eight blocks a step. Their (d, m), 4 bytes at 20-byte strides, come from four 32-byte
   loads blended into one vector, then one float16 conversion each for the 8 d and the 8 m
   (not two scalar conversions a block); so are x's 8 dx and sx. A block's 32 weights are one
   128-bit load copied to both halves, the upper half shifted down by 4. Two sums, taking the
   blocks in turn, keep each multiply-add from waiting on the one before; the m * sx terms are
   a vector of 8 too. A row's last step, under 8 blocks, loads only its own blocks (masked
   loads; the lanes past them are zero). */

/* the dword lanes of a 32-byte load at g + at that lie within the step's first `bytes` bytes */
static inline __m256i lanes_within(int at, int bytes) {
    __m256i offsets = _mm256_add_epi32(_mm256_set1_epi32(at),
                                       _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(bytes - 3), offsets);
}

static inline __m256i load_within(const uint8_t *g, int at, int bytes, int whole) {
    return whole ? iload(g + at)
                 : _mm256_maskload_epi32((const int *)(g + at), lanes_within(at, bytes));
}

/* the (d, m) of the step's `count` blocks at g (8 when whole) as floats, zero past them */
static inline __attribute__((always_inline)) void q4_1_eight_dm(
    const uint8_t *g, int count, int whole, __m256 *d, __m256 *m) {
    const __m256i order = _mm256_setr_epi32(0, 5, 2, 7, 0, 5, 2, 7);
    int bytes = Q4_1_BLOCK_BYTES * count;
    /* dword lanes 0 and 5 of g's first 32 bytes are blocks 0 and 1, lanes 2 and 7 of g + 32's
       blocks 2 and 3; the same from g + 80 and g + 112 for blocks 4..7 */
    __m256i a = _mm256_blend_epi32(load_within(g, 0, bytes, whole),
                                   load_within(g, 32, bytes, whole), 0x84);
    __m256i b = _mm256_blend_epi32(load_within(g, 80, bytes, whole),
                                   load_within(g, 112, bytes, whole), 0x84);
    __m256i all = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(a, order),
                                     _mm256_permutevar8x32_epi32(b, order), 0xF0);
    const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                           0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    /* d0..3 m0..3 | d4..7 m4..7, then d0..7 | m0..7 */
    all = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(all, split), 0xD8);
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(all));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(all, 1));
}

/* xs's interleaved dx, sx of the step's `count` blocks as two vectors, zero past them */
static inline __attribute__((always_inline)) void x_eight_scales(
    const float *xs, int count, int whole, __m256 *dx, __m256 *sx) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), end = _mm256_set1_epi32(2 * count);
    __m256 lo = whole ? vload8(xs) : _mm256_maskload_ps(xs, _mm256_cmpgt_epi32(end, lane));
    __m256 hi = whole ? vload8(xs + 8)
                      : _mm256_maskload_ps(xs + 8, _mm256_cmpgt_epi32(
                            end, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
    /* shuffle_ps leaves blocks 0 1 4 5 | 2 3 6 7; the 64-bit permute puts them in order */
    *dx = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    *sx = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

#define Q4_1_PASS 2  /* rows of W a pass (AVX2's 16 registers hold two rows' sums and scales) */

/* one step of up to 8 blocks (count; whole: all 8) from block b, R rows: into acc and mins8 */
static inline __attribute__((always_inline)) void q4_1_step(
    const uint8_t *row, int64_t row_bytes, int R, const int8_t *xq, const float *xs, int64_t b,
    int count, int whole, __m256 acc[][2], __m256 *mins8) {
    const __m256i high_down = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 dx, sx, scale[Q4_1_PASS];
    x_eight_scales(xs + 2 * b, count, whole, &dx, &sx);
    for (int r = 0; r < R; r++) {
        const uint8_t *g = row + r * row_bytes + Q4_1_BLOCK_BYTES * b;
        fetch_ahead(g);
        fetch_ahead(g + 64);
        fetch_ahead(g + 128);
        __m256 d, m;
        q4_1_eight_dm(g, count, whole, &d, &m);
        scale[r] = vmul8(d, dx);
        mins8[r] = vfma8(m, sx, mins8[r]);
    }
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        if (!whole && k >= count)
            break;
        __m256i x = iload(xq + 32 * (b + k)), lane = _mm256_set1_epi32(k);
        #pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = row + r * row_bytes + Q4_1_BLOCK_BYTES * (b + k);
            __m256i q = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(blk + 4)));
            __m256i w = _mm256_and_si256(_mm256_srlv_epi32(q, high_down), low4);
            __m256i dot = dot_bytes8(_mm256_setzero_si256(), w, x);
            acc[r][k & 1] = vfma8(vfloat8(dot), _mm256_permutevar8x32_ps(scale[r], lane),
                                  acc[r][k & 1]);
        }
    }
}

/* R consecutive rows (R <= Q4_1_PASS) times one row of x: y[r]. The R rows share x's loads;
   each row's floats are added in the same order whatever R is. */
static inline __attribute__((always_inline)) void q4_1_rows(
    const uint8_t *row, int64_t row_bytes, int R, const int8_t *xq, const float *xs,
    int64_t blocks, float *y) {
    __m256 acc[Q4_1_PASS][2], mins8[Q4_1_PASS];
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = mins8[r] = vzero8();
    int64_t b = 0;
    for (; b + 8 <= blocks; b += 8)
        q4_1_step(row, row_bytes, R, xq, xs, b, 8, 1, acc, mins8);
    if (b < blocks)
        q4_1_step(row, row_bytes, R, xq, xs, b, (int)(blocks - b), 0, acc, mins8);
    for (int r = 0; r < R; r++)
        y[r] = vsum8(vadd8(vadd8(acc[r][0], acc[r][1]), mins8[r]));
}
#endif

#ifdef __AVX512BW__
/* A few rows of x (from Q4_1_TILE_MIN_ROWS to AMX_FROM_ROWS - 1: a speculative decode's
   verification, a small batch): register tiles of 4 rows of W by Q4_1_TILE_X rows of x, each
   weight block unpacked once per call instead of once per row of x. A quad of W's rows is
   unpacked into a small buffer (each pair of blocks' 64 weights as bytes, their d spread as the
   one-row code spreads it, the blocks' m), then every row of x goes by it. The arithmetic is
   the one-row code's, operation for operation (per pair of blocks the integer dot, times
   d * dx, fused into the sums in the same order; the m * sx terms summed in the same order,
   Q4_1_MINS_X rows of x a vector; the same final sums): every row of Y is the number the
   one-row code gives, bit for bit. */
#define Q4_1_TILE_X 4
#define Q4_1_MINS_X 16
#define Q4_1_TILE_MIN_ROWS 4  /* from this many rows of x the tiles run */

typedef struct {
    vi *w;  /* [pair][row of the quad]: 64 weights as bytes, x's order */
    vf *d;  /* [pair][row]: lanes 0..7 the first block's d, 8..15 the second's */
    float *m;  /* [row][block] */
} q4_1_quad;

static void unpack_quad(const uint8_t *W, int64_t row_bytes, int64_t blocks, q4_1_quad *q) {
    for (int r = 0; r < 4; r++) {
        const uint8_t *row = W + r * row_bytes;
        for (int64_t p = 0; p < blocks / 2; p++) {
            const uint8_t *b0 = row + Q4_1_BLOCK_BYTES * 2 * p, *b1 = b0 + Q4_1_BLOCK_BYTES;
            q->w[4 * p + r] = q4_1_pair_nibbles(b0, b1);
            q->d[4 * p + r] = halves(half_at(b0), half_at(b1));
        }
        for (int64_t b = 0; b < blocks; b++)
            q->m[r * blocks + b] = half_at(row + Q4_1_BLOCK_BYTES * b + 2);
    }
}

/* the quad's sums of (q * d) (x rounded) over whole pairs, for XR rows of x: acc[r][c] */
static inline __attribute__((always_inline)) void q4_1_tile(
    const q4_1_quad *q, int64_t pairs, const int8_t *xq, const float *xs, int64_t K,
    int64_t blocks, const int XR, vf acc[4][Q4_1_TILE_X]) {
    const vi spread = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < XR; c++)
            acc[r][c] = vzero();
    for (int64_t p = 0; p < pairs; p++) {
        vi w[4];
        vf d[4];
        for (int r = 0; r < 4; r++)
            w[r] = q->w[4 * p + r], d[r] = q->d[4 * p + r];
        for (int c = 0; c < XR; c++) {
            vi x = iload(xq + c * K + 64 * p);
            vf dx = _mm512_permutexvar_ps(
                spread, _mm512_castps128_ps512(_mm_loadu_ps(xs + c * 2 * blocks + 4 * p)));
            for (int r = 0; r < 4; r++)
                acc[r][c] = dot_fma(w[r], x, vmul(d[r], dx), acc[r][c]);
        }
    }
}

/* Y's 4 columns of the quad at n, rows m0..m0+rows (rows <= Q4_1_MINS_X) of x; sxt: x's block
   sums by block, then row (rows padded to Q4_1_MINS_X) */
static void q4_1_quad_rows(const uint8_t *W, int64_t row_bytes, const q4_1_quad *q,
                           const int8_t *xq, const float *xs, const float *sxt, int64_t Mpad,
                           const float *bias, float *Y, int64_t N, int64_t K, int64_t blocks,
                           int64_t n, int64_t m0, int64_t rows) {
    int64_t pairs = blocks / 2;
    float mins[4][Q4_1_MINS_X];
    for (int r = 0; r < 4; r++) {  /* the one-row code's mins, a row of x a lane */
        const float *m = q->m + r * blocks;
        vf total = vzero();
        for (int64_t p = 0; p < pairs; p++)
            total = vadd(total, vfma(vset1(m[2 * p]), vload(sxt + 2 * p * Mpad + m0),
                                     vmul(vset1(m[2 * p + 1]),
                                          vload(sxt + (2 * p + 1) * Mpad + m0))));
        if (blocks % 2)
            total = vfma(vset1(m[blocks - 1]), vload(sxt + (blocks - 1) * Mpad + m0), total);
        vstore(mins[r], total);
    }
    for (int64_t c0 = 0; c0 < rows; c0 += Q4_1_TILE_X) {
        int XR = rows - c0 < Q4_1_TILE_X ? (int)(rows - c0) : Q4_1_TILE_X;
        const int8_t *x = xq + (m0 + c0) * K;
        const float *s = xs + (m0 + c0) * 2 * blocks;
        vf acc[4][Q4_1_TILE_X];
        switch (XR) {
        case 1: q4_1_tile(q, pairs, x, s, K, blocks, 1, acc); break;
        case 2: q4_1_tile(q, pairs, x, s, K, blocks, 2, acc); break;
        case 3: q4_1_tile(q, pairs, x, s, K, blocks, 3, acc); break;
        default: q4_1_tile(q, pairs, x, s, K, blocks, Q4_1_TILE_X, acc); break;
        }
        for (int c = 0; c < XR; c++)
            for (int r = 0; r < 4; r++) {
                __m256 acc8 = vzero8();
                float unused = 0.0f;
                if (blocks % 2)
                    q4_1_last_block(W + r * row_bytes + Q4_1_BLOCK_BYTES * (blocks - 1),
                                    x + c * K + 32 * (blocks - 1),
                                    s + c * 2 * blocks + 2 * (blocks - 1), &acc8, &unused);
                float y = vsum(acc[r][c]) + vsum8(acc8) + mins[r][c0 + c];
                Y[(m0 + c0 + c) * N + n + r] = y + (bias ? bias[n + r] : 0.0f);
            }
    }
}

/* Y's columns n..n+4 (a quad of W's rows) for all M rows of x, through the tiles */
static void q4_1_quad_all_rows(const uint8_t *W, int64_t row_bytes, q4_1_quad *q,
                               const int8_t *xq, const float *xs, const float *sxt,
                               int64_t Mpad, const float *bias, float *Y, int64_t M, int64_t N,
                               int64_t K, int64_t blocks, int64_t n) {
    unpack_quad(W + n * row_bytes, row_bytes, blocks, q);
    for (int64_t m0 = 0; m0 < M; m0 += Q4_1_MINS_X)
        q4_1_quad_rows(W + n * row_bytes, row_bytes, q, xq, xs, sxt, Mpad, bias, Y, N, K,
                       blocks, n, m0, M - m0 < Q4_1_MINS_X ? M - m0 : Q4_1_MINS_X);
}
#endif

#ifdef __AVX512BW__
/* one row of W times one row of x, as the one-row code computes it */
static inline float q4_1_one(const uint8_t *row, int64_t row_bytes, const int8_t *xq,
                             const float *xs, int64_t blocks) {
#if defined(__AVX512VBMI__) && defined(__AVX512VL__)
    float y;
    q4_1_rows(row, row_bytes, 1, xq, xs, blocks, &y);
    return y;
#else
    (void)row_bytes;
    return dot_q4_1(row, xq, xs, blocks);
#endif
}

static int gemm_q4_1_tiles(const uint8_t *W, const float *bias, const int8_t *xq,
                           const float *xs, float *Y, int64_t M, int64_t N, int64_t K,
                           int threads) {
    int64_t blocks = K / 32, row_bytes = blocks * Q4_1_BLOCK_BYTES, pairs = blocks / 2;
    int64_t Mpad = (M + Q4_1_MINS_X - 1) / Q4_1_MINS_X * Q4_1_MINS_X;
    float *sxt = (float *)calloc((size_t)(blocks * Mpad), sizeof(float));
    if (!sxt)
        return -1;
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < blocks; b++)
            sxt[b * Mpad + m] = xs[m * 2 * blocks + 2 * b + 1];
    int64_t quads = N / 4, items = quads + N % 4;  /* the quads, then the last rows alone */
    int64_t parts = threads > 1 && N * K > (1 << 17) ? threads : 1;
    int64_t per = (items + parts - 1) / parts;
    size_t vectors = (size_t)(4 * pairs + 1) * 64;
    int failed = 0;
    #pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (int64_t part = 0; part < parts; part++) {
        char *space = (char *)aligned_alloc(64, (2 * vectors + (size_t)(4 * blocks) * 4 + 63)
                                                    / 64 * 64);
        if (!space) {
            #pragma omp atomic write
            failed = 1;
            continue;
        }
        q4_1_quad q = {(vi *)space, (vf *)(space + vectors),
                       (float *)(space + 2 * vectors)};
        int64_t end = (part + 1) * per < items ? (part + 1) * per : items;
        for (int64_t p = part * per; p < end; p++) {
            if (p < quads) {
                q4_1_quad_all_rows(W, row_bytes, &q, xq, xs, sxt, Mpad, bias, Y, M, N, K,
                                   blocks, 4 * p);
                continue;
            }
            int64_t n = 4 * quads + (p - quads);
            for (int64_t m = 0; m < M; m++)
                Y[m * N + n] = q4_1_one(W + n * row_bytes, row_bytes, xq + m * K,
                                        xs + m * 2 * blocks, blocks) + (bias ? bias[n] : 0.0f);
        }
        free(space);
    }
    free(sxt);
    return failed ? -1 : 0;
}
#endif

/* A prompt's many rows (from AMX_FROM_ROWS) on the vector units, at every level: the AMX path's
   arithmetic, its bits, without the tiles. A group of VW weight rows (groups.h) is unpacked
   once into the layout AMX's tiles read, VW rows wide: for each block, 8 vectors whose int32
   lane r holds 4 consecutive 4-bit values of weight row r, then the rows' d and m as floats.
   Four values of a row of x, broadcast to every lane, times such a vector (block_step) add one
   step of every weight row's integer dot product at once; 8 steps are a block's exact sum,
   which one float step turns into q . x * d * dx, block after block, then the blocks' m * sx:
   the order amx_run's tile function adds them in. */

#if VW == 16
#define Q4_1_GROUP_X 8  /* rows of x a pass (registers: an int32 and a float sum each) */
#else
#define Q4_1_GROUP_X 4
#endif

/* what the groups' and amx_run's functions read */
struct q4_1_operands {
    const uint8_t *W;
    const int8_t *xq;
    const float *xs, *bias;
    float *Y;
    int64_t M, N, K, blocks, row_bytes;
};

/* A block's integer sums, 4 products a step into each weight row's lane: with VNNI straight into
   int32 (vpdpbusd); without it, vpmaddubsw's pairs added as int16, exact since a block's
   8 steps stay below 8 * 2 * 15 * 127 = 30,480, and widened to int32 once a block. */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
static inline vi block_step(vi t, vi w, vi x) { return _mm512_dpbusd_epi32(t, w, x); }
static inline vi block_ints(vi t) { return t; }
#elif defined(__AVX512BW__)
static inline vi block_step(vi t, vi w, vi x) {
    return _mm512_add_epi16(t, _mm512_maddubs_epi16(w, x));
}
static inline vi block_ints(vi t) { return _mm512_madd_epi16(t, _mm512_set1_epi16(1)); }
#else
static inline vi block_step(vi t, vi w, vi x) {
    return _mm256_add_epi16(t, _mm256_maddubs_epi16(w, x));
}
static inline vi block_ints(vi t) { return _mm256_madd_epi16(t, _mm256_set1_epi16(1)); }
#endif

/* a packed group: block b's 8 vectors at q + 8 b, then d at dm + 2 VW b, m at dm + 2 VW b + VW,
   then the group's bias */
static size_t q4_1_group_bytes(int64_t blocks) {
    return (size_t)(8 * blocks) * sizeof(vi)
           + (size_t)(2 * GROUP_ROWS * blocks + GROUP_ROWS) * sizeof(float);
}

/* weight rows n .. n + rows into space (the lanes past them zero) */
static void pack_q4_1_group(const struct q4_1_operands *o, int64_t n, int64_t rows,
                            char *space) {
    const int64_t blocks = o->blocks, row_bytes = o->row_bytes;  /* locals: the stores below */
    const uint8_t *W = o->W;                                      /* may alias o's fields */
    vi *q = (vi *)space;
    float *dm = (float *)(q + 8 * blocks), *bias = dm + 2 * GROUP_ROWS * blocks;
    memset(space, 0, q4_1_group_bytes(blocks));
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = W + (n + r) * row_bytes;
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *blk = row + Q4_1_BLOCK_BYTES * b;
            uint8_t v[32];
            _mm256_storeu_si256((__m256i *)v, q4_1_nibbles(blk));
            for (int g = 0; g < 8; g++)
                memcpy((uint8_t *)(q + 8 * b + g) + 4 * r, v + 4 * g, 4);
            dm[2 * GROUP_ROWS * b + r] = half_at(blk);
            dm[2 * GROUP_ROWS * b + GROUP_ROWS + r] = half_at(blk + 2);
        }
        if (o->bias)
            bias[r] = o->bias[n + r];
    }
}

/* XR rows of x (xq, xs from row 0) times a packed group: each row's VW sums, bias included */
static inline __attribute__((always_inline)) void q4_1_group_rows(
    const vi *q, const float *dm, const int8_t *xq, const float *xs, const float *bias,
    int64_t K, int64_t blocks, const int XR, vf y[Q4_1_GROUP_X]) {
    vf acc[Q4_1_GROUP_X];
    for (int c = 0; c < XR; c++)
        acc[c] = vzero();
    for (int64_t b = 0; b < blocks; b++) {
        vi s[Q4_1_GROUP_X];
        for (int c = 0; c < XR; c++)
            s[c] = izero();
        for (int g = 0; g < 8; g++) {
            vi w = iload(q + 8 * b + g);
            for (int c = 0; c < XR; c++)
                s[c] = block_step(s[c], w, ibroadcast4(xq + c * K + 32 * b + 4 * g));
        }
        vf d = vload(dm + 2 * GROUP_ROWS * b);
        for (int c = 0; c < XR; c++)
            acc[c] = vfma(vfloat(block_ints(s[c])), vmul(d, vset1(xs[c * 2 * blocks + 2 * b])),
                          acc[c]);
    }
    for (int c = 0; c < XR; c++) {
        vf mins = vzero();
        for (int64_t b = 0; b < blocks; b++)
            mins = vfma(vload(dm + 2 * GROUP_ROWS * b + GROUP_ROWS),
                        vset1(xs[c * 2 * blocks + 2 * b + 1]), mins);
        y[c] = vadd(acc[c], mins);
        if (bias)
            y[c] = vadd(y[c], vload(bias));
    }
}

/* weight rows n .. n + rows packed into space, times every row of x, into Y */
static void q4_1_group(const void *operands, int64_t n, int64_t rows, char *space) {
    const struct q4_1_operands *o = operands;
    const int64_t K = o->K, blocks = o->blocks, M = o->M, N = o->N;
    pack_q4_1_group(o, n, rows, space);
    const vi *q = (const vi *)space;
    const float *dm = (const float *)(q + 8 * blocks);
    const float *bias = o->bias ? dm + 2 * GROUP_ROWS * blocks : NULL;
    for (int64_t m = 0; m < M; m += Q4_1_GROUP_X) {
        int xr = M - m < Q4_1_GROUP_X ? (int)(M - m) : Q4_1_GROUP_X;
        const int8_t *x = o->xq + m * K;
        const float *s = o->xs + m * 2 * blocks;
        vf y[Q4_1_GROUP_X];
        if (xr == Q4_1_GROUP_X)
            q4_1_group_rows(q, dm, x, s, bias, K, blocks, Q4_1_GROUP_X, y);
        else
            for (int c = 0; c < xr; c++)
                q4_1_group_rows(q, dm, x + c * K, s + c * 2 * blocks, bias, K, blocks, 1, y + c);
        for (int c = 0; c < xr; c++)
            store_lanes(o->Y + (m + c) * N + n, y[c], rows);
    }
}

/* weight rows n0 .. N (from a group's start) for all M rows of x; -1 if it cannot allocate */
static int gemm_q4_1_groups(const uint8_t *W, const float *bias, const int8_t *xq,
                            const float *xs, float *Y, int64_t M, int64_t N, int64_t K,
                            int64_t n0, int threads) {
    int64_t blocks = K / 32;
    struct q4_1_operands operands = {W, xq, xs, bias, Y, M, N, K, blocks,
                                     blocks * Q4_1_BLOCK_BYTES};
    struct groups_job job = {&operands, N, n0, q4_1_group_bytes(blocks), q4_1_group};
    return groups_run(&job, threads);
}

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
/* A prompt's many rows on AMX's int8 tiles (Sapphire Rapids and later): a tile multiplies 16
   rows of x's int8 values by 16 weight rows' 4-bit values, one block (32 values) at a time
   (TDPBSUD: signed bytes times unsigned bytes into int32), so each (row of x, weight row,
   block) gets its exact integer dot product, which one float step turns into
   q . x * d * dx and adds to the row's sum, block after block, then the blocks' m * sx. The
   integers are the one-row code's; the floats are added in another order (a block's 32
   products as one integer, where the one-row code converts 8 sums of 4 and adds them lane by
   lane): a prompt's row differs from the decode kernel's by float32 rounding. The weights are
   copied a slice at a time into AMX's layout (4 consecutive values of a weight row per 32-bit
   word, 16 weight rows a 64-byte row, a block a 512-byte tile) with their d and m as floats,
   and used for every row of x. Used where Linux lets the process use the tiles and there are
   at least AMX_FROM_ROWS rows. */

/* a packed weight row: a block's 32 values as bytes, its d and its m */
#define Q4_1_PACKED_BLOCK (32 + 2 * 4)

int gemm_q4_1_amx(void) {
    return amx_granted();
}

/* tile 0: 16 rows of x, one block (32 bytes); tiles 1, 4: a block of 16 weight rows (8 rows of
   4 values by 16 weight rows); tiles 2, 3: 16 x 16 int32 sums */
static const struct tile_config Q4_1_TILES = {
    .palette = 1,
    .colsb = {32, 64, 64, 64, 64},
    .rows = {16, 8, 16, 16, 8},
};

/* weight rows 16 half .. + 16 (row_bytes apart) in AMX's layout: block b's tile (512 bytes) at
   q = out + 512 b, its row g the 16 rows' values 4 g .. 4 g + 4; then, after every block's
   tile, d and m at dm + 32 b (16 d, 16 m) */
static void pack_q4_1(const void *operands, int64_t half, char *out) {
    const struct q4_1_operands *o = operands;
    const int64_t blocks = o->blocks;
    uint8_t *q = (uint8_t *)out;
    float *dm = (float *)(out + 512 * blocks);
    for (int r = 0; r < 16; r++) {
        const uint8_t *row = o->W + (16 * half + r) * o->row_bytes;
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *blk = row + Q4_1_BLOCK_BYTES * b;
            uint8_t v[32];
            _mm256_storeu_si256((__m256i *)v, q4_1_nibbles(blk));
            for (int g = 0; g < 8; g++)
                memcpy(q + 512 * b + 64 * g + 4 * r, v + 4 * g, 4);
            dm[32 * b + r] = half_at(blk);
            dm[32 * b + 16 + r] = half_at(blk + 2);
        }
    }
}

/* x's rows m .. m + rows (xq: K apart, padded to 16 rows) times packed weight rows
   32 g .. + 32 (two halves of 16 as pack_q4_1 lays them out: q0, dm0 and q1, dm1), into Y */
static void q4_1_amx_tile(const void *operands, int64_t m, int64_t rows, int64_t g,
                          const char *packed) {
    const struct q4_1_operands *o = operands;
    const int64_t K = o->K, blocks = o->blocks, n = 32 * g;
    const char *second = packed + 16 * blocks * Q4_1_PACKED_BLOCK;
    const uint8_t *q0 = (const uint8_t *)packed, *q1 = (const uint8_t *)second;
    const float *dm0 = (const float *)(packed + 512 * blocks);
    const float *dm1 = (const float *)(second + 512 * blocks);
    const int8_t *xq = o->xq + m * K;
    const float *xs = o->xs + m * 2 * blocks, *bias = o->bias ? o->bias + n : NULL;
    float *Y = o->Y + m * o->N + n;
    int32_t part[2][16][16];
    vf acc[16][2];
    for (int r = 0; r < 16; r++)
        acc[r][0] = acc[r][1] = vzero();
    for (int64_t b = 0; b < blocks; b++) {
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(0, xq + 32 * b, K);
        _tile_loadd(1, q0 + 512 * b, 64);
        _tile_loadd(4, q1 + 512 * b, 64);
        _tile_dpbsud(2, 0, 1);
        _tile_dpbsud(3, 0, 4);
        _tile_stored(2, part[0], 64);
        _tile_stored(3, part[1], 64);
        const vf d0 = vload(dm0 + 32 * b), d1 = vload(dm1 + 32 * b);
        for (int64_t r = 0; r < rows; r++) {
            vf dx = vset1(xs[r * 2 * blocks + 2 * b]);
            acc[r][0] = vfma(vfloat(iload(part[0][r])), vmul(d0, dx), acc[r][0]);
            acc[r][1] = vfma(vfloat(iload(part[1][r])), vmul(d1, dx), acc[r][1]);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        vf mins0 = vzero(), mins1 = vzero();
        for (int64_t b = 0; b < blocks; b++) {
            vf sx = vset1(xs[r * 2 * blocks + 2 * b + 1]);
            mins0 = vfma(vload(dm0 + 32 * b + 16), sx, mins0);
            mins1 = vfma(vload(dm1 + 32 * b + 16), sx, mins1);
        }
        vf y0 = vadd(acc[r][0], mins0), y1 = vadd(acc[r][1], mins1);
        if (bias)
            y0 = vadd(y0, vload(bias)), y1 = vadd(y1, vload(bias + 16));
        vstore(Y + r * o->N, y0);
        vstore(Y + r * o->N + 16, y1);
    }
}

/* rows 0 .. M of x (xq padded to a multiple of 16 rows) times weight rows 0 .. N - N % 32 on
   the tiles; -1 if it cannot allocate */
static int q4_1_amx_rows(const uint8_t *W, const float *bias, const int8_t *xq, const float *xs,
                         float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    int64_t blocks = K / 32;
    struct q4_1_operands operands = {W, xq, xs, bias, Y, M, N, K, blocks,
                                     blocks * Q4_1_BLOCK_BYTES};
    struct amx_job job = {&operands, M, N / 32, 16 * blocks * Q4_1_PACKED_BLOCK, &Q4_1_TILES,
                          pack_q4_1, q4_1_amx_tile, 16};
    return amx_run(&job, threads);
}
#else
int gemm_q4_1_amx(void) { return 0; }
#endif

/* K a multiple of 32 (the wrapper checks it) */
int gemm_q4_1(const uint8_t *W, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    int64_t blocks = K / 32, row_bytes = blocks * Q4_1_BLOCK_BYTES;
    int8_t *xq = (int8_t *)calloc((size_t)((M + 16) * K), 1);  /* room for a last tile of 16 */
    float *xs = (float *)malloc((size_t)(M * 2 * blocks + 8) * sizeof(float));
    if (!xq || !xs) {
        free(xq), free(xs);
        return -1;
    }
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && M * K > (1 << 16))
    for (int64_t m = 0; m < M; m++)
        round_x(X + m * K, blocks, xq + m * K, xs + m * 2 * blocks);
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
    if (M >= AMX_FROM_ROWS && N >= 32 && gemm_q4_1_amx()) {
        int status = q4_1_amx_rows(W, bias, xq, xs, Y, M, N, K, threads);
        if (status == 0 && N % 32)  /* the last weight rows, as the vector units add them */
            status = gemm_q4_1_groups(W, bias, xq, xs, Y, M, N, K, N - N % 32, threads);
        free(xq), free(xs);
        return status;
    }
#endif
    if (M >= AMX_FROM_ROWS) {
        int status = gemm_q4_1_groups(W, bias, xq, xs, Y, M, N, K, 0, threads);
        free(xq), free(xs);
        return status;
    }
#ifdef __AVX512BW__
    if (M >= Q4_1_TILE_MIN_ROWS) {
        int status = gemm_q4_1_tiles(W, bias, xq, xs, Y, M, N, K, threads);
        free(xq), free(xs);
        return status;
    }
#endif
#if !defined(__AVX512BW__) || (defined(__AVX512VBMI__) && defined(__AVX512VL__))
    int64_t passes = N / Q4_1_PASS;  /* Q4_1_PASS rows a pass share x's loads */
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && N * K > (1 << 17))
    for (int64_t p = 0; p < passes + N % Q4_1_PASS; p++) {
        int64_t n = p < passes ? Q4_1_PASS * p : Q4_1_PASS * passes + (p - passes);
        int R = p < passes ? Q4_1_PASS : 1;
        float y[Q4_1_PASS];
        for (int64_t m = 0; m < M; m++) {
            if (R == Q4_1_PASS)
                q4_1_rows(W + n * row_bytes, row_bytes, Q4_1_PASS, xq + m * K,
                          xs + m * 2 * blocks, blocks, y);
            else
                q4_1_rows(W + n * row_bytes, row_bytes, 1, xq + m * K, xs + m * 2 * blocks,
                          blocks, y);
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
            Y[m * N + n] = dot_q4_1(row, xq + m * K, xs + m * 2 * blocks, blocks) + b;
    }
#endif
    free(xq), free(xs);
    return 0;
}
