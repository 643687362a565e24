"""Prefill/decode disaggregation (预填充/解码分离), simulated with two engines in one process.

In one engine, a step that carries a prompt's prefill is long, and every request decoding in
that step waits for it: prefill interferes with decode (TPOT grows), and a prompt may wait for
decode steps (TTFT grows). Disaggregated serving (DistServe, Mooncake; vLLM's and SGLang's PD
modes) runs the two phases on different machines: a prefill engine computes each prompt's keys
and values and its first token, then hands the KV blocks to a decode engine, whose steps carry
only decode rows.

Here both engines run on this machine, one step at a time, each on its own ClockedEngine clock:
the measured seconds of each engine's steps move only its own clock, so the two behave as two
machines side by side. The hand-over copies the request's blocks from the prefill engine's pool
into blocks of the decode engine's pool (a real deployment sends them over NVLink or RDMA); its
measured time is added before the decode engine may use them.

    PrefillScheduler   ends a request at its first token but keeps its blocks for the hand-over
    DecodeScheduler    takes a request in with its prompt already computed (`receive`)
    serve_colocated    requests arriving at given times, served by one engine or several
                       side by side (each takes every k-th request)
    serve_disaggregated the same arrivals, a prefill engine and a decode engine
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..measure.metrics import RequestMetrics
from ..utils.devices import Timer
from ..utils.stats import percentile
from ..utils.wording import text
from .engine import Engine
from .paged_cache import PagedKVPool
from .request import RUNNING, Request
from .scheduler import ContinuousScheduler
from .virtual_clock import ClockedEngine


class PrefillScheduler(ContinuousScheduler):
    """Continuous batching for a prefill engine: a request ends when its first token is chosen
    (the engine is given max_new_tokens=1), and its blocks are not freed but wait in `handoffs`
    until the decode side has copied them (`release_handoff`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handoffs: list[tuple[Request, list[int]]] = []

    def finish(self, request: Request) -> None:
        self.running.remove(request)
        self.handoffs.append((request, list(request.block_table)))

    def release_handoff(self, table: list[int]) -> None:
        self.blocks.free_table(table)


class DecodeScheduler(ContinuousScheduler):
    """Continuous batching for a decode engine: `receive` admits a queued request whose prompt's
    keys and values arrive from elsewhere, with blocks for them; nothing is prefilled here."""

    uses_prefix_cache = False

    def can_receive(self, n_tokens: int) -> bool:
        return (self.num_seqs() < self.max_num_seqs
                and self.blocks.blocks_for(n_tokens + 1) <= self.blocks.num_free)

    def receive(self, request: Request, n_tokens: int) -> list[int]:
        """Admit `request` (queued by add_request) with `n_tokens` of it already computed
        elsewhere: allocate their blocks and return the table, for the caller to fill."""
        self.waiting.remove(request)
        request.block_table = []
        self.blocks.grow(request.block_table, n_tokens)
        request.num_computed = n_tokens
        request.admitted = True
        request.status = RUNNING
        self.running.append(request)
        return request.block_table


def copy_blocks_between(src: PagedKVPool, src_table: list[int], dst: PagedKVPool,
                        dst_table: list[int]) -> int:
    """Copy every layer's keys and values of the blocks `src_table` of pool `src` into the
    blocks `dst_table` of pool `dst` (same block size); returns the bytes copied."""
    if src.block_size != dst.block_size or len(src_table) != len(dst_table):
        raise ValueError("the two pools need the same block size, and the tables equal lengths")
    if src.slot_layout() != dst.slot_layout() and "quantized" in (src.slot_layout()[0],
                                                                  dst.slot_layout()[0]):
        raise ValueError(f"a quantized pool's blocks copy only into a pool of the same format: "
                         f"{src.slot_layout()} into {dst.slot_layout()}")
    if not src_table:
        return 0
    bs = src.block_size
    rows = lambda table, device: torch.cat(  # noqa: E731
        [torch.arange(b * bs, (b + 1) * bs) for b in table]).to(device)
    src_rows, dst_rows = rows(src_table, src.device), rows(dst_table, dst.device)
    for s, d in zip(src.slot_tensors(), dst.slot_tensors()):
        d[dst_rows] = s[src_rows].to(d.device, d.dtype)
    return src.bytes_per_block * len(src_table)


@dataclass
class Served:
    """What serving a set of arrivals gave: each request's metrics on the clock of the machine
    that produced its tokens, in arrival order, and the engines' busy seconds."""

    metrics: list[RequestMetrics]
    outputs: list = field(repr=False)
    busy_seconds: dict = field(default_factory=dict)
    handoff_bytes: int = 0
    handoff_seconds: float = 0.0
    interference: dict | None = None  # prefill_interference of the engines' steps, if recorded

    def summary(self) -> dict:
        """TTFT and TPOT at p50 and p90 over the requests, and the longest gap between two
        tokens of any request, in seconds; the last key is "最长间隔" under use_language("zh")."""
        ttft, tpot = [m.ttft for m in self.metrics], [m.tpot for m in self.metrics]
        return {"TTFT p50": percentile(ttft, 50), "TTFT p90": percentile(ttft, 90),
                "TPOT p50": percentile(tpot, 50), "TPOT p90": percentile(tpot, 90),
                text("longest gap", "最长间隔"): max((g for m in self.metrics for g in m.gaps), default=0.0)}


def prefill_interference(engines) -> dict | None:
    """What no load can change about how prefill got in decode's way, counted in the engines'
    recorded steps (Engine(record=True); None if one was not recorded): "stalled decode tokens",
    the decode rows that ran in a step which also computed a prompt (more of one than its last
    token: a disaggregated decode engine computes only that one), and "prompt tokens beside
    decodes", the prompt tokens those steps computed."""
    if not all(engine.record for engine in engines):
        return None
    stalled = beside = 0
    for engine in engines:
        for step in engine.steps:
            prompt = sum(n for _, n, kind in step.items if kind in ("prefill", "recompute")
                         and n > 1)
            decodes = sum(1 for _, _, kind in step.items if kind == "decode")
            if prompt and decodes:
                stalled += decodes
                beside += prompt
    return {"stalled decode tokens": stalled, "prompt tokens beside decodes": beside}


def _arrivals(arrivals):
    """(time, prompt ids, settings) triples, by time."""
    return sorted(((float(at), list(prompt), dict(settings)) for at, prompt, settings in arrivals),
                  key=lambda a: a[0])


def serve_colocated(engines, arrivals) -> Served:
    """Serve `arrivals`, (arrival time, prompt ids, settings) triples, with one engine, or with
    several side by side (a list: each takes every k-th request, data parallelism), each engine
    on a clock of its own: a request joins its engine at its arrival time."""
    engines = list(engines) if isinstance(engines, (list, tuple)) else [engines]
    arrivals = _arrivals(arrivals)
    served, busy = {}, {}
    for k, engine in enumerate(engines):
        pending = arrivals[k::len(engines)]
        clocked = ClockedEngine(engine)
        while pending or clocked.has_work():
            if not clocked.has_work():
                clocked.wait_until(pending[0][0])
            while pending and pending[0][0] <= clocked.now:
                at, prompt, settings = pending.pop(0)
                rid = clocked.add(prompt, at=at, **settings)
                served[rid, k] = clocked
            clocked.step()
        busy[f"engine {k}"] = clocked.busy_seconds
    order = sorted(served, key=lambda key: (served[key].arrival[key[0]], key[1]))
    return Served([served[key].metrics(key[0]) for key in order],
                  [served[key].finished[(key[0], 0)] for key in order], busy,
                  interference=prefill_interference(engines))


def serve_disaggregated(prefill: Engine, decode: Engine, arrivals) -> Served:
    """Serve `arrivals` with a prefill engine (scheduler=PrefillScheduler) and a decode engine
    (scheduler=DecodeScheduler), each on its own clock. The prefill engine computes a prompt;
    the keys and values of all its tokens but the last are copied into the decode engine's pool
    (the copy's measured seconds delay them), and the decode engine runs the last prompt token,
    whose logits give the first token, then the rest (the prefill engine's own first token is
    dropped: this way the decode engine's sampler chooses every token)."""
    if not isinstance(prefill.scheduler, PrefillScheduler) or \
            not isinstance(decode.scheduler, DecodeScheduler):
        raise TypeError("serve_disaggregated needs Engine(..., scheduler=PrefillScheduler) and "
                        "Engine(..., scheduler=DecodeScheduler)")
    pending = _arrivals(arrivals)
    p, d = ClockedEngine(prefill), ClockedEngine(decode)
    ready = []  # (time the blocks are ready, arrival, prompt, settings, prefill table)
    ids, moved_bytes, moved_s = [], 0, 0.0
    settings_of = {}

    def next_prefill_time():
        if p.has_work():
            return p.now
        return max(p.now, pending[0][0]) if pending else None

    def next_decode_time():
        if d.has_work():
            return d.now
        return max(d.now, ready[0][0]) if ready else None

    while pending or ready or p.has_work() or d.has_work():
        tp, td = next_prefill_time(), next_decode_time()
        if tp is not None and (td is None or tp <= td):
            p.wait_until(tp)
            while pending and pending[0][0] <= p.now:
                at, prompt, settings = pending.pop(0)
                rid = p.add(prompt, at=at, **{**settings, "max_new_tokens": 1})
                settings_of[rid] = (at, prompt, settings)
            p.step()
            for request, table in prefill.scheduler.handoffs:
                ready.append((p.now, *settings_of.pop(request.id), table))
            prefill.scheduler.handoffs.clear()
            continue
        d.wait_until(td)
        while ready and ready[0][0] <= d.now and decode.scheduler.can_receive(len(ready[0][2])):
            _, at, prompt, settings, table = ready.pop(0)
            rid = d.add(prompt, at=at, **settings)
            target = decode.scheduler.receive(decode.requests[rid], len(prompt) - 1)
            with Timer(decode.device) as copy:
                moved_bytes += copy_blocks_between(prefill.pool, table[:len(target)],
                                                   decode.pool, target)
            prefill.scheduler.release_handoff(table)
            moved_s += copy.seconds
            d.now += copy.seconds
            ids.append(rid)
        if not d.has_work():
            raise RuntimeError("the decode engine's pool cannot hold a handed-over request: "
                               "give it more blocks")
        d.step()
    ids.sort(key=lambda rid: d.arrival[rid])
    return Served([d.metrics(rid) for rid in ids], [d.finished[(rid, 0)] for rid in ids],
                  {"prefill": p.busy_seconds, "decode": d.busy_seconds}, moved_bytes, moved_s,
                  prefill_interference([prefill, decode]))
