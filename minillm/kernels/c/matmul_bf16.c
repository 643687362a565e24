/* bfloat16 weights in the (out, in) layout times one float32 row. A bf16 is the top half of a
   float32: shifted left by 16 it is one, so each weight is widened in registers and the bytes
   read are half of float32's. On CPUs without bf16 arithmetic PyTorch multiplies bf16 matrices
   in a slow generic loop. */
#include <string.h>

#include "minillm_kernels.h"
#include "simd.h"

void gemv_bf16(const uint16_t *W, const float *x, float *y, int64_t N, int64_t K, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = W + n * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i w0 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k))), 16);
            __m256i w1 = _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + k + 8))), 16);
            a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(w0), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(w1), _mm256_loadu_ps(x + k + 8), a1);
        }
        float total = vsum8(_mm256_add_ps(a0, a1));
        for (; k < K; k++) {
            uint32_t bits = (uint32_t)row[k] << 16;
            float w;
            memcpy(&w, &bits, 4);
            total += w * x[k];
        }
        y[n] = total;
    }
}
