/* The register tile of gemm_f32 and gemm_bf16: Y = X W (+ bias) for one strip of at most
   GEMM_COLS columns, W float32 read a row (GEMM_COLS floats) at a time, (in, out) order.
   The strip is cut into tiles of GEMM_ROWS rows of X whose sums stay in registers (24 vectors
   with AVX-512, 12 with AVX2) while the strip of W goes by: each weight loaded is used
   GEMM_ROWS times. Each sum adds its products in k's order, from the bias (or zero). */
#ifndef MINILLM_GEMM_TILE_H
#define MINILLM_GEMM_TILE_H

#include <stdlib.h>

#include "simd.h"

#ifdef __AVX512F__
#define GEMM_ROWS 8
#else
#define GEMM_ROWS 4
#endif
#define GEMM_VECS 3
#define GEMM_COLS (GEMM_VECS * VW)

/* rows x vecs vectors of Y from rows k0..k1 of W: W, bias and Y point at the tile's first
   column; W's rows are ldw floats apart, X's ldx, Y's ldy. With k0 > 0 the sums go on from Y. */
static inline __attribute__((always_inline)) void gemm_tile(
        const float *W, int64_t ldw, const float *X, int64_t ldx, const float *bias, float *Y,
        int64_t ldy, int64_t k0, int64_t k1, const int rows, const int vecs) {
    vf acc[GEMM_ROWS][GEMM_VECS];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < vecs; j++)
            acc[r][j] = k0 ? vload(Y + r * ldy + j * VW)
                           : bias ? vload(bias + j * VW) : vzero();
    const float *w = W + k0 * ldw;
    for (int64_t k = k0; k < k1; k++, w += ldw) {
        vf wk[GEMM_VECS];
        for (int j = 0; j < vecs; j++)
            wk[j] = vload(w + j * VW);
        for (int r = 0; r < rows; r++) {
            vf xr = vset1(X[r * ldx + k]);
            for (int j = 0; j < vecs; j++)
                acc[r][j] = vfma(xr, wk[j], acc[r][j]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < vecs; j++)
            vstore(Y + r * ldy + j * VW, acc[r][j]);
}

/* gemm_tile with its sizes known to the compiler, so that its sums are registers */
#define GEMM_TILE(R, V) gemm_tile(W, ldw, X, ldx, bias, Y, ldy, k0, k1, R, V)
#define GEMM_TILE_VECS(R) \
    do { if (vecs == 3) GEMM_TILE(R, 3); else if (vecs == 2) GEMM_TILE(R, 2); \
         else if (vecs == 1) GEMM_TILE(R, 1); } while (0)
static void gemm_tile_of(const float *W, int64_t ldw, const float *X, int64_t ldx,
                         const float *bias, float *Y, int64_t ldy, int64_t k0, int64_t k1,
                         int rows, int vecs) {
    switch (rows) {
    case 1: GEMM_TILE_VECS(1); break;
    case 2: GEMM_TILE_VECS(2); break;
    case 3: GEMM_TILE_VECS(3); break;
#if GEMM_ROWS == 8
    case 4: GEMM_TILE_VECS(4); break;
    case 5: GEMM_TILE_VECS(5); break;
    case 6: GEMM_TILE_VECS(6); break;
    case 7: GEMM_TILE_VECS(7); break;
#endif
    default: GEMM_TILE_VECS(GEMM_ROWS); break;
    }
}

/* all M rows of X times one strip of `width` (<= GEMM_COLS) columns, rows k0..k1 of W (the
   pointers as gemm_tile's); the last columns, fewer than a vector, one at a time */
static void gemm_strip(const float *W, int64_t ldw, const float *X, int64_t ldx,
                       const float *bias, float *Y, int64_t ldy, int64_t M, int64_t width,
                       int64_t k0, int64_t k1) {
    int vecs = (int)(width / VW);
    for (int64_t m = 0; m < M; m += GEMM_ROWS) {
        int rows = M - m < GEMM_ROWS ? (int)(M - m) : GEMM_ROWS;
        gemm_tile_of(W, ldw, X + m * ldx, ldx, bias, Y + m * ldy, ldy, k0, k1, rows, vecs);
        for (int64_t c = vecs * VW; c < width; c++)
            for (int64_t r = m; r < m + rows; r++) {
                float total = k0 ? Y[r * ldy + c] : bias ? bias[c] : 0.0f;
                for (int64_t k = k0; k < k1; k++)
                    total += X[r * ldx + k] * W[k * ldw + c];
                Y[r * ldy + c] = total;
            }
    }
}

/* A strip of W reaching its panel: columns n .. n + width (<= GEMM_COLS) of W's N, every k,
   laid out as K rows of GEMM_COLS floats */
typedef void (*panel_fill)(const void *W, int64_t n, int64_t N, int64_t K, int64_t width,
                           float *panel);

/* Y = X W (+ bias) for M rows (Y's rows ldy apart): W's N columns in strips of GEMM_COLS, each
   thread taking its share of strips, each strip filled into the thread's panel (K * GEMM_COLS
   floats, in L2) and multiplied by gemm_strip from there. 0, or -1 (Y incomplete) when a thread
   cannot allocate its panel. */
static int gemm_panels(const void *W, panel_fill fill, const float *bias, const float *X,
                       float *Y, int64_t ldy, int64_t M, int64_t N, int64_t K, int threads) {
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
            fill(W, n, N, K, width, panel);
            gemm_strip(panel, GEMM_COLS, X, K, bias ? bias + n : NULL, Y + n, ldy, M, width, 0,
                       K);
        }
        free(panel);
    }
    return failed ? -1 : 0;
}

#endif
