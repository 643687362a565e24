"""minillm's CPU kernels: a float32, a bf16, an int8 and a GGUF Q4_1 weight matrix times float32
rows, a decode step's RMSNorm and attention, and attention read in place from a paged KV pool.

Decoding multiplies one row (or a few) by every weight matrix, so a decode step's time is the
time to read the weights. The weight kernels read each narrow weight once and multiply it in
registers (widened to float32, or as an integer against x rounded to int16 (int8 kernel) or to
int8 per block of 32 (Q4_1, as llama.cpp does)), so the bytes read shrink and the speed follows.

- `gemv_f32`: float32 weights in the (in, out) layout, one row of x: sixteen weight rows streamed
  at a time in memory order while the output stays in the L1 cache. On the course machine it
  reads SmolLM2's weights at 22 GB/s against 16.5 for PyTorch's (MKL's) matrix-vector product,
  24 against 33 ms a token.
- `gemm_f32`: the same float32 weights times several rows (a batched decode step, a prompt):
  tiles of 8 rows by 48 columns whose sums stay in registers, so each weight loaded serves 8
  rows and thin products are bound by arithmetic, not by the read. On the course machine, over
  SmolLM2's layers on one thread: 59.6 GFLOP/s at 16 rows against 40.6 for PyTorch's multiply,
  100.6 against 90.9 at 512 rows (scripts/bench_gemm_f32.py).
- `gemv_bf16`: bf16 weights. A bf16 is the top half of a float32: shift left by 16. On CPUs
  without bf16 arithmetic PyTorch multiplies bf16 matrices in a slow generic loop.
- `gemm_int8`: int8 weights with one float32 scale per output row (minillm.quant.int8), for up
  to a few rows of x at once (a batched decode step); each weight row is read from memory once
  and from the CPU's cache for the other rows. The maintained int8 kernels measured on the
  course machine were each either slower than float32 (torchao 0.18's int8 weight-only and
  dynamic configs, PyTorch's `_weight_int8pack_mm`) or less accurate (fbgemm's dynamic kernel
  quantizes the activations too: +1.9% perplexity at batch 1, +234% over whole prompts),
  which is why minillm has its own.
- `gemm_q4_1`: the course model file's own 4-bit blocks (GGUF Q4_1: 32 weights, a float16
  scale d and minimum m), read as they lie in the file: weight = q * d + m. The same bytes
  llama.cpp reads, about a sixth of float32's. Like llama.cpp's, it rounds x to int8 per block of
  32 and multiplies the 4-bit q by it in integers, d and m applied once a block: fewer
  instructions per weight than widening each to float, perplexity within 1% of float32
  (tests/test_quant_gguf.py).
- `rms_norm`, `decode_attention`: a decode step's RMSNorm and its attention over the contiguous
  KV cache, for the fast path's fused decode step (fast/decode.py). Their arithmetic is small;
  PyTorch's general kernels cost tens of microseconds a call on tiny tensors, 61 norms and 30
  attentions a token: replacing them took int8's time per token in `python -m minillm bench
  latency` from 15.7 to 11.9 ms here.
- `paged_decode_attention`: a decode step's attention over the engine's paged KV pool (chapter
  06), each row's keys and values read where they lie through its block table instead of being
  gathered into a copy first (the copy cost as much as the attention: 2.2 against 0.65 ms a layer
  for 16 rows of about 420 tokens on the course machine).

It is C with AVX2 (and AVX-512 where the CPU has it), compiled on first use with the system's
C compiler (`cc`) into minillm's cache folder and called through ctypes. Where there is no
compiler, no x86-64 AVX2 CPU, or the compile fails, `load()` returns None and minillm uses
PyTorch's own kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = r"""
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX512F__
#define VW 16
typedef __m512 vf;
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float v) { return _mm512_set1_ps(v); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline void vstore(float *p, vf a) { _mm512_storeu_ps(p, a); }
static inline float vsum(vf a) { return _mm512_reduce_add_ps(a); }
#else
#define VW 8
typedef __m256 vf;
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float v) { return _mm256_set1_ps(v); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline void vstore(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline float vsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_hadd_ps(s, s));
}
#endif

/* GGUF's Q4_1: a row is K/32 blocks of 20 bytes: d and m (float16), then 16 bytes whose low
   nibbles are weights 0..15 and high nibbles weights 16..31; weight = q * d + m.
   Like llama.cpp, the kernel multiplies integers: each block of 32 values of x is rounded to
   int8 with its own scale (dx = max|x| / 127), so a block's sum of q * x is an integer dot
   product of 4-bit and 8-bit numbers (vpmaddubsw, or AVX-512 VNNI's vpdpbusd, 32 or 64 at a
   time) times d * dx; the m part needs only the block's sum of x, kept exact in float32. */
