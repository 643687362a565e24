"""GET /metrics: the server's state in Prometheus' text format, with the `prometheus-client`
package (the names follow vLLM's, with a minillm_ prefix).

    minillm_num_requests_running      sequences in the engine's running batch      (gauge)
    minillm_num_requests_waiting      requests queued for admission                 (gauge)
    minillm_kv_blocks_used            KV-cache blocks held; of minillm_kv_blocks_total (gauge)
    minillm_prompt_tokens_total       prompt tokens of accepted requests            (counter)
    minillm_generation_tokens_total   tokens generated                               (counter)
    minillm_request_finished_total    sequences ended, by finish_reason              (counter)
    minillm_time_to_first_token_seconds / minillm_time_per_output_token_seconds     (histograms)

Each app has its own registry, so two servers in one process (tests) do not mix their numbers.
The gauges are read from the engine when scraped; the rest are counted by the engine loop as
outputs arrive.
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                0.4, 0.5, 0.75, 1.0, 2.5)


class ServerMetrics:
    """The metrics of one server over `engine`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine):
        self.registry = registry = CollectorRegistry()
        Gauge("minillm_num_requests_running", "Sequences in the running batch",
              registry=registry).set_function(engine.num_running)
        Gauge("minillm_num_requests_waiting", "Requests waiting to be admitted",
              registry=registry).set_function(engine.num_waiting)
        Gauge("minillm_kv_blocks_used", "KV-cache blocks in use",
              registry=registry).set_function(lambda: engine.stats()["kv_blocks_used"])
        Gauge("minillm_kv_blocks_total", "KV-cache blocks in the pool",
              registry=registry).set(engine.stats()["num_blocks"])
        self.prompt_tokens = Counter("minillm_prompt_tokens", "Prompt tokens of accepted requests",
                                     registry=registry)
        self.generation_tokens = Counter("minillm_generation_tokens", "Tokens generated",
                                         registry=registry)
        self.finished = Counter("minillm_request_finished", "Sequences that ended",
                                ["finish_reason"], registry=registry)
        self.ttft = Histogram("minillm_time_to_first_token_seconds", "Time to first token",
                              buckets=TTFT_BUCKETS, registry=registry)
        self.tpot = Histogram("minillm_time_per_output_token_seconds",
                              "Time per output token after the first", buckets=TPOT_BUCKETS,
                              registry=registry)

    def accepted(self, prompt_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)

    def observe(self, out) -> None:
        """One engine output: every output but a cancellation carries one new token."""
        if out.finish_reason == "cancelled":
            self.finished.labels("cancelled").inc()
            return
        self.generation_tokens.inc()
        if out.finished:
            self.finished.labels(out.finish_reason).inc()
            m = out.metrics
            if m is not None and m.n_tokens:
                self.ttft.observe(m.ttft)
                if not math.isnan(m.tpot):
                    self.tpot.observe(m.tpot)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
