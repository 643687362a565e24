/* The vector helpers every kernel is written with (ggml's simd-mappings.h, in small): one set of
   names, two widths. Built with AVX-512 (16 floats a register) where the CPU has it, else AVX2
   (8 floats); minillm/kernels/build.py picks the compiler flags from what the CPU reports. */
#ifndef MINILLM_SIMD_H
#define MINILLM_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* the sum of an AVX2 register's 8 floats (kernels that stay 8 wide at either width) */
static inline float vsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_hadd_ps(s, s));
}

/* A decode step reads every weight once, in order. The CPU's own prefetcher stops at each 4 KB
   page and starts again, so on its own it keeps too few reads in flight to reach the memory's
   bandwidth: a kernel streaming weights asks, for each 64 bytes it reads, for the line
   AHEAD_BYTES further on, into L2 (T1: what the L1 holds stays). scripts/bench_gemm_int8.py
   --rows 1 measures it. */
#define AHEAD_BYTES (16 * 1024)
/* always_inline: as a plain inline function GCC finds it has no effect (a prefetch changes
   nothing a program can see) and drops the calls before it would have inlined them */
static inline __attribute__((always_inline)) void fetch_ahead(const void *p) {
    _mm_prefetch((const char *)p + AHEAD_BYTES, _MM_HINT_T1);
}

/* ---- float32 vectors: vf, VW floats ------------------------------------------------------- */
/* the names at one width: T the vector, I its int32 twin, P the intrinsics' prefix
   (_mm512_loadu_ps, _mm256_loadu_ps, ...), S what ends each name (vload, and vload8 for the names
   of 8 floats, which every width has), SET1 the broadcast's (vset1, vset8) */
#define VF_NAMES(T, I, P, S, SET1)                                                \
    static inline T vload##S(const float *p) { return P##_loadu_ps(p); }          \
    static inline T vfma##S(T a, T b, T c) { return P##_fmadd_ps(a, b, c); }      \
    static inline T vadd##S(T a, T b) { return P##_add_ps(a, b); }                \
    static inline T vzero##S(void) { return P##_setzero_ps(); }                   \
    static inline T SET1(float v) { return P##_set1_ps(v); }                      \
    static inline T vmul##S(T a, T b) { return P##_mul_ps(a, b); }                \
    static inline void vstore##S(float *p, T a) { P##_storeu_ps(p, a); }          \
    static inline T vfloat##S(I q) { return P##_cvtepi32_ps(q); } /* int32 lanes as floats */
#ifdef __AVX512F__
#define VW 16
typedef __m512 vf;
VF_NAMES(vf, __m512i, _mm512, , vset1)
static inline float vsum(vf a) { return _mm512_reduce_add_ps(a); }
#else
#define VW 8
typedef __m256 vf;
VF_NAMES(vf, __m256i, _mm256, , vset1)
static inline float vsum(vf a) { return vsum8(a); }
#endif
VF_NAMES(__m256, __m256i, _mm256, 8, vset8)

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

/* ---- integers into int32 lanes: vi, IW int16 values (2 IW bytes) -------------------------- */
/* u's unsigned bytes times s's signed bytes, four products a lane, into acc's int32 lanes:
   VNNI's vpdpbusd, else vpmaddubsw, whose sums of two products saturate at int16 (the same while
   they fit, as with Q4_1's 4-bit u). dot_bytes8: 8 lanes at every width, dot_bytes: a vi's. */
static inline __m256i dot_bytes8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
#endif
}

#ifdef __AVX512BW__
#define IW 32
typedef __m512i vi;
static inline vi wide8(const int8_t *p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
}
static inline vi iload(const void *p) { return _mm512_loadu_si512(p); }
static inline vi izero(void) { return _mm512_setzero_si512(); }
static inline int32_t isum(vi a) { return _mm512_reduce_add_epi32(a); }
static inline vi iadd(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline __m256i ihalves(vi a) {
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}
#ifdef __AVX512VNNI__
static inline vi dot16(vi acc, vi w, vi x) { return _mm512_dpwssd_epi32(acc, w, x); }
static inline vi dot_bytes(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
static inline vi dot16(vi acc, vi w, vi x) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, x));
}
static inline vi dot_bytes(vi acc, vi u, vi s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),
                                                   _mm512_set1_epi16(1)));
}
#endif
#else
#define IW 16
typedef __m256i vi;
static inline vi wide8(const int8_t *p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
}
static inline vi iload(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline vi izero(void) { return _mm256_setzero_si256(); }
static inline vi iadd(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline int32_t isum(vi a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_hadd_epi32(s, s);
    return _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
}
static inline vi dot16(vi acc, vi w, vi x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
}
static inline vi dot_bytes(vi acc, vi u, vi s) { return dot_bytes8(acc, u, s); }
#endif
static inline vi ld16(const int16_t *p) { return iload(p); }

/* the 4 bytes at p in every int32 lane */
static inline vi ibroadcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
#ifdef __AVX512BW__
    return _mm512_set1_epi32(v);
#else
    return _mm256_set1_epi32(v);
#endif
}

/* the sums of four registers' lanes: [a, b, c, d] */
static inline __m128i isum4(vi a, vi b, vi c, vi d) {
#ifdef __AVX512BW__
    __m256i a8 = ihalves(a), b8 = ihalves(b), c8 = ihalves(c), d8 = ihalves(d);
#else
    __m256i a8 = a, b8 = b, c8 = c, d8 = d;
#endif
    __m256i all = _mm256_hadd_epi32(_mm256_hadd_epi32(a8, b8), _mm256_hadd_epi32(c8, d8));
    return _mm_add_epi32(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
}

#endif
