/* A decode step's RMSNorm. At one row its arithmetic is a few thousand operations, and
   PyTorch's general kernels spend tens of microseconds on each call (an RMSNorm of 576 values:
   ~30 us), sixty-one times a token. */
#include <math.h>

#include "minillm_kernels.h"
#include "simd.h"

/* Y[r] = X[r] / sqrt(mean(X[r]^2) + eps) * w, rows of D floats */
void rms_norm_f32(const float *X, const float *w, float *Y, int64_t rows, int64_t D, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *x = X + r * D;
        float *y = Y + r * D;
        float squares = vsum(dot_vf(x, x, D)) + dot_tail(x, x, D);
        float inv = 1.0f / sqrtf(squares / (float)D + eps);
        vf s = vset1(inv);
        int64_t d = 0;
        for (; d + VW <= D; d += VW)
            vstore(y + d, vmul(vmul(vload(x + d), s), vload(w + d)));
        for (; d < D; d++)
            y[d] = x[d] * inv * w[d];
    }
}