#define Q4_1_BLOCK 20
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

static float dot_q4_1(const uint8_t *row, const int8_t *xq, const float *dx, const float *sx,
                      int64_t blocks) {
    float mins = 0.0f;
    int64_t b = 0;
#ifdef __AVX512BW__
    __m512 acc = _mm512_setzero_ps();
    for (; b + 2 <= blocks; b += 2) {  /* two blocks a step: 64 weights in one register */
        const uint8_t *b0 = row + Q4_1_BLOCK * b, *b1 = b0 + Q4_1_BLOCK;
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(q4_1_nibbles(b0)),
                                       q4_1_nibbles(b1), 1);
        __m512i x = _mm512_loadu_si512((const void *)(xq + 32 * b));
#ifdef __AVX512VNNI__
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
#else
        __m512i dot = _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1));
#endif
        __m512 scale = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(half_at(b0) * dx[b]),
                                            _mm512_set1_ps(half_at(b1) * dx[b + 1]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
        mins += half_at(b0 + 2) * sx[b] + half_at(b1 + 2) * sx[b + 1];
    }
    float total = _mm512_reduce_add_ps(acc);
#else
    float total = 0.0f;
#endif
    __m256 acc8 = _mm256_setzero_ps();
    for (; b < blocks; b++) {  /* one block a step: 32 weights */
        const uint8_t *blk = row + Q4_1_BLOCK * b;
        __m256i pairs = _mm256_maddubs_epi16(q4_1_nibbles(blk),
                                             _mm256_loadu_si256((const __m256i *)(xq + 32 * b)));
        __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
        acc8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(half_at(blk) * dx[b]),
                               acc8);
        mins += half_at(blk + 2) * sx[b];
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc8), _mm256_extractf128_ps(acc8, 1));
    s = _mm_hadd_ps(s, s);
    return total + _mm_cvtss_f32(_mm_hadd_ps(s, s)) + mins;
}

/* Y[m][n] = sum_k W[n][k] * X[m][k] (+ bias[n]), W in Q4_1 blocks, row-major (N, K / 32 blocks),
   K a multiple of 32; X (M, K) and Y (M, N) float32. Returns -1 (computing nothing) when it
   cannot allocate the rounded copy of X. */
int gemm_q4_1(const uint8_t *W, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    int64_t blocks = K / 32;
    int8_t *xq = (int8_t *)malloc((size_t)(M * K));
    float *dx = (float *)malloc((size_t)(M * blocks) * sizeof(float));
    float *sx = (float *)malloc((size_t)(M * blocks) * sizeof(float));
    if (!xq || !dx || !sx) {
        free(xq), free(dx), free(sx);
        return -1;
    }
    for (int64_t i = 0; i < M * blocks; i++) {
        const float *x = X + 32 * i;
        float big = 0.0f, sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            big = fabsf(x[j]) > big ? fabsf(x[j]) : big;
            sum += x[j];
        }
        dx[i] = big / 127.0f;
        sx[i] = sum;
        float inv = big > 0.0f ? 127.0f / big : 0.0f;
        for (int j = 0; j < 32; j++)
            xq[32 * i + j] = (int8_t)lrintf(x[j] * inv);
    }
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 17))
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = W + n * blocks * Q4_1_BLOCK;
        float b = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++)
            Y[m * N + n] = dot_q4_1(row, xq + m * K, dx + m * blocks, sx + m * blocks, blocks) + b;
    }
    free(xq), free(dx), free(sx);
    return 0;
}

/* The int8 kernel multiplies integers: each row of x is first rounded to int16 with its own
   scale (s_x = max|x| / 32767: a relative error near 1e-5, far below the int8 weights' own),
   then pairs of int8 weights (widened to int16) and int16 activations are multiplied and added
   into int32 (vpmaddwd, or AVX-512 VNNI's vpdpwssd), 32 (AVX-512) or 16 (AVX2) at a time: half
   the instructions of widening every weight to float. The int32 sum times s_x * scale[n] is the
   row's result. Rows of up to 32,768 values keep the int32 sums from overflowing. */
