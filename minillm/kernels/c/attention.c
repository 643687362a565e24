/* A decode step's attention: one new query per row, over a contiguous KV cache
   (decode_attention, the fast path's fused step) or over a paged pool read through each row's
   block table (paged_scores and paged_values, the engine's decode step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "minillm_kernels.h"
#include "simd.h"

/* Paged attention for a decode step: one new query per row, its keys and values read where they
   lie in the pool (slot = block * block_size + offset), never gathered into a copy.
   Q (B, NKV * G, D): row b's queries, query head h * G + g in key/value head h's group;
   K, V (slots, NKV, D): the pool; slots (B, L): row b's first lens[b] entries are its keys'
   slots, in order; S, P (B, NKV * G, L): scores, probabilities; O (B, NKV * G, D);
   D <= MAX_HEAD_DIM. */
#ifdef __AVX512F__
/* lane i of the result: the sum of v[(i % 4) * 4 + i / 4]'s lanes */
static inline vf hsum_keys(const vf *v) {
    vf a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)
        a[i] = vadd(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                    _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        b[i] = vadd(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                    _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        c[i] = vadd(_mm512_unpacklo_ps(b[2 * i], b[2 * i + 1]),
                    _mm512_unpackhi_ps(b[2 * i], b[2 * i + 1]));
    return vadd(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[0]),
                                                     _mm512_castps_pd(c[1]))),
                _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[0]),
                                                     _mm512_castps_pd(c[1]))));
}
#define KEY_LANE(j) ((((j) & 3) << 2) | ((j) >> 2))
#else
/* lane i of the result: the sum of v[i]'s lanes */
static inline vf hsum_keys(const vf *v) {
    __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
    __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
    __m256 lo = _mm256_hadd_ps(s01, s23), hi = _mm256_hadd_ps(s45, s67);
    return vadd(_mm256_permute2f128_ps(lo, hi, 0x20),
                _mm256_permute2f128_ps(lo, hi, 0x31));
}
#define KEY_LANE(j) (j)
#endif

/* A row's keys are read a chunk of VW slots at a time, every head of a slot together (a slot's
   heads lie side by side: NKV * D floats). The slots of a row's blocks lie anywhere in the pool,
   so the CPU's prefetcher, which follows a stream only within a 4 KB page, cannot see the next
   ones coming: the kernel asks for the next chunk's slots while it computes this one's. */
static inline void prefetch_slots(const float *pool, const int64_t *slot, int64_t t0, int64_t t1,
                                  int64_t row_floats) {
    for (int64_t t = t0; t < t1; t++) {
        const char *p = (const char *)(pool + slot[t] * row_floats);
        for (int64_t off = 0; off < row_floats * (int64_t)sizeof(float); off += 64)
            _mm_prefetch(p + off, _MM_HINT_T0);
    }
}

void paged_scores(const float *Q, const float *K, const int64_t *slots, const int64_t *lens,
                  float *S, int64_t B, int64_t L, int64_t NKV, int64_t G, int64_t D, float scale,
                  int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t b = 0; b < B; b++) {
        const int64_t *slot = slots + b * L, n = lens[b];
        const float *qb = Q + b * NKV * G * D;
        float *sb = S + b * NKV * G * L;
        int64_t t = 0;
        prefetch_slots(K, slot, 0, n < VW ? n : VW, NKV * D);
        for (; t + VW <= n; t += VW) {  /* VW keys' dot products, summed all at once */
            prefetch_slots(K, slot, t + VW, t + 2 * VW < n ? t + 2 * VW : n, NKV * D);
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t g = 0; g < G; g++) {
                    const float *q = qb + (h * G + g) * D;
                    vf acc[VW];
                    for (int j = 0; j < VW; j++)
                        acc[KEY_LANE(j)] = dot_vf(q, K + (slot[t + j] * NKV + h) * D, D);
                    float *st = sb + (h * G + g) * L + t;
                    vstore(st, vmul(hsum_keys(acc), vset1(scale)));
                    if (D % VW)
                        for (int j = 0; j < VW; j++)
                            st[j] += dot_tail(q, K + (slot[t + j] * NKV + h) * D, D) * scale;
                }
        }
        for (; t < n; t++)
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t g = 0; g < G; g++)
                {
                    const float *q = qb + (h * G + g) * D, *k = K + (slot[t] * NKV + h) * D;
                    sb[(h * G + g) * L + t] = (vsum(dot_vf(q, k, D)) + dot_tail(q, k, D)) * scale;
                }
        for (int64_t i = 0; i < NKV * G; i++)
            for (int64_t u = n; u < L; u++)
                sb[i * L + u] = -INFINITY;
    }
}

