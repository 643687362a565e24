/* Every function minillm calls in its C library, declared once. The .c files include this, so
   the compiler holds each definition to its line here, and the Python side reads these lines to
   tell ctypes the argument types (minillm/kernels/signatures.py): a signature is written only
   here. Matrices are row-major and contiguous; `threads` is an OpenMP thread count.

   The sizes below come from minillm/kernels/limits.py, as -D flags of the build. */
#ifndef MINILLM_KERNELS_H
#define MINILLM_KERNELS_H

#include <stdint.h>

#if !defined(MAX_HEAD_DIM) || !defined(INT8_MAX_ROWS) || !defined(INT8_MAX_K) \
    || !defined(Q4_1_BLOCK_BYTES) || !defined(DECODE_BLOCK_WORDS)
#error "build with -D flags for the limits in minillm/kernels/limits.py"
#endif

/* y = x W (+ bias): x (K), W float32 (K, N) (the (in, out) layout), y (N) */
void gemv_f32(const float *W, const float *bias, const float *x, float *y, int64_t N, int64_t K,
              int threads);

/* Y = X W (+ bias): X (M, K), W float32 (K, N), Y (M, N), any M >= 1. Returns 0, or -1 (Y
   incomplete) when it cannot allocate the panel it copies each strip of W into (from 9 rows). */
int gemm_f32(const float *W, const float *bias, const float *X, float *Y, int64_t M, int64_t N,
             int64_t K, int threads);

/* y = W x: W bfloat16 (N, K) (the (out, in) layout, as uint16), x (K), y (N) */
void gemv_bf16(const uint16_t *W, const float *x, float *y, int64_t N, int64_t K, int threads);

/* Y = X W^T (+ bias): X (M, K) float32, W bfloat16 (N, K) (as uint16), Y (M, N), any M >= 1.
   On AMX's bf16 tiles (see gemm_bf16_amx) x is rounded to bf16 for the products, else it is
   multiplied as float32. Returns 0, or -1 (Y incomplete) when it cannot allocate its buffers. */
int gemm_bf16(const uint16_t *W, const float *bias, const float *X, float *Y, int64_t M,
              int64_t N, int64_t K, int threads);

/* 1 where gemm_bf16 multiplies two rows or more on AMX's bf16 tiles, x rounded to bf16 (built
   with AMX, and Linux lets this process use them; K a multiple of 32, N at least 32), else 0 */
int gemm_bf16_amx(void);

/* Y = X (scale * W)^T (+ bias): W int8 (N, K), scale (N), X (M, K), Y (M, N);
   1 <= M <= INT8_MAX_ROWS, 1 <= K <= INT8_MAX_K. Returns 0, or -1 for other sizes (computing
   nothing) or when it cannot allocate (Y then incomplete). */
int gemm_int8(const int8_t *W, const float *scale, const float *bias, const float *X, float *Y,
              int64_t M, int64_t N, int64_t K, int threads);

/* 1 where gemm_int8 multiplies a prompt's many rows on AMX's tiles (built with AMX, and Linux
   lets this process use them), else 0 */
int gemm_int8_amx(void);

/* Y = X W^T (+ bias), W in GGUF Q4_1 blocks (N, K / 32 blocks of 20 bytes), K a multiple of 32,
   X (M, K), Y (M, N). Returns 0, or -1 when it cannot allocate x's rounded copy or its tiles'
   buffers (Y then incomplete). */
int gemm_q4_1(const uint8_t *W, const float *bias, const float *X, float *Y, int64_t M, int64_t N,
              int64_t K, int threads);

/* 1 where gemm_q4_1 multiplies a prompt's many rows on AMX's int8 tiles (built with AMX, and
   Linux lets this process use them), else 0 */
int gemm_q4_1_amx(void);

