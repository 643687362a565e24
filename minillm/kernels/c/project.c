/* A layer's rows times its weight, one entry per weight format (DECODE_F32 ... DECODE_Q4_1):
   how the rows go to the format's kernels. One row streams the weights (gemv); more share each
   weight loaded (gemm); int8 rounds INT8_MAX_ROWS rows a call. The decode step in one C call
   (decode_blocks.c) and the layers' routes in Python (minillm/kernels/dispatch.py, through
   matmul.project_rows) both multiply through this table, so each format's policy is written
   once, as ggml's CPU backend keeps one table of traits per type. */
#include "minillm_kernels.h"

typedef int (*rows_kernel)(const void *W, const float *scale, const float *bias, const float *X,
                           float *Y, int64_t M, int64_t N, int64_t K, int threads);

/* (in, out) layout */
static int f32_rows(const void *W, const float *scale, const float *bias, const float *X,
                    float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    (void)scale;
    if (M > 1)
        return gemm_f32((const float *)W, bias, X, Y, M, N, K, threads);
    gemv_f32((const float *)W, bias, X, Y, N, K, threads);
    return 0;
}

/* (out, in) layout; one row's bias added after, as PyTorch's add_ */
static int bf16_rows(const void *W, const float *scale, const float *bias, const float *X,
                     float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    (void)scale;
    if (M > 1)
        return gemm_bf16((const uint16_t *)W, bias, X, Y, M, N, K, threads);
    gemv_bf16((const uint16_t *)W, X, Y, N, K, threads);
    if (bias)
        for (int64_t n = 0; n < N; n++)
            Y[n] += bias[n];
    return 0;
}

static int int8_rows(const void *W, const float *scale, const float *bias, const float *X,
                     float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    for (int64_t m = 0; m < M; m += INT8_MAX_ROWS)
        if (gemm_int8((const int8_t *)W, scale, bias, X + m * K, Y + m * N,
                      M - m < INT8_MAX_ROWS ? M - m : INT8_MAX_ROWS, N, K, threads) != 0)
            return -1;
    return 0;
}

static int q4_1_rows(const void *W, const float *scale, const float *bias, const float *X,
                     float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    (void)scale;
    return gemm_q4_1((const uint8_t *)W, bias, X, Y, M, N, K, threads);
}

static const rows_kernel FORMATS[] = {
    [DECODE_F32] = f32_rows,
    [DECODE_BF16] = bf16_rows,
    [DECODE_INT8] = int8_rows,
    [DECODE_Q4_1] = q4_1_rows,
};

int project_rows(int64_t kind, const void *W, const float *scale, const float *bias,
                 const float *X, float *Y, int64_t M, int64_t N, int64_t K, int threads) {
    if (kind < 0 || kind >= (int64_t)(sizeof(FORMATS) / sizeof(FORMATS[0])) || !FORMATS[kind])
        return -1;
    return FORMATS[kind](W, scale, bias, X, Y, M, N, K, threads);
}
