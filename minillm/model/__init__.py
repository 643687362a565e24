"""minillm's transformer: the model code and the loaders that fill it with real weights.

    config.py       ModelConfig, the numbers that describe a model
    attention.py    causal attention, as explicit matrix math and with the fused kernel
    inputs.py       input checks, positions and the padding mask, shared by the models
    llama.py        the Llama family (SmolLM2, Qwen2): RMSNorm, RoPE, grouped-query attention, SwiGLU
    gpt2.py         the GPT-2 family: learned positions, LayerNorm, GELU
    gguf_loader.py  a GGUF file -> config + dequantized weights
    hf_loader.py    a Hugging Face folder (config.json + safetensors) -> config + weights
    converted.py    the dequantized copy of a GGUF file kept in the cache (safetensors)
    loading.py      load(), load_model(), build_model()
"""

from .attention import attention, attention_explicit, causal_mask, repeat_kv
from .config import ModelConfig
from .gpt2 import GPT2Model
from .llama import (LlamaAttention, LlamaBlock, LlamaModel, RMSNorm, SwiGLU, apply_rope,
                    rms_norm, rope_cos_sin, rotate_half)
from .loading import build_model, load, load_model

__all__ = ["ModelConfig", "LlamaModel", "GPT2Model", "LlamaBlock", "LlamaAttention", "SwiGLU",
           "RMSNorm", "rms_norm", "rope_cos_sin", "apply_rope", "rotate_half", "attention",
           "attention_explicit", "causal_mask", "repeat_kv", "load", "load_model", "build_model"]