#ifdef __AVX512BW__
#define IW 32
typedef __m512i vi;
static inline vi wide8(const int8_t *p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p)); }
static inline vi ld16(const int16_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline vi izero(void) { return _mm512_setzero_si512(); }
static inline int32_t isum(vi a) { return _mm512_reduce_add_epi32(a); }
static inline vi iadd(vi a, vi b) { return _mm512_add_epi32(a, b); }
#ifdef __AVX512VNNI__
static inline vi dot16(vi acc, vi w, vi x) { return _mm512_dpwssd_epi32(acc, w, x); }
#else
static inline vi dot16(vi acc, vi w, vi x) { return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x)); }
#endif
#else
#define IW 16
typedef __m256i vi;
static inline vi wide8(const int8_t *p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)); }
static inline vi ld16(const int16_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline vi izero(void) { return _mm256_setzero_si256(); }
static inline vi iadd(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline int32_t isum(vi a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_hadd_epi32(s, s);
    return _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
}
static inline vi dot16(vi acc, vi w, vi x) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x)); }
#endif

static inline int32_t dot_int8_int16(const int8_t *w, const int16_t *x, int64_t K) {
    vi a0 = izero(), a1 = izero();
    int64_t k = 0;
    for (; k + 2 * IW <= K; k += 2 * IW) {
        a0 = dot16(a0, wide8(w + k), ld16(x + k));
        a1 = dot16(a1, wide8(w + k + IW), ld16(x + k + IW));
    }
    for (; k + IW <= K; k += IW)
        a0 = dot16(a0, wide8(w + k), ld16(x + k));
    int32_t total = isum(iadd(a0, a1));
    for (; k < K; k++)
        total += (int32_t)w[k] * (int32_t)x[k];
    return total;
}

/* Y[m][n] = scale[n] * sum_k W[n][k] * X[m][k] (+ bias[n]); W int8 row-major (N, K), X (M, K),
   Y (M, N) float32, M <= 64. A weight row is read from memory once; the other rows find it in
   cache. Returns -1 (and computes nothing) for arguments it does not take. */
int gemm_int8(const int8_t *W, const float *scale, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads) {
    if (M < 1 || M > 64 || K < 1 || K > 32768)
        return -1;
    int16_t *xq = (int16_t *)malloc((size_t)(M * K) * sizeof(int16_t));
    float sx[64];
    if (!xq)
        return -1;
    for (int64_t m = 0; m < M; m++) {
        const float *x = X + m * K;
        float big = 0.0f;
        for (int64_t k = 0; k < K; k++)
            big = fabsf(x[k]) > big ? fabsf(x[k]) : big;
        sx[m] = big > 0.0f ? big / 32767.0f : 1.0f;
        float inv = 1.0f / sx[m];
        for (int64_t k = 0; k < K; k++)
            xq[m * K + k] = (int16_t)lrintf(x[k] * inv);
    }
    #pragma omp parallel for schedule(static) num_threads(threads) if (N * K > (1 << 16))
    for (int64_t n = 0; n < N; n++) {
        const int8_t *row = W + n * K;
        float b = bias ? bias[n] : 0.0f;
        for (int64_t m = 0; m < M; m++)
            Y[m * N + n] = (float)dot_int8_int16(row, xq + m * K, K) * (sx[m] * scale[n]) + b;
    }
    free(xq);
    return 0;
}

/* Paged attention for a decode step: one new query per row, its keys and values read where they
   lie in the pool (slot = block * block_size + offset), never gathered into a copy.
   Q (B, NKV * G, D): row b's queries, query head h * G + g in key/value head h's group;
   K, V (slots, NKV, D): the pool; slots (B, L): row b's first lens[b] entries are its keys'
   slots, in order; S, P (B, NKV * G, L): scores, probabilities; O (B, NKV * G, D), D <= 256. */
#ifdef __AVX512F__
/* lane i of the result: the sum of v[(i % 4) * 4 + i / 4]'s lanes */
static inline vf hsum_keys(const vf *v) {
    vf a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_unpacklo_ps(b[2 * i], b[2 * i + 1]),
                             _mm512_unpackhi_ps(b[2 * i], b[2 * i + 1]));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[0]),
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
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20),
                         _mm256_permute2f128_ps(lo, hi, 0x31));
}
#define KEY_LANE(j) (j)
#endif

/* the dot product of a and b's first D - D % VW values, in one vector's lanes */
static inline vf dot_vf(const float *a, const float *b, int64_t D) {
    vf acc = vzero();
    for (int64_t d = 0; d + VW <= D; d += VW)
        acc = vfma(vload(a + d), vload(b + d), acc);
    return acc;
}

/* the rest of it: the last D % VW values */
static inline float dot_tail(const float *a, const float *b, int64_t D) {
    float total = 0.0f;
    for (int64_t d = D - D % VW; d < D; d++)
        total += a[d] * b[d];
    return total;
}

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

