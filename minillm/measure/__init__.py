"""Measuring inference (chapter 05): what a request costs in time, bytes and memory.

    metrics.py      RequestMetrics (TTFT, TPOT, latency), throughput, TokenClock
    roofline.py     the roofline: a step's FLOPs and bytes against the machine's two roofs
    bandwidth.py    the measured read bandwidth and the decode speed it bounds
    memory_peak.py  the peak bytes a piece of PyTorch code allocates, on any device
    comparison.py   two timings interleaved, with a verdict only when every repetition agrees

The clocks that wait for a device (Timer, best_time) are in minillm.utils.devices.
"""

from ..utils.lazy import lazy_exports

_EXPORTS = {
    "RequestMetrics": "metrics", "Throughput": "metrics", "TokenClock": "metrics",
    "TokenEvent": "metrics", "throughput": "metrics", "predict_latency": "metrics",
    "Roof": "roofline", "step_cost": "roofline", "measure_roof": "roofline",
    "peak_matmul_flops": "roofline", "fastest_matmul": "roofline", "matmul_weights": "roofline",
    "read_bandwidth": "bandwidth", "decode_bound": "bandwidth", "peak_bytes": "memory_peak",
    "compare": "comparison", "Comparison": "comparison", "load_average": "comparison",
    "TOO_NOISY": "comparison",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
