"""Which path a decode step takes, decided in one place, with the reason for each faster path not
taken. A model's decode step (one new token per row, no padding, a contiguous KV cache) runs one
of these, fastest first:

    cuda graph        on CUDA at batch 1, the fused step replayed from a CUDA graph (fast/graph.py)
    one C call        on a CPU, every block in one call of decode_blocks.c (fast/blocks.py)
    python + kernels  the fused step in Python (fast/decode.py), its small operations on minillm's
                      C kernels (`dispatch.decode_step` says which)
    python            the fused step in Python on PyTorch's operations (a GPU without a graph, or
                      a CPU where the kernels cannot run)
    module            the model's own forward, layer by layer: a model minillm.fast did not
                      optimize, a family without the fused parts, or a step the fused one does not
                      take (padding, a prompt, a cache that is not contiguous)

`choose` is the rule; `FusedDecode` (fast/decode.py) asks it at every step with that step's
facts, and `plan_of(model)` asks it for a model's usual step (one row, its own KVCache), which
`python -m minillm doctor` and `bench step` print. The row limits and kernel routes it reads
are dispatch.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dispatch import NO_DECODE_KERNELS, DecodeKernels

PATHS = ("cuda graph", "one C call", "python + kernels", "python", "module")


@dataclass(frozen=True)
class DecodePlan:
    path: str  # one of PATHS
    kernels: DecodeKernels  # which small operations run on minillm's kernels (python + kernels)
    why: tuple[str, ...] = ()  # why each faster path was not taken, fastest first

    def __str__(self) -> str:
        return self.path + (f" ({'; '.join(self.why)})" if self.why else "")


@dataclass(frozen=True)
class StepFacts:
    """What the rule looks at, from the model's fused step and one decode step."""

    device: str  # "cpu", "cuda", "mps"
    graph_ready: bool  # a CUDA graph runner is installed and this step's cache suits it
    graph_on: bool  # `cuda_graph` switched on (MINILLM_CUDA_GRAPH, fused.cuda_graph)
    kernels: DecodeKernels  # dispatch.decode_step for this step's activations and cache
    c_blocks_on: bool  # `c_blocks` switched on
    blocks_alike: bool  # every block has one shape the C computes (blocks.structure_fits)
    rows_fit: bool  # the step's rows fit one decode_blocks call (dispatch's row limits)
    cache_fits: bool  # every layer's cache lies as the C reads it


def choose(facts: StepFacts, explain: bool = False) -> DecodePlan:
    """The path for a step with these facts. `explain` adds the reasons (a step does without)."""
    why = []
    if facts.device == "cuda":
        if facts.graph_on and facts.graph_ready:
            return DecodePlan("cuda graph", NO_DECODE_KERNELS)
        if explain:
            why.append("CUDA graphs are switched off (MINILLM_CUDA_GRAPH=0 or "
                       "fused_decode.cuda_graph = False)" if not facts.graph_on else
                       "no CUDA graph for this step (batch > 1, a cache without fixed slots, or "
                       "a capture that failed)")
    elif explain:
        why.append(f"no CUDA graph on {facts.device}")
    if facts.device != "cpu":
        return DecodePlan("python", NO_DECODE_KERNELS, tuple(why))
    one_call = (facts.c_blocks_on and facts.blocks_alike and facts.kernels.every
                and facts.rows_fit and facts.cache_fits)
    if one_call:
        return DecodePlan("one C call", facts.kernels, tuple(why))
    if explain:
        why.append(_why_not_one_call(facts))
    if facts.kernels.any:
        return DecodePlan("python + kernels", facts.kernels, tuple(why))
    if explain:
        why.append("minillm's C kernels cannot run this step (not float32 activations, no "
                   "compiler, or MINILLM_NO_KERNEL set)")
    return DecodePlan("python", facts.kernels, tuple(why))


def _why_not_one_call(facts: StepFacts) -> str:
    if not facts.c_blocks_on:
        return "one C call is switched off (fused_decode.c_blocks = False)"
    if not facts.blocks_alike:
        return "the blocks are not all one shape the C computes (a family's own qk_norm, " \
               "mixed shapes, or a parallel projection)"
    if not facts.kernels.every:
        return "not every small operation of the step runs on minillm's kernels"
    if not facts.rows_fit:
        return "more rows than one decode_blocks call takes (dispatch's row limits)"
    return "the cache does not lie as the C reads it (float32, contiguous, one shape per layer)"


def plan_of(model) -> DecodePlan:
    """The path of `model`'s usual decode step: one row over its own KVCache, as
    `minillm.generate` runs it."""
    fused = getattr(model, "fused_decode", None)
    if fused is None:
        optimized = getattr(model, "weight_format", None) is not None
        reason = ("the model is not optimized (minillm.load(..., fast=False), or "
                  "minillm.fast.optimize not called)" if not optimized else
                  "its family has no fused decode step (minillm.fast fuses Llama, Qwen2 and "
                  "Qwen3)")
        return DecodePlan("module", NO_DECODE_KERNELS, (reason,))
    return fused.plan()