/* o += sum over t0 <= t < t1 of p[t] * V[slot[t]][h] (D at most 256) */
static inline void weighted_values(const float *p, const float *V, const int64_t *slot,
                                   int64_t t0, int64_t t1, int64_t NKV, int64_t h, float *o,
                                   const int64_t D) {
    vf acc[256 / VW];
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
   Y (M, N). The work is cut into tiles of GEMM_ROWS rows by GEMM_COLS columns of Y, whose sums
   stay in registers (24 vectors with AVX-512, 12 with AVX2) while the tile's strip of W goes by,
   one row of W (GEMM_COLS floats) per step: each weight loaded is used GEMM_ROWS times, so for a
   decode batch of 8-16 rows the multiply is bound by arithmetic, not by reading W.
   With AVX-512 it also beats PyTorch's multiply (MKL's) on this project's CPU at every size
   measured, from 2 rows to a 2,048-token prompt, and by most on thin products and two threads
   (scripts/bench_gemm_f32.py); with AVX2 it wins up to 8 rows. The strip is read down its column a
   row of W at a time, a jump of N floats; with few rows of X the arithmetic is too short to hide
   those jumps, so the strip is taken GEMM_SPAN rows of W at a time, the next strip's span after
   it, and the sums go back to Y between spans (Y is small: it stays in cache). */
#ifdef __AVX512F__
#define GEMM_ROWS 8
#define GEMM_MAX_ROWS (1 << 20)
#else
#define GEMM_ROWS 4
#define GEMM_MAX_ROWS 8
#endif
#define GEMM_VECS 3
#define GEMM_COLS (GEMM_VECS * VW)
#define GEMM_SPAN 16

static inline __attribute__((always_inline)) void gemm_tile(
        const float *W, const float *X, const float *bias, float *Y, int64_t N, int64_t K,
        int64_t n, int64_t k0, int64_t k1, const int rows, const int vecs) {
    vf acc[GEMM_ROWS][GEMM_VECS];
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < vecs; j++)
            acc[r][j] = k0 ? vload(Y + r * N + n + j * VW)
                           : bias ? vload(bias + n + j * VW) : vzero();
    const float *w = W + k0 * N + n;
    for (int64_t k = k0; k < k1; k++, w += N) {
        vf wk[GEMM_VECS];
        for (int j = 0; j < vecs; j++)
            wk[j] = vload(w + j * VW);
        for (int r = 0; r < rows; r++) {
            vf xr = vset1(X[r * K + k]);
            for (int j = 0; j < vecs; j++)
                acc[r][j] = vfma(xr, wk[j], acc[r][j]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < vecs; j++)
            vstore(Y + r * N + n + j * VW, acc[r][j]);
}

/* gemm_tile with its sizes known to the compiler, so that its sums are registers */
#define GEMM_TILE(R) gemm_tile(W, X, bias, Y, N, K, n, k0, k1, R, vecs)
static void gemm_tile_of(const float *W, const float *X, const float *bias, float *Y, int64_t N,
                         int64_t K, int64_t n, int64_t k0, int64_t k1, int rows, int vecs) {
    switch (rows) {
    case 1: GEMM_TILE(1); break;
    case 2: GEMM_TILE(2); break;
    case 3: GEMM_TILE(3); break;
#if GEMM_ROWS == 8
    case 4: GEMM_TILE(4); break;
    case 5: GEMM_TILE(5); break;
    case 6: GEMM_TILE(6); break;
    case 7: GEMM_TILE(7); break;
#endif
    default: GEMM_TILE(GEMM_ROWS); break;
    }
}

int gemm_f32_max_rows(void) { return GEMM_MAX_ROWS; }

void gemm_f32(const float *W, const float *bias, const float *X, float *Y, int64_t M, int64_t N,
              int64_t K, int threads) {
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
                int vecs = (int)(width / VW);
                for (int64_t m = 0; m < M; m += GEMM_ROWS) {
                    int rows = M - m < GEMM_ROWS ? (int)(M - m) : GEMM_ROWS;
                    if (vecs == GEMM_VECS)
                        gemm_tile_of(W, X + m * K, bias, Y + m * N, N, K, n, k0, k1, rows, 3);
                    else if (vecs == 2)
                        gemm_tile_of(W, X + m * K, bias, Y + m * N, N, K, n, k0, k1, rows, 2);
                    else if (vecs == 1)
                        gemm_tile_of(W, X + m * K, bias, Y + m * N, N, K, n, k0, k1, rows, 1);
                    /* the last columns, fewer than a vector: one at a time */
                    for (int64_t c = n + vecs * VW; c < n + width; c++)
                        for (int64_t r = m; r < m + rows; r++) {
                            float total = k0 ? Y[r * N + c] : bias ? bias[c] : 0.0f;
                            for (int64_t k = k0; k < k1; k++)
                                total += X[r * K + k] * W[k * N + c];
                            Y[r * N + c] = total;
                        }
                }
            }
    }
}

