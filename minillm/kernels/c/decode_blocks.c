/* A decode step's blocks, all of them, in one call from Python.

   At one row a block's arithmetic outside its four projections is small (two RMSNorms, RoPE and
   the cache write, the attention over the cache, SiLU·mul, two residual adds), and so is each
   call from Python: but a step made of ten such calls per block spends a fifth to a third of
   its time between them (`python -m minillm bench step`). Here the same kernels the Python
   step calls, in the same order on the same values, run one after another without leaving C:
   the logits are the Python step's, bit for bit (tests/test_decode_blocks.py). */
#include <stdlib.h>
#include <string.h>

#include "minillm_kernels.h"
#include "simd.h"

typedef struct {
    int64_t kind;  /* one of DECODE_F32 ... DECODE_Q4_1 */
    const void *weight;
    const float *scale;  /* int8's scale per output row, else unused */
    const float *bias;  /* or NULL */
} projection;

typedef struct {
    const float *attn_norm, *mlp_norm;
    projection qkv, o, gate_up, down;
} block;

_Static_assert(sizeof(block) == DECODE_BLOCK_WORDS * sizeof(int64_t),
               "a block is DECODE_BLOCK_WORDS 64-bit words, as minillm/fast/blocks.py writes it");

/* Y (M, N) = X (M, K) times the projection's weight, through the format table (project.c) its
   layer's `few_rows` goes through too */
static int project(const projection *p, const float *X, float *Y, int64_t M, int64_t N,
                   int64_t K, int threads) {
    return project_rows(p->kind, p->weight, p->scale, p->bias, X, Y, M, N, K, threads);
}

/* Ask for the first AHEAD_BYTES of a projection's weights while the small operations before it
   run: its kernel asks for each line AHEAD_BYTES ahead, so without this its first lines come
   one miss at a time. */
static void fetch_start(const projection *p) {
    for (int64_t at = 0; at < AHEAD_BYTES; at += 64)
        fetch_ahead((const char *)p->weight + at - AHEAD_BYTES);
}

/* x += y, rows of n floats */
static void add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = y[i] + x[i];
}

int decode_blocks(float *X, const int64_t *blocks, const int64_t *keys, const int64_t *values,
                  const float *cos, const float *sin, int64_t L, int64_t B, int64_t D,
                  int64_t NQ, int64_t NKV, int64_t HD, int64_t F, int64_t T, int64_t pos,
                  float eps, float scale, int threads) {
    int64_t QKV = (NQ + 2 * NKV) * HD, A = NQ * HD;
    int64_t widest = D > 2 * F ? D : 2 * F;
    widest = widest > QKV ? widest : QKV;
    float *h = (float *)malloc((size_t)(B * (D + widest + 2 * A + F)) * sizeof(float));
    if (!h)
        return -1;
    float *y = h + B * D, *q = y + B * widest, *att = q + B * A, *act = att + B * A;
    for (int64_t l = 0; l < L; l++) {
        const block *b = (const block *)(blocks + l * DECODE_BLOCK_WORDS);
        float *k = (float *)(intptr_t)keys[l], *v = (float *)(intptr_t)values[l];
        rms_norm_f32(X, b->attn_norm, h, B, D, eps);
        if (project(&b->qkv, h, y, B, QKV, D, threads) != 0)
            goto failed;
        fetch_start(&b->o);
        rope_write_cache(y, cos, sin, q, k, v, B, NQ, NKV, T, pos, HD);
        if (decode_attention(q, k, v, att, B, NKV, NQ / NKV, T, pos + 1, HD, scale,
                             threads) != 0)
            goto failed;
        if (project(&b->o, att, y, B, D, A, threads) != 0)
            goto failed;
        fetch_start(&b->gate_up);
        add(X, y, B * D);
        rms_norm_f32(X, b->mlp_norm, h, B, D, eps);
        if (project(&b->gate_up, h, y, B, 2 * F, D, threads) != 0)
            goto failed;
        fetch_start(&b->down);
        silu_mul_f32(y, act, B, F, threads);
        if (project(&b->down, act, y, B, D, F, threads) != 0)
            goto failed;
        if (l + 1 < L)
            fetch_start(&((const block *)(blocks + (l + 1) * DECODE_BLOCK_WORDS))->qkv);
        add(X, y, B * D);
    }
    free(h);
    return 0;
failed:
    free(h);
    return -1;
}
