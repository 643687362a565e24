"""Generation (chapter 03): the loop that turns a prompt into new tokens, and what it keeps.

    loop.py            generate, stream, token_steps: prefill once, then one decode step per token
    request.py         make_request: the front door every runner checks a prompt and its options at
    kv_cache.py        KVCache, and the contract every cache keeps (KVCacheProtocol, the optional
                       capabilities in KVCacheBase), imported from minillm/layers/kv_contract.py
    kv_quant.py        8-bit formats for keys and values (int8, fp8-e4m3) and their scales
    quantized_kv_cache.py  QuantizedKVCache: keys and values stored in one of them
    stopping.py        Sequence: EOS, max_new_tokens, stop strings, text that waits for a whole
                       UTF-8 character
    results.py         Completion: the fields every runner returns for one prompt
    agreement.py       agree: whether two runs gave the same tokens (up to a near tie on a GPU)
    step_timing.py     the loop timed step by step, with and without the KV cache
    sliding_window.py  sliding-window attention and the ring-buffer cache it allows
    kv_designs.py      the KV cache's bytes per token under MHA, GQA, MQA, MLA and windows

Names are imported on first use: the model's attention layer reads `kv_cache` without pulling
in the loop.
"""

from ..utils.lazy import lazy_exports

_EXPORTS = {
    "generate": "loop", "stream": "loop", "timed_stream": "loop", "token_steps": "loop",
    "start": "loop", "Setup": "loop", "Generation": "loop", "TimedStream": "loop",
    "left_pad": "loop", "positions": "loop", "make_request": "request",
    "GenerationRequest": "request", "encode_prompts": "request", "eos_ids": "request",
    "KVCache": "kv_cache", "KVCacheProtocol": "kv_cache", "KVCacheBase": "kv_cache",
    "capability": "kv_cache", "LayerSlots": "kv_cache",
    "Sequence": "stopping", "Completion": "results", "agree": "agreement",
    "RingKVCache": "sliding_window", "QuantizedKVCache": "quantized_kv_cache",
    "HeadRanges": "kv_quant", "kv_format": "kv_quant",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