/* The small operations of a decode step. At one row their arithmetic is a few thousand
   operations, and PyTorch's general kernels spend tens of microseconds on each call (an RMSNorm
   of 576 values: ~30 us; attention over a short cache: ~40 us), sixty-one and thirty times a
   token: a tenth of a float32 token's time, a quarter of an int8 one's. */

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

/* o = sum over t < n of p[t] * v[t] (rows of D <= 256 floats, one after another), times norm */
static inline void values_in_order(const float *p, const float *v, int64_t n, float norm,
                                   float *o, const int64_t D) {
    vf acc[256 / VW];
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
   filled; O (B, NKV * G, D). */
void decode_attention(const float *Q, const float *K, const float *V, float *O, int64_t B,
                      int64_t NKV, int64_t G, int64_t T, int64_t n, int64_t D, float scale,
                      int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) \
        if (threads > 1 && B * NKV > 1 && n * D > 4096)
    for (int64_t bh = 0; bh < B * NKV; bh++) {
        const float *k = K + bh * T * D, *v = V + bh * T * D;
        float *p = (float *)malloc((size_t)n * sizeof(float));
        if (!p)
            continue;
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
        free(p);
    }
}

/* y[n] = sum_k W[n][k] * x[k]; W is bf16 (uint16), row-major (N, K); x and y are float32. */
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
        __m256 a = _mm256_add_ps(a0, a1);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        float total = _mm_cvtss_f32(s);
        for (; k < K; k++) {
            uint32_t bits = (uint32_t)row[k] << 16;
            float w;
            memcpy(&w, &bits, 4);
            total += w * x[k];
        }
        y[n] = total;
    }
}
"""

_LOADED: dict[str, object] = {}


def _supported() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return False
    return capability in ("AVX2", "AVX512")


_ARGS = {"gemv_bf16": [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_int],
         "gemv_f32": [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_int],
         "gemm_f32": [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int],
         "gemm_f32_max_rows": [],  # -> int
         "rms_norm_f32": [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_float],
         "decode_attention": [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_float,
                                                                              ctypes.c_int],
         "gemm_int8": [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int],  # -> int
         "gemm_q4_1": [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int],
         "paged_scores": [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 5 + [ctypes.c_float,
                                                                          ctypes.c_int],
         "paged_values": [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 5 + [ctypes.c_int]}


_RETURNS_INT = ("gemm_int8", "gemm_q4_1", "gemm_f32_max_rows")


def _cpu_has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists `flag` (False where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(flag in line.split() for line in f if line.startswith("flags"))
    except OSError:
        return False


def _library():
    """The compiled library (ctypes), or None where it cannot be built here. Built once per
    source and CPU capability (AVX2 or AVX-512), kept in minillm's cache (a library already in
    a read-only shared cache is used from there; a new build goes to the user's writable one)."""
    if "lib" in _LOADED:
        return _LOADED["lib"]
    _LOADED["lib"] = None
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if os.environ.get("MINILLM_NO_KERNEL") or not _supported() or compiler is None:
        return None
    from .files import cache_entry, writable_cache_dir

    capability = torch.backends.cpu.get_cpu_capability()
    flags = ["-mavx2", "-mfma", "-mf16c"]
    if capability == "AVX512":
        flags += ["-mavx512f", "-mavx512bw"] + (["-mavx512vnni"] if _cpu_has("avx512_vnni")
                                                else [])
    digest = hashlib.sha256((SOURCE + " ".join(flags)).encode()).hexdigest()[:12]
    relative = Path("kernels") / f"minillm_kernels_{capability.lower()}_{digest}.so"
    library = cache_entry(relative)
    try:
        if not library.is_file():
            library = writable_cache_dir() / relative
            library.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "minillm_kernels.c"
                src.write_text(SOURCE)
                built = Path(tmp) / library.name
                subprocess.run([compiler, "-O3", *flags, "-fopenmp", "-shared", "-fPIC",
                                str(src), "-o", str(built)], check=True, capture_output=True,
                               timeout=120)
                os.replace(built, library)  # atomic: a parallel build never sees half a file
        lib = ctypes.CDLL(str(library))
    except (OSError, subprocess.SubprocessError):
        return None
    for name, args in _ARGS.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int if name in _RETURNS_INT else None
    _LOADED["lib"] = lib
    return lib