/* Y (M, N) = X (M, K) times W (+ bias) in the weight format `kind` (DECODE_F32, DECODE_BF16,
   DECODE_INT8 with its `scale`, DECODE_Q4_1; scale NULL for the others), each format's rows sent
   to its kernels as c/project.c's table says. Returns 0, or -1 for an unknown kind or when a
   kernel could not allocate (Y then incomplete). */
int project_rows(int64_t kind, const void *W, const float *scale, const float *bias,
                 const float *X, float *Y, int64_t M, int64_t N, int64_t K, int threads);

/* Y[r] = X[r] / sqrt(mean(X[r]^2) + eps) * w: X, Y (rows, D), w (D) */
void rms_norm_f32(const float *X, const float *w, float *Y, int64_t rows, int64_t D, float eps);

/* One decode step's RoPE and cache write, one new token per row: QKV (B, (NQ + 2 NKV) D) the
   fused projection's output (q's heads, k's, v's); cos, sin (D) position pos's angles;
   Q (B, NQ, D) gets q rotated; K, V (B, NKV, T, D), a layer's cache: position pos (< T) gets
   k rotated and v. D even. */
void rope_write_cache(const float *QKV, const float *cos, const float *sin, float *Q, float *K,
                      float *V, int64_t B, int64_t NQ, int64_t NKV, int64_t T, int64_t pos,
                      int64_t D);

/* Y (B, F) = SiLU(GU[:, :F]) * GU[:, F:], GU (B, 2 F) */
void silu_mul_f32(const float *GU, float *Y, int64_t B, int64_t F, int threads);

/* softmax(q k^T * scale) v for one new query per row over a contiguous KV cache:
   Q (B, NKV * G, D), query head h * G + g in key/value head h's group; K, V (B, NKV, T, D), the
   first n positions filled; O (B, NKV * G, D); D <= MAX_HEAD_DIM. Returns 0, or -1 (computing
   nothing) when it cannot allocate the scores. */
int decode_attention(const float *Q, const float *K, const float *V, float *O, int64_t B,
                     int64_t NKV, int64_t G, int64_t T, int64_t n, int64_t D, float scale,
                     int threads);

/* A decode step's attention over a paged KV pool, in two calls around a softmax.
   paged_scores: S (B, NKV * G, L) = q k^T * scale for each row's keys, read through its slots:
   Q (B, NKV * G, D); K (slots, NKV, D), the pool; slots (B, L), row b's first lens[b] entries
   its keys' slots in order; entries past lens[b] get -inf.
   paged_values: O (B, NKV * G, D) = P v, P (B, NKV * G, L) the softmax of S; D <= MAX_HEAD_DIM. */
void paged_scores(const float *Q, const float *K, const int64_t *slots, const int64_t *lens,
                  float *S, int64_t B, int64_t L, int64_t NKV, int64_t G, int64_t D, float scale,
                  int threads);
void paged_values(const float *P, const float *V, const int64_t *slots, const int64_t *lens,
                  float *O, int64_t B, int64_t L, int64_t NKV, int64_t G, int64_t D, int threads);

/* A decode step's L blocks for B rows, one new token each, in place on X (B, D): each block's
   RMSNorm, qkv projection, RoPE and cache write, attention, o projection and residual, RMSNorm,
   gate_up projection, SiLU(gate) * up, down projection and residual, through the kernels above.
   blocks (L, DECODE_BLOCK_WORDS): block l's weights (c/decode_blocks.c lays them out); keys[l],
   values[l]: the addresses of layer l's cache (B, NKV, T, HD); cos, sin (HD) position pos's
   angles; F the MLP's width; scale the attention's. Returns 0, or -1 when a kernel could not
   allocate its buffers (X then part-way). */
int decode_blocks(float *X, const int64_t *blocks, const int64_t *keys, const int64_t *values,
                  const float *cos, const float *sin, int64_t L, int64_t B, int64_t D,
                  int64_t NQ, int64_t NKV, int64_t HD, int64_t F, int64_t T, int64_t pos,
                  float eps, float scale, int threads);

#endif
