/* A decode step's SiLU(gate) * up in one call, gate and up side by side in the fused
   projection's output (PyTorch: a SiLU, a multiply and the slicing around them).

   It computes what PyTorch's CPU kernels compute, to the bit: SiLU(x) = x / (1 + exp(-x)),
   exp as SLEEF's expf_u10 evaluates it (PyTorch's vectorized exp on x86-64: a reduction by
   ln 2, a polynomial in fused multiply-adds, a scale by 2^q), then one rounded product with
   up. Greedy tokens must not depend on whether the kernels are built, and a last-bit
   difference fed to the int8 rounding of the next layer's input can change them. So no other
   multiply-add here may be fused by the compiler. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "minillm_kernels.h"

static inline float pow2i(int32_t q) {
    int32_t bits = (q + 0x7f) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* SLEEF's xexpf (sleefsimdsp.c), one lane */
static inline float exp_u10(float d) {
    int32_t q = (int32_t)rintf(d * 1.442695040888963407359924681001892137426645954152985934f);
    float s = fmaf((float)q, -0.693145751953125f, d);
    s = fmaf((float)q, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmaf(u, s, 0.00139304355252534151077271f);
    u = fmaf(u, s, 0.00833336077630519866943359f);
    u = fmaf(u, s, 0.0416664853692054748535156f);
    u = fmaf(u, s, 0.166666671633720397949219f);
    u = fmaf(u, s, 0.5f);
    u = 1.0f + fmaf(s * s, u, s);
    u = u * pow2i(q >> 1) * pow2i(q - (q >> 1));
    if (d < -104.0f)
        u = 0.0f;
    if (d > 100.0f)
        u = INFINITY;
    return u;
}

void silu_mul_f32(const float *GU, float *Y, int64_t B, int64_t F) {
    for (int64_t b = 0; b < B; b++) {
        const float *gate = GU + b * 2 * F, *up = gate + F;
        float *y = Y + b * F;
        for (int64_t i = 0; i < F; i++) {
            float silu = gate[i] / (1.0f + exp_u10(-gate[i]));
            y[i] = silu * up[i];
        }
    }
}
