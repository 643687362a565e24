"""The engine's paged pool with keys and values in 8 bits (int8, or fp8-e4m3 emulated), with
per-token or per-head scales (generation.kv_quant).

Each slot holds one token's keys and values in the format and, per token, one float32 scale per
kv_head for each. `write` quantizes, `read` gathers and dequantizes into the activation dtype,
so PagedBatch runs unchanged on its general (gather) path. Its tensors are not float32, so the
C paged-attention kernel, which reads float32 slots in place, does not run on it
(`dispatch.paged_attention` says no): said once, on the first such pool.
"""

from __future__ import annotations

import torch

from ..generation.kv_quant import HeadRanges, kv_format
from ..utils.devices import model_device, model_dtype
from ..utils.notices import say_once
from ..utils.wording import text
from .paged_cache import PagedKVPool

GATHER_PATH = ("a quantized KV pool ({fmt}) is read by gathering and dequantizing each layer's "
               "slots: minillm's C paged-attention kernel reads float32 pools in place, so decode "
               "steps take the general attention path (slower than a float32 pool)")
GATHER_PATH_ZH = ("量化的 KV 池（{fmt}）读取时要收集并反量化每一层的槽位：minillm 的 C 分页注意力算子"
                  "只能就地读取 float32 的池，所以解码步走通用的注意力路径（比 float32 的池慢）")


class QuantizedKVPool(PagedKVPool):
    """`num_blocks` blocks of `block_size` slots, keys and values in `fmt`; scales per token,
    or per head when `ranges` is given. `dtype` is the activation dtype `read` returns."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, n_kv_heads: int,
                 head_dim: int, fmt="int8", ranges: HeadRanges | None = None,
                 dtype=torch.float32, device="cpu"):
        self.format = kv_format(fmt)
        super().__init__(n_layers, num_blocks, block_size, n_kv_heads, head_dim,
                         self.format.storage, device)
        self.dtype = dtype
        self._scratch = (torch.empty(0, n_kv_heads, head_dim, dtype=dtype, device=device),) * 2
        slots = num_blocks * block_size
        self.per_token = ranges is None
        if self.per_token:
            self.key_scales = [torch.ones(slots, n_kv_heads, 1, device=device)
                               for _ in range(n_layers)]
            self.value_scales = [torch.ones(slots, n_kv_heads, 1, device=device)
                                 for _ in range(n_layers)]
        else:
            ranges.check(n_layers, n_kv_heads)
            pairs = [ranges.scales(self.format, layer) for layer in range(n_layers)]
            self.key_scales = [k.to(device).view(-1, 1) for k, _ in pairs]
            self.value_scales = [v.to(device).view(-1, 1) for _, v in pairs]
        say_once(text(GATHER_PATH, GATHER_PATH_ZH, fmt=self.format.name))

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int = 16, fmt="int8",
                  ranges: HeadRanges | None = None) -> "QuantizedKVPool":
        c = model.config
        return cls(c.n_layers, num_blocks, block_size, c.n_kv_heads, c.head_dim, fmt, ranges,
                   model_dtype(model), model_device(model))

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        for x, store, scales in ((k, self.keys, self.key_scales),
                                 (v, self.values, self.value_scales)):
            if self.per_token:
                scale = self.format.token_scale(x)
                scales[layer][slots] = scale
            else:
                scale = scales[layer]
            store[layer][slots] = self.format.quantize(x, scale)

    def read(self, layer: int, slots: torch.Tensor):
        k_out, v_out = self.scratch(slots.numel())
        for out, store, scales in ((k_out, self.keys, self.key_scales),
                                   (v_out, self.values, self.value_scales)):
            scale = scales[layer][slots] if self.per_token else scales[layer]
            out.copy_(self.format.dequantize(store[layer][slots], scale, self.dtype))
        return k_out, v_out

    def slot_layout(self) -> tuple:
        return ("quantized", self.format.name, "per token" if self.per_token else "per head")

    def slot_tensors(self) -> list[torch.Tensor]:
        scales = [*self.key_scales, *self.value_scales] if self.per_token else []
        return [*self.keys, *self.values, *scales]