def load(name: str = "gemv_bf16"):
    """The compiled kernel `name` (one of `_ARGS`: "gemv_bf16", "gemm_int8", ..., a ctypes
    function), or None where it cannot be built here."""
    if name not in _ARGS:
        raise ValueError(f"no kernel {name!r}; minillm has {', '.join(_ARGS)}")
    lib = _library()
    return None if lib is None else getattr(lib, name)


def _required(name: str, what: str):
    """The kernel `name`, or a RuntimeError saying that the `what` kernel is not available."""
    fn = load(name)
    if fn is None:
        raise RuntimeError(f"the {what} kernel is not available on this machine")
    return fn


def _one_row(x: torch.Tensor, k: int) -> torch.Tensor:
    """x, (K,) or (1, K) float32 and contiguous, as (K,); else a ValueError."""
    x = x.reshape(-1)
    if x.dtype != torch.float32 or x.numel() != k or not x.is_contiguous():
        raise ValueError(f"x must be {k} contiguous float32 values, got {tuple(x.shape)} "
                         f"{x.dtype}")
    return x


def _f32_matrix(weight: torch.Tensor) -> tuple[int, int]:
    """(K, N) of a float32 (in, out) weight the float32 kernels can read; else a ValueError."""
    if weight.dtype != torch.float32 or not weight.is_contiguous() or weight.dim() != 2 \
            or weight.device.type != "cpu":
        raise ValueError("weight must be a contiguous 2-D float32 tensor (in, out) on the CPU")
    return tuple(weight.shape)


def _f32_bias(bias: torch.Tensor | None, n: int) -> None:
    if bias is not None and (bias.dtype != torch.float32 or bias.shape != (n,)
                             or not bias.is_contiguous()):
        raise ValueError(f"bias must be {n} contiguous float32 values")


def _float32_on_cpu(tensors: dict, contiguous: bool = False) -> None:
    """A ValueError naming the first of `tensors` (name -> tensor) that is not float32 on the
    CPU (and contiguous, if asked)."""
    for name, t in tensors.items():
        if t.dtype != torch.float32 or t.device.type != "cpu" \
                or (contiguous and not t.is_contiguous()):
            raise ValueError(f"{name} must be {'contiguous ' if contiguous else ''}float32 on "
                             f"the CPU, got {t.dtype} on {t.device}")


