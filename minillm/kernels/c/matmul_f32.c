/* Float32 weights in the (in, out) layout times one row (gemv_f32) or several (gemm_f32). */
#include <stdlib.h>
#include <string.h>

#include "minillm_kernels.h"
#include "gemm_tile.h"
#include "simd.h"

/* y[n] = sum_k x[k] * W[k][n] (+ bias[n]); W float32, row-major (K, N): the (in, out) layout.
   Sixteen rows of W are streamed at a time, in memory order, each times its x[k], summed into
   four accumulators and added to y once: y (N floats) stays in the L1 cache, so the only stream
   from memory is W's, which the CPU's prefetcher follows. Columns are split between threads. */
#define F32_ROWS 16
static void gemv_f32_columns(const float *W, const float *x, float *y, int64_t N, int64_t K,
                             int64_t n0, int64_t n1) {
    int64_t k = 0;
    for (; k + F32_ROWS <= K; k += F32_ROWS) {
        const float *w = W + k * N;
        vf xs[F32_ROWS];
        for (int i = 0; i < F32_ROWS; i++)
            xs[i] = vset1(x[k + i]);
        int64_t n = n0;
        for (; n + VW <= n1; n += VW) {
            vf a = vmul(xs[0], vload(w + n)), b = vmul(xs[1], vload(w + N + n));
            vf c = vmul(xs[2], vload(w + 2 * N + n)), d = vmul(xs[3], vload(w + 3 * N + n));
            for (int i = 4; i < F32_ROWS; i += 4) {
                a = vfma(xs[i], vload(w + i * N + n), a);
                b = vfma(xs[i + 1], vload(w + (i + 1) * N + n), b);
                c = vfma(xs[i + 2], vload(w + (i + 2) * N + n), c);
                d = vfma(xs[i + 3], vload(w + (i + 3) * N + n), d);
            }
            vstore(y + n, vadd(vload(y + n), vadd(vadd(a, b), vadd(c, d))));
        }
        for (; n < n1; n++) {
            float total = 0.0f;
            for (int i = 0; i < F32_ROWS; i++)
                total += x[k + i] * w[i * N + n];
            y[n] += total;
        }
    }
    for (; k < K; k++)
        for (int64_t n = n0; n < n1; n++)
            y[n] += x[k] * W[k * N + n];
}

void gemv_f32(const float *W, const float *bias, const float *x, float *y, int64_t N, int64_t K,
              int threads) {
    /* one strip of columns per thread, as wide as it can be: each row of a strip is one run of
       memory, and the wider the runs the better the prefetcher streams them */
    int64_t parts = threads > 1 && N >= 512 ? threads : 1;
    int64_t width = ((N + parts - 1) / parts + VW - 1) / VW * VW;
    #pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        int64_t n0 = p * width, n1 = n0 + width < N ? n0 + width : N;
        for (int64_t n = n0; n < n1; n++)
            y[n] = bias ? bias[n] : 0.0f;
        if (n0 < n1)
            gemv_f32_columns(W, x, y, N, K, n0, n1);
    }
}

/* Y = X W (+ bias) for a few rows: X (M, K), W (K, N) float32 row-major (the (in, out) layout),
   Y (M, N). The work is cut into gemm_tile.h's tiles of GEMM_ROWS rows by GEMM_COLS columns of
   Y, whose sums stay in registers while the tile's strip of W goes by, one row of W
   (GEMM_COLS floats) per step: each weight loaded is used GEMM_ROWS times, so for a
   decode batch of 8-16 rows the multiply is bound by arithmetic, not by reading W.
   With AVX-512 it is the only float32 multiply minillm uses on a CPU (docs/benchmarks.md has
   it against PyTorch's by row count; with AVX2 it takes up to 8 rows, dispatch.py). A strip
   of W is read down its column, a jump of N floats per row of W. With few rows of X the
   arithmetic is too short to hide those jumps, so the strip is taken GEMM_SPAN rows of W at a
   time, the next strip's span after it, and the sums go back to Y between spans (Y is small:
   it stays in cache). */
#define GEMM_SPAN 16
/* From this many rows of X each strip of W is first copied into a panel (K rows of GEMM_COLS
   floats, one run of memory, in L2): the tiles then read it in order instead of jumping N
   floats at each k, which the prefetcher does not follow across a prompt's many tiles. */
#define GEMM_PANEL_ROWS 9

static void copy_strip(const void *W, int64_t n, int64_t N, int64_t K, int64_t width,
                       float *panel) {
    const float *strip = (const float *)W + n;
    for (int64_t k = 0; k < K; k++)
        memcpy(panel + k * GEMM_COLS, strip + k * N, (size_t)width * sizeof(float));
}

int gemm_f32(const float *W, const float *bias, const float *X, float *Y, int64_t M, int64_t N,
             int64_t K, int threads) {
    if (M >= GEMM_PANEL_ROWS)
        return gemm_panels(W, copy_strip, bias, X, Y, N, M, N, K, threads);
    int64_t tiles = (N + GEMM_COLS - 1) / GEMM_COLS;
    int64_t parts = threads > 1 && tiles > 1 ? threads : 1, per = (tiles + parts - 1) / parts;
    /* spans pay on one thread; threads sharing the columns were measured faster without them */
    int64_t span = M <= GEMM_ROWS && parts == 1 ? GEMM_SPAN : K;
    #pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        int64_t t1 = (p + 1) * per < tiles ? (p + 1) * per : tiles;
        for (int64_t k0 = 0; k0 < K; k0 += span)
            for (int64_t t = p * per; t < t1; t++) {
                int64_t n = t * GEMM_COLS, width = N - n < GEMM_COLS ? N - n : GEMM_COLS;
                int64_t k1 = k0 + span < K ? k0 + span : K;
                gemm_strip(W + n, N, X, K, bias ? bias + n : NULL, Y + n, N, M, width, k0, k1);
            }
    }
    return 0;
}
