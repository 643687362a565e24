"""GET /metrics: the server's state in Prometheus' text format, with the `prometheus-client`
package. Names and labels are vLLM's (docs.vllm.ai "Production Metrics"), with minillm_ in place
of vllm:, and every sample carries a `model_name` label, so dashboards written for vLLM read them
after a change of prefix.

    minillm_model_info{weights=...}       1, with the weight format served as a label    (info)
    minillm_num_requests_running          sequences in the engine's running batch       (gauge)
    minillm_num_requests_waiting          requests queued for admission                  (gauge)
    minillm_kv_cache_usage_perc           fraction of KV-cache blocks in use, 0 to 1     (gauge)
    minillm_kv_blocks_used / _total       KV-cache blocks held, and in the pool          (gauges)
    minillm_prompt_tokens_total           prompt tokens of accepted requests             (counter)
    minillm_generation_tokens_total       tokens generated                                (counter)
    minillm_request_success_total         sequences ended, by finished_reason: stop, length,
                                          abort (vLLM's reasons; an EOS token is a stop) (counter)
    minillm_num_preemptions_total         sequences preempted (recomputed later)          (counter)
    minillm_prefix_cache_queries_total    prompt tokens looked up in the prefix cache     (counter)
    minillm_prefix_cache_hits_total       of those, tokens found there                    (counter)
    minillm_time_to_first_token_seconds, minillm_time_per_output_token_seconds,
    minillm_e2e_request_latency_seconds   arrival to the last token
    minillm_request_queue_time_seconds    arrival to the first admission to the batch   (histograms)

Each app has its own registry, so two servers in one process (tests) do not mix their numbers.
The gauges and the engine's own counters (preemptions, prefix cache) are read from the engine
when scraped; the rest are counted by the engine loop as outputs arrive.
"""

from __future__ import annotations

import math

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, Info,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .protocol import FINISH_REASONS

TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                0.4, 0.5, 0.75, 1.0, 2.5)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0)  # vLLM's buckets for whole-request times
LABEL = ["model_name"]


class EngineCounters:
    """A collector: the engine's cumulative counts (they live in the engine), read at scrape."""

    COUNTERS = (("num_preemptions", "preemptions", "Sequences preempted"),
                ("prefix_cache_queries", "prefix_cache_queried_tokens",
                 "Prompt tokens looked up in the prefix cache"),
                ("prefix_cache_hits", "prefix_cache_hit_tokens",
                 "Prompt tokens found in the prefix cache"))

    def __init__(self, engine, model_name: str):
        self.engine, self.model_name = engine, model_name

    def collect(self):
        stats = self.engine.stats()
        for name, key, help_text in self.COUNTERS:
            family = CounterMetricFamily(f"minillm_{name}", help_text, labels=LABEL)
            family.add_metric([self.model_name], stats[key])
            yield family


class ServerMetrics:
    """The metrics of one server over `engine`, served as `model_name`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine, model_name: str = "minillm"):
        self.registry = registry = CollectorRegistry()

        def gauge(name, help_text):
            return Gauge(name, help_text, LABEL, registry=registry).labels(model_name)

        def histogram(name, help_text, buckets):
            return Histogram(name, help_text, LABEL, buckets=buckets,
                             registry=registry).labels(model_name)

        def blocks():
            return engine.stats()["kv_blocks_used"]

        total = engine.stats()["num_blocks"]
        Info("minillm_model", "The model served and how its weights are stored", LABEL,
             registry=registry).labels(model_name).info({"weights": engine.weights})
        gauge("minillm_num_requests_running", "Sequences in the running batch"
              ).set_function(engine.num_running)
        gauge("minillm_num_requests_waiting", "Requests waiting to be admitted"
              ).set_function(engine.num_waiting)
        gauge("minillm_kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1)"
              ).set_function(lambda: blocks() / total)
        gauge("minillm_kv_blocks_used", "KV-cache blocks in use").set_function(blocks)
        gauge("minillm_kv_blocks_total", "KV-cache blocks in the pool").set(total)
        self.prompt_tokens = Counter("minillm_prompt_tokens", "Prompt tokens of accepted "
                                     "requests", LABEL, registry=registry).labels(model_name)
        self.generation_tokens = Counter("minillm_generation_tokens", "Tokens generated", LABEL,
                                         registry=registry).labels(model_name)
        self.success = Counter("minillm_request_success", "Sequences that ended, by reason",
                               LABEL + ["finished_reason"], registry=registry)
        self.model_name = model_name
        self.ttft = histogram("minillm_time_to_first_token_seconds", "Time to first token",
                              TTFT_BUCKETS)
        self.tpot = histogram("minillm_time_per_output_token_seconds",
                              "Time per output token after the first", TPOT_BUCKETS)
        self.e2e = histogram("minillm_e2e_request_latency_seconds",
                             "Arrival to the last token", REQUEST_BUCKETS)
        self.queue = histogram("minillm_request_queue_time_seconds",
                               "Arrival to the first admission to the running batch",
                               REQUEST_BUCKETS)
        registry.register(EngineCounters(engine, model_name))

    def accepted(self, prompt_tokens: int) -> None:
        self.prompt_tokens.inc(prompt_tokens)

    def observe(self, out) -> None:
        """One engine output: every output but a cancellation carries one new token."""
        if out.finished:
            reason = FINISH_REASONS.get(out.finish_reason, out.finish_reason)
            self.success.labels(self.model_name, reason).inc()
        if out.finish_reason == "cancelled":
            return
        self.generation_tokens.inc()
        if out.finished:
            m = out.metrics
            if m is not None and m.n_tokens:
                self.ttft.observe(m.ttft)
                self.e2e.observe(m.latency)
                if not math.isnan(m.tpot):
                    self.tpot.observe(m.tpot)
            if out.queue_time is not None:
                self.queue.observe(out.queue_time)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
