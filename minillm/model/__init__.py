"""minillm's transformer: one file per model family, built from the shared layers of
minillm.layers, and the loaders that fill it with real weights.

    config.py       ModelConfig, the numbers that describe a model
    registry.py     the families minillm runs and what each can do (every guard reads it)
    base.py         DecoderModel: the forward contract every family shares (embed_tokens,
                    run_layers, logits)
    inputs.py       input checks, device, positions and the padding mask, shared by the models
    llama.py        the Llama family (SmolLM2, Qwen2): RMSNorm, RoPE, grouped-query attention, SwiGLU
    qwen3.py        Qwen3: Llama plus RMSNorm on each query and key head
    gpt2.py         the GPT-2 family: learned positions, LayerNorm, GELU
    gguf_loader.py  a GGUF file -> config + dequantized weights
    hf_loader.py    a Hugging Face folder (config.json + safetensors) -> config + weights
    converted.py    the dequantized copy of a GGUF file kept in the cache (safetensors)

`minillm.load` (minillm/loading.py) joins this package, the fast path and the tokenizer.
    toy.py          a tiny random Llama and toy tokenizers, for checkers, tests and demos
    memory.py       weight_bytes (at rest) and bytes_per_token (what a decode step reads)
    build.py        build_model(config, weights): the checked model on its device
"""

from ..layers import (Attention, GatedMLP, RMSNorm, apply_rope, attention, attention_explicit,
                      causal_mask, repeat_kv, rms_norm, rope_cos_sin, rotate_half)
from .config import ModelConfig
from .gpt2 import GPT2Model
from .llama import LlamaBlock, LlamaModel
from .build import build_model
from .qwen3 import Qwen3Model

__all__ = ["ModelConfig", "LlamaModel", "Qwen3Model", "GPT2Model", "LlamaBlock",
           "Attention", "GatedMLP", "RMSNorm", "rms_norm", "rope_cos_sin", "apply_rope",
           "rotate_half", "attention", "attention_explicit", "causal_mask", "repeat_kv",
           "build_model"]
