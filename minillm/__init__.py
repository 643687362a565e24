"""minillm: a small, readable LLM inference engine, built chapter by chapter in the course.

Names are imported on first use, so `import minillm` stays fast and each chapter's part can be
read on its own.
"""

from .utils.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "model_file": "files",
    "fetch": "files",
    "cache_dir": "files",
    "ModelFileError": "files",
    "load_reference": "reference",
    "KVCache": "generation.kv_cache",
    "pick_device": "utils.devices",
    "use_free_cores": "utils.cores",
    "load_tokenizer": "tokenizer",
    "load": "loading",
    "load_model": "loading",
    "generate": "generation.loop",
    "GenerationConfig": "decoding",
    "RequestMetrics": "measure.metrics",
    "throughput": "measure.metrics",
    "stream": "generation.loop",
    "timed_stream": "generation.loop",
    "Engine": "engine",
    "quantize": "quant",
    "speculative_generate": "speculative",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