def gemv_bf16(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x (K,) or (1, K) float32, weight (N, K) bf16 contiguous on the CPU -> (N,) float32 (or
    `out`). Raises RuntimeError where the kernel is not available (see `load`)."""
    fn = _required("gemv_bf16", "bf16")
    if weight.dtype != torch.bfloat16 or not weight.is_contiguous() or weight.dim() != 2:
        raise ValueError("weight must be a contiguous 2-D bfloat16 tensor")
    n, k = weight.shape
    x = _one_row(x, k)
    if out is None:
        out = torch.empty(n, dtype=torch.float32)
    fn(weight.data_ptr(), x.data_ptr(), out.data_ptr(), n, k, threads or torch.get_num_threads())
    return out


def gemv_f32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x (K,) or (1, K) float32 times weight (K, N) float32, contiguous on the CPU (the (in, out)
    layout), plus `bias` (N,) -> (N,) float32 (or `out`). Raises RuntimeError where the kernel
    is not available (see `load`)."""
    fn = _required("gemv_f32", "float32")
    k, n = _f32_matrix(weight)
    x = _one_row(x, k)
    _f32_bias(bias, n)
    if out is None:
        out = torch.empty(n, dtype=torch.float32)
    fn(weight.data_ptr(), None if bias is None else bias.data_ptr(), x.data_ptr(),
       out.data_ptr(), n, k, threads or torch.get_num_threads())
    return out


def gemm_f32_max_rows() -> int:
    """The most rows `gemm_f32` takes: as many as its tiles beat PyTorch's multiply for (any
    number, 2**20, with AVX-512; 8 with AVX2), or 0 where the kernel is not available."""
    fn = load("gemm_f32_max_rows")
    return 0 if fn is None else fn()


def gemm_f32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x (M, K) float32 times weight (K, N) float32 (the (in, out) layout), plus `bias` (N,):
    (M, N) float32 (or `out`), on the CPU, for 1 <= M <= gemm_f32_max_rows(). Raises
    RuntimeError where the kernel is not available (see `load`)."""
    fn = _required("gemm_f32", "float32")
    k, n = _f32_matrix(weight)
    limit = gemm_f32_max_rows()
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != k or not x.is_contiguous() \
            or not 1 <= x.shape[0] <= limit:
        raise ValueError(f"x must be 1 to {limit} contiguous float32 rows of {k} values, got "
                         f"{tuple(x.shape)} {x.dtype}")
    _f32_bias(bias, n)
    m = x.shape[0]
    if out is None:
        out = torch.empty(m, n, dtype=torch.float32)
    elif out.shape != (m, n) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous float32 tensor of shape {(m, n)}")
    fn(weight.data_ptr(), None if bias is None else bias.data_ptr(), x.data_ptr(),
       out.data_ptr(), m, n, k, threads or torch.get_num_threads())
    return out


def gemm_int8(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
              bias: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """x (M, K) float32 times the int8 weight (N, K) with scales (N,), plus `bias` (N,):
    (M, N) float32, on the CPU. Raises RuntimeError where the kernel is not available."""
    fn = _required("gemm_int8", "int8")
    if qweight.dtype != torch.int8 or not qweight.is_contiguous() or qweight.dim() != 2:
        raise ValueError("qweight must be a contiguous 2-D int8 tensor")
    n, k = qweight.shape
    if k > 32768:
        raise ValueError(f"the int8 kernel takes rows of at most 32,768 values, got {k}")
    x = x.reshape(-1, k) if x.numel() % k == 0 else x
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != k:
        raise ValueError(f"x must be float32 rows of {k} values, got {tuple(x.shape)} {x.dtype}")
    x = x.contiguous()
    scale = scale.float().contiguous()
    bias = None if bias is None else bias.float().contiguous()
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    for rows in range(0, x.shape[0], 64):  # the kernel takes up to 64 rows a call
        part = x[rows:rows + 64]
        if fn(qweight.data_ptr(), scale.data_ptr(), None if bias is None else bias.data_ptr(),
              part.data_ptr(), out[rows:rows + 64].data_ptr(), part.shape[0], n, k,
              threads or torch.get_num_threads()) != 0:
            raise RuntimeError("the int8 kernel refused its arguments")
    return out


def gemm_q4_1(x: torch.Tensor, blocks: torch.Tensor, bias: torch.Tensor | None = None,
              threads: int | None = None) -> torch.Tensor:
    """x (M, K) float32 times a weight stored as GGUF Q4_1 blocks, `blocks` uint8 (N, K / 32 *
    20), plus `bias` (N,): (M, N) float32, on the CPU. Like llama.cpp's, the kernel rounds each
    block of 32 values of x to int8 (its own scale) and multiplies integers. RuntimeError where
    the kernel is not available."""
    fn = _required("gemm_q4_1", "Q4_1")
    if blocks.dtype != torch.uint8 or not blocks.is_contiguous() or blocks.dim() != 2 \
            or blocks.shape[1] % 20:
        raise ValueError("blocks must be a contiguous uint8 tensor (rows, 20 bytes per block)")
    n, k = blocks.shape[0], blocks.shape[1] // 20 * 32
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != k:
        raise ValueError(f"x must be float32 rows of {k} values, got {tuple(x.shape)} {x.dtype}")
    x = x.contiguous()
    bias = None if bias is None else bias.float().contiguous()
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    if fn(blocks.data_ptr(), None if bias is None else bias.data_ptr(), x.data_ptr(),
          out.data_ptr(), x.shape[0], n, k, threads or torch.get_num_threads()) != 0:
        raise MemoryError(f"the Q4_1 kernel could not allocate the int8 copy of x "
                          f"({x.shape[0]} x {k})")
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x times `weight` (x (..., D) and weight (D,) float32, contiguous,
    on the CPU), as `F.rms_norm` computes it. RuntimeError where the kernel is not available."""
    fn = _required("rms_norm_f32", "RMSNorm")
    d = x.shape[-1] if x.dim() else 0
    _float32_on_cpu({"x": x, "weight": weight}, contiguous=True)
    if x.dim() == 0 or weight.shape != (d,):
        raise ValueError(f"weight must have one value per column of x: x {tuple(x.shape)}, "
                         f"weight {tuple(weight.shape)}")
    out = torch.empty_like(x)
    fn(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // max(d, 1), d, float(eps))
    return out


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int,
                     threads: int | None = None) -> torch.Tensor:
    """Attention of one new query per row over a contiguous KV cache, on the CPU:
    softmax(q kᵀ / √d) v over each row's first `length` positions, grouped-query heads.

    q (rows, heads, head_dim) float32; keys, values (rows, kv_heads, max_tokens, head_dim)
    float32, contiguous (a `KVCache` layer's); 1 <= length <= max_tokens; head_dim at most
    256. Returns (rows, heads, head_dim). RuntimeError where the kernel is not available."""
    fn = _required("decode_attention", "decode attention")
    _float32_on_cpu({"q": q, "keys": keys, "values": values})
    if q.dim() != 3 or keys.dim() != 4 or values.shape != keys.shape \
            or not (keys.is_contiguous() and values.is_contiguous()):
        raise ValueError("q must be (rows, heads, head_dim) and keys, values contiguous "
                         "(rows, kv_heads, max_tokens, head_dim) of one shape")
    rows, heads, head_dim = q.shape
    _, kv_heads, max_tokens, cache_dim = keys.shape
    if keys.shape[0] != rows or cache_dim != head_dim or heads % kv_heads or head_dim > 256:
        raise ValueError(f"q {tuple(q.shape)} does not fit the cache {tuple(keys.shape)}: the "
                         f"same rows and head_dim (at most 256), heads a multiple of kv_heads")
    if not 1 <= length <= max_tokens:
        raise ValueError(f"length must be 1..{max_tokens}, got {length}")
    q = q.contiguous()
    out = torch.empty_like(q)
    fn(q.data_ptr(), keys.data_ptr(), values.data_ptr(), out.data_ptr(), rows, kv_heads,
       heads // kv_heads, max_tokens, length, head_dim, head_dim ** -0.5,
       threads or torch.get_num_threads())
    return out


def paged_decode_attention(q: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
                           slots: torch.Tensor, lengths: torch.Tensor,
                           threads: int | None = None) -> torch.Tensor:
    """Attention of one new query per row over its keys and values where they lie in a paged
    pool, on the CPU: softmax(q kᵀ / √d) v with grouped-query heads.

    q (rows, heads, head_dim) float32; key_pool, value_pool (slots, kv_heads, head_dim) float32,
    contiguous; slots (rows, longest) int64: row i's first lengths[i] entries are the pool slots
    of its keys, in order. Returns (rows, heads, head_dim); head_dim at most 256. RuntimeError
    where the kernel is not available."""
    scores_fn = _required("paged_scores", "paged attention")
    values_fn = _required("paged_values", "paged attention")
    rows, heads, head_dim = q.shape
    _, kv_heads, pool_dim = key_pool.shape
    _float32_on_cpu({"q": q, "key_pool": key_pool, "value_pool": value_pool})
    if not (key_pool.is_contiguous() and value_pool.is_contiguous()) \
            or value_pool.shape != key_pool.shape:
        raise ValueError("key_pool and value_pool must be contiguous and of the same shape")
    if pool_dim != head_dim or heads % kv_heads or head_dim > 256:
        raise ValueError(f"q {tuple(q.shape)} does not fit the pool {tuple(key_pool.shape)}: "
                         f"the same head_dim (at most 256), heads a multiple of kv_heads")
    if slots.dtype != torch.int64 or lengths.dtype != torch.int64 or slots.dim() != 2 \
            or slots.shape[0] != rows or lengths.shape != (rows,):
        raise ValueError(f"slots must be int64 (rows, longest) and lengths int64 (rows,), "
                         f"got {tuple(slots.shape)} {slots.dtype}, {tuple(lengths.shape)} "
                         f"{lengths.dtype}")
    longest = slots.shape[1]
    if rows and (int(lengths.min()) < 1 or int(lengths.max()) > longest
                 or int(slots.min()) < 0 or int(slots.max()) >= key_pool.shape[0]):
        raise ValueError(f"every length must be 1..{longest} and every slot 0.."
                         f"{key_pool.shape[0] - 1}")
    q, slots, lengths = q.contiguous(), slots.contiguous(), lengths.contiguous()
    threads = threads or torch.get_num_threads()
    scores = torch.empty(rows, heads, longest)
    scores_fn(q.data_ptr(), key_pool.data_ptr(), slots.data_ptr(), lengths.data_ptr(),
              scores.data_ptr(), rows, longest, kv_heads, heads // kv_heads, head_dim,
              head_dim ** -0.5, threads)
    weights = torch.softmax(scores, dim=-1)
    out = torch.empty(rows, heads, head_dim)
    values_fn(weights.data_ptr(), value_pool.data_ptr(), slots.data_ptr(), lengths.data_ptr(),
              out.data_ptr(), rows, longest, kv_heads, heads // kv_heads, head_dim, threads)
    return out
