/* A decode step's SiLU(gate) * up in one call, gate and up side by side in the fused
   projection's output (PyTorch: a SiLU, a multiply and the slicing around them).

   It computes what PyTorch's CPU kernels compute, to the bit: SiLU(x) = x / (1 + exp(-x)),
   exp as SLEEF's expf_u10 evaluates it (PyTorch's vectorized exp on x86-64: a reduction by
   ln 2, a polynomial in fused multiply-adds, a scale by 2^q) over whole chunks of two vectors
   and as the C library's expf after them (PyTorch's scalar loop), then one rounded product
   with up. Greedy tokens must not depend on whether the kernels are built, and a last-bit
   difference fed to the int8 rounding of the next layer's input can change them. So each
   multiply-add SLEEF fuses is an explicit vfma, and no product here feeds an add the
   compiler could fuse it into (tests/test_kernels_small_ops.py holds the bits equal). */
#include <math.h>

#include "minillm_kernels.h"
#include "simd.h"

#define LOG2E 1.442695040888963407359924681001892137426645954152985934f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.428606765330187045e-06f
#define C5 0.000198527617612853646278381f
#define C4 0.00139304355252534151077271f
#define C3 0.00833336077630519866943359f
#define C2 0.0416664853692054748535156f
#define C1 0.166666671633720397949219f

/* the names at one width: P the intrinsics' prefix, S the integer register's suffix */
#define VQ_NAMES(P, S)                                                                    \
    static inline vq vround(vf x) { return P##_cvtps_epi32(x); } /* nearest, ties even */ \
    static inline vf vpow2i(vq q) {                                                       \
        vq biased = P##_add_epi32(q, P##_set1_epi32(0x7f));                               \
        return P##_cast##S##_ps(P##_slli_epi32(biased, 23));                              \
    }                                                                                     \
    static inline vq vhalf(vq q) { return P##_srai_epi32(q, 1); }                         \
    static inline vq vsubq(vq a, vq b) { return P##_sub_epi32(a, b); }                    \
    static inline vf vdiv(vf a, vf b) { return P##_div_ps(a, b); }
#ifdef __AVX512F__
typedef __m512i vq;
VQ_NAMES(_mm512, si512)
static inline vf vwhere_lt(vf a, vf b, vf then, vf other) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), other, then);
}
#else
typedef __m256i vq;
VQ_NAMES(_mm256, si256)
static inline vf vwhere_lt(vf a, vf b, vf then, vf other) {
    return _mm256_blendv_ps(other, then, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
#endif

/* exp_u10 on VW lanes at once, the same operations */
static inline vf vexp_u10(vf d) {
    vq q = vround(vmul(d, vset1(LOG2E)));
    vf qf = vfloat(q);
    vf s = vfma(qf, vset1(-LN2_HI), d);
    s = vfma(qf, vset1(-LN2_LO), s);
    vf u = vset1(C5);
    u = vfma(u, s, vset1(C4));
    u = vfma(u, s, vset1(C3));
    u = vfma(u, s, vset1(C2));
    u = vfma(u, s, vset1(C1));
    u = vfma(u, s, vset1(0.5f));
    u = vadd(vset1(1.0f), vfma(vmul(s, s), u, s));
    u = vmul(vmul(u, vpow2i(vhalf(q))), vpow2i(vsubq(q, vhalf(q))));
    u = vwhere_lt(d, vset1(-104.0f), vzero(), u);
    return vwhere_lt(vset1(100.0f), d, vset1(INFINITY), u);
}

void silu_mul_f32(const float *GU, float *Y, int64_t B, int64_t F, int threads) {
    /* PyTorch's loop: SLEEF's exp over chunks of two vectors, then the C library's expf for
       what is left of the row; a prompt's many rows split between `threads` */
    int64_t vectors = F - F % (2 * VW);
    #pragma omp parallel for schedule(static) num_threads(threads) if (B * F > (1 << 15))
    for (int64_t b = 0; b < B; b++) {
        const float *gate = GU + b * 2 * F, *up = gate + F;
        float *y = Y + b * F;
        int64_t i = 0;
        for (; i < vectors; i += VW) {
            vf g = vload(gate + i);
            vf e = vexp_u10(vmul(g, vset1(-1.0f)));  /* -g, exactly */
            vstore(y + i, vmul(vdiv(g, vadd(vset1(1.0f), e)), vload(up + i)));
        }
        for (; i < F; i++) {
            float silu = gate[i] / (1.0f + expf(-gate[i]));
            y[i] = silu * up[i];
        }
    }
}
