/* A decode step's SiLU(gate) * up in one call, gate and up side by side in the fused
   projection's output (PyTorch: a SiLU, a multiply and the slicing around them). */
#include <math.h>

#include "minillm_kernels.h"

void silu_mul_f32(const float *GU, float *Y, int64_t B, int64_t F) {
    for (int64_t b = 0; b < B; b++) {
        const float *gate = GU + b * 2 * F, *up = gate + F;
        float *y = Y + b * F;
        for (int64_t i = 0; i < F; i++)
            y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    }
}
