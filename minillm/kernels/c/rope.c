/* A decode step's RoPE and cache write in one call. PyTorch spends several small operations per
   layer on them (the rotation's multiplies and adds, then a copy of k and one of v into the
   cache), each costing more per call than its arithmetic at one row.

   It rounds as apply_rope does in PyTorch's CPU kernels, to the bit: x cos rounded, then the
   other product added to it in one fused multiply-add (PyTorch's addcmul, as its build
   compiles it). Greedy tokens must not depend on whether the kernels are built, and a
   last-bit difference fed to the int8 rounding of the next layer's input can change them. */
#include <math.h>

#include "minillm_kernels.h"

/* y = x rotated by position pos's angles, as minillm.layers.rope.apply_rope: pair (i, i + D/2)
   turns, y[i] = x[i] cos[i] - x[i + D/2] sin[i], y[i + D/2] = x[i + D/2] cos[i + D/2]
   + x[i] sin[i + D/2], each product with cos rounded before the other is added */
static inline void rotate(const float *x, const float *cos, const float *sin, float *y,
                          int64_t D) {
    int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) {
        float lo = x[i], hi = x[i + h];
        y[i] = fmaf(-hi, sin[i], lo * cos[i]);
        y[i + h] = fmaf(lo, sin[i + h], hi * cos[i + h]);
    }
}

void rope_write_cache(const float *QKV, const float *cos, const float *sin, float *Q, float *K,
                      float *V, int64_t B, int64_t NQ, int64_t NKV, int64_t T, int64_t pos,
                      int64_t D) {
    for (int64_t b = 0; b < B; b++) {
        const float *row = QKV + b * (NQ + 2 * NKV) * D;
        for (int64_t h = 0; h < NQ; h++)
            rotate(row + h * D, cos, sin, Q + (b * NQ + h) * D, D);
        for (int64_t h = 0; h < NKV; h++) {
            int64_t at = ((b * NKV + h) * T + pos) * D;
            rotate(row + (NQ + h) * D, cos, sin, K + at, D);
            const float *v = row + (NQ + NKV + h) * D;
            for (int64_t d = 0; d < D; d++)
                V[at + d] = v[d];
        }
    }
}
