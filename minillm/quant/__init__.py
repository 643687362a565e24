"""minillm.quant: quantization (量化) of a model's weights (chapter 07).

    basics.py      absmax and zero-point quantization of any tensor, per tensor / channel / group
    int8.py        int8 weight-only, symmetric, one scale per output channel
    int4.py        int4 in groups of 32 with a float16 scale and minimum (GGUF Q4_1's scheme)
    linear.py      Int8Linear (dequantize-then-matmul or PyTorch's fused int8 kernel), Int4Linear
    model.py       quantize(model, scheme) for "fp32", "bf16", "fp16", "int8", "int4";
                   weight_bytes(model)
    gguf_q4_1.py   the course model file's Q4_1 blocks decoded by hand
    measure.py     perplexity, logit error against fp32, top-1 agreement, tokens/s
    pruning.py     magnitude pruning, for the lesson's brief demonstration
    grid.py        a b-bit grid with a scale and a minimum per group; round-to-nearest (RTN)
    gptq.py        GPTQ: round column by column, correcting the rest with the inverse Hessian
    awq.py         AWQ: scale up the weights that meet large activations before rounding
    calibration.py calibration inputs' statistics; a model with chosen layers rounded by
                   RTN, GPTQ or AWQ
    smoothquant.py SmoothQuant's scales and an emulated W8A8 (int8 x int8) product
    fp8.py         fp8 e4m3 / e5m2 round trips with one scale per tensor

    >>> model, tokenizer = minillm.load("smollm2-135m")
    >>> small = minillm.quantize(model, "int8")
    >>> minillm.quant.weight_bytes(small) / minillm.quant.weight_bytes(model)
"""

from .basics import (absmax_dequantize, absmax_quantize, roundtrip, zeropoint_dequantize,
                     zeropoint_quantize)
from .gguf_q4_1 import decode_q4_1_block, gguf_dequantize_q4_1, q4_1_blocks
from .int4 import dequantize_int4, quantize_int4
from .int8 import dequantize_int8, quantize_int8
from .linear import Int4Linear, Int8Linear, QuantizedLinear, fused_int8_available
from .measure import Evaluation, evaluate, logit_error, perplexity, speed
from .model import SCHEMES, is_quantized, quantize, set_int8_path, weight_bytes
from .pruning import magnitude_prune

__all__ = ["SCHEMES", "quantize", "is_quantized", "set_int8_path", "weight_bytes",
           "quantize_int8", "dequantize_int8", "quantize_int4", "dequantize_int4",
           "Int8Linear", "Int4Linear", "QuantizedLinear", "fused_int8_available",
           "absmax_quantize", "absmax_dequantize", "zeropoint_quantize", "zeropoint_dequantize",
           "roundtrip", "decode_q4_1_block", "gguf_dequantize_q4_1", "q4_1_blocks",
           "evaluate", "Evaluation", "perplexity", "logit_error", "speed", "magnitude_prune"]
