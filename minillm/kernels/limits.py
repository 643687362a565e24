"""The sizes minillm's C kernels are built for, named once. Each is passed to the compiler as a
-D flag of the same name (build.py) and checked by the wrappers before a call, so a size the C
cannot take raises in Python instead of reaching C."""

# The attention kernels keep one head's output in registers: heads of at most this many values.
MAX_HEAD_DIM = 256
# Rows of x one gemm_int8 call rounds and multiplies (its per-row scales live on the stack);
# the wrapper splits more rows into calls of this many (a prompt of up to 1,024 tokens: one).
INT8_MAX_ROWS = 1024
# The longest row gemm_int8 takes: it rounds x to at most (2**31 - 1) / (128 K) so that its int32
# sums cannot overflow, which leaves x at least 512 steps a side up to this length.
INT8_MAX_K = 32768
# GGUF Q4_1: a block is 32 weights in 20 bytes (a float16 scale d, a float16 minimum m, 16 bytes
# of 4-bit values); minillm.quant.gguf_q4_1 reads the same layout (a test holds the two equal).
Q4_1_BLOCK_BYTES = 20
Q4_1_BLOCK_WEIGHTS = 32
# decode_blocks (c/decode_blocks.c) reads each block's weights from DECODE_BLOCK_WORDS 64-bit
# words (minillm/fast/blocks.py writes them): the two norms' addresses, then per projection
# (qkv, o, gate_up, down) its kind, weight, int8 scale and bias (0: none).
DECODE_BLOCK_WORDS = 18
DECODE_F32, DECODE_BF16, DECODE_INT8, DECODE_Q4_1 = 1, 2, 3, 4
DECODE_KINDS = {"gemv_f32/gemm_f32": DECODE_F32, "gemv_bf16/gemm_bf16": DECODE_BF16,
                "gemm_int8": DECODE_INT8, "gemm_q4_1": DECODE_Q4_1}  # a route.kernel's kind

# What the compiler is told (-DNAME=value).
DEFINES = {"MAX_HEAD_DIM": MAX_HEAD_DIM, "INT8_MAX_ROWS": INT8_MAX_ROWS,
           "INT8_MAX_K": INT8_MAX_K, "Q4_1_BLOCK_BYTES": Q4_1_BLOCK_BYTES,
           "DECODE_BLOCK_WORDS": DECODE_BLOCK_WORDS, "DECODE_F32": DECODE_F32,
           "DECODE_BF16": DECODE_BF16, "DECODE_INT8": DECODE_INT8, "DECODE_Q4_1": DECODE_Q4_1}