/* o += sum over t0 <= t < t1 of p[t] * V[slot[t]][h] (D at most MAX_HEAD_DIM) */
static inline void weighted_values(const float *p, const float *V, const int64_t *slot,
                                   int64_t t0, int64_t t1, int64_t NKV, int64_t h, float *o,
                                   const int64_t D) {
    vf acc[MAX_HEAD_DIM / VW];
    for (int64_t i = 0; i < D / VW; i++)
        acc[i] = vload(o + i * VW);
    for (int64_t t = t0; t < t1; t++) {
        const float *v = V + (slot[t] * NKV + h) * D;
        vf w = vset1(p[t]);
        for (int64_t i = 0; i < D / VW; i++)
            acc[i] = vfma(w, vload(v + i * VW), acc[i]);
        for (int64_t d = D - D % VW; d < D; d++)
            o[d] += p[t] * v[d];
    }
    for (int64_t i = 0; i < D / VW; i++)
        vstore(o + i * VW, acc[i]);
}

void paged_values(const float *P, const float *V, const int64_t *slots, const int64_t *lens,
                  float *O, int64_t B, int64_t L, int64_t NKV, int64_t G, int64_t D, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t b = 0; b < B; b++) {
        const int64_t *slot = slots + b * L, n = lens[b];
        float *ob = O + b * NKV * G * D;
        memset(ob, 0, (size_t)(NKV * G * D) * sizeof(float));
        prefetch_slots(V, slot, 0, n < 16 ? n : 16, NKV * D);
        for (int64_t t = 0; t < n; t += 16) {
            int64_t t1 = t + 16 < n ? t + 16 : n;
            prefetch_slots(V, slot, t1, t1 + 16 < n ? t1 + 16 : n, NKV * D);
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t g = 0; g < G; g++) {
                    const float *p = P + (b * NKV * G + h * G + g) * L;
                    float *o = ob + (h * G + g) * D;
                    if (D == 64)  /* a constant size: the accumulators stay in registers */
                        weighted_values(p, V, slot, t, t1, NKV, h, o, 64);
                    else if (D == 128)
                        weighted_values(p, V, slot, t, t1, NKV, h, o, 128);
                    else
                        weighted_values(p, V, slot, t, t1, NKV, h, o, D);
                }
        }
    }
}

/* o = sum over t < n of p[t] * v[t] (rows of D <= MAX_HEAD_DIM floats, one after another),
   times norm */
static inline void values_in_order(const float *p, const float *v, int64_t n, float norm,
                                   float *o, const int64_t D) {
    vf acc[MAX_HEAD_DIM / VW];
    float rest[VW];
    for (int64_t i = 0; i < D / VW; i++)
        acc[i] = vzero();
    for (int64_t d = 0; d < D % VW; d++)
        rest[d] = 0.0f;
    for (int64_t t = 0; t < n; t++, v += D) {
        vf w = vset1(p[t]);
        for (int64_t i = 0; i < D / VW; i++)
            acc[i] = vfma(w, vload(v + i * VW), acc[i]);
        for (int64_t d = 0; d < D % VW; d++)
            rest[d] += p[t] * v[D - D % VW + d];
    }
    for (int64_t i = 0; i < D / VW; i++)
        vstore(o + i * VW, vmul(acc[i], vset1(norm)));
    for (int64_t d = 0; d < D % VW; d++)
        o[D - D % VW + d] = rest[d] * norm;
}

/* Attention of one new query per row over a contiguous KV cache: Q (B, NKV * G, D), query head
   h * G + g in key/value head h's group; K, V (B, NKV, T, D) of which the first n positions are
   filled; O (B, NKV * G, D). Returns -1 (computing nothing) when it cannot allocate the
   scores. */
int decode_attention(const float *Q, const float *K, const float *V, float *O, int64_t B,
                     int64_t NKV, int64_t G, int64_t T, int64_t n, int64_t D, float scale,
                     int threads) {
    float *scores = (float *)malloc((size_t)(B * NKV * n) * sizeof(float));
    if (!scores)
        return -1;
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && B * NKV > 1 && n * D > 4096)
    for (int64_t bh = 0; bh < B * NKV; bh++) {
        const float *k = K + bh * T * D, *v = V + bh * T * D;
        float *p = scores + bh * n;
        for (int64_t g = 0; g < G; g++) {
            const float *q = Q + (bh * G + g) * D;
            float *o = O + (bh * G + g) * D;
            float top = -INFINITY, total = 0.0f;
            for (int64_t t = 0; t < n; t++) {
                p[t] = (vsum(dot_vf(q, k + t * D, D)) + dot_tail(q, k + t * D, D)) * scale;
                top = p[t] > top ? p[t] : top;
            }
            for (int64_t t = 0; t < n; t++)
                total += (p[t] = expf(p[t] - top));
            if (D == 64)  /* a constant size: the accumulators stay in registers */
                values_in_order(p, v, n, 1.0f / total, o, 64);
            else
                values_in_order(p, v, n, 1.0f / total, o, D);
        }
    }
    free(scores);
    return 0;
}
