"""The chapter's experiments, as functions each process can import: the same prompt through the
whole model in one process and through tensor- or pipeline-parallel shares of it in several."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .launch import run_distributed
from .pipeline_parallel import PipelineStage
from .tensor_parallel import all_reduce_cost, shard_model
from ..utils.wording import text

# Where the demos' ranks keep their tensors (`_load`): the CPU, so they talk over gloo even on a
# machine with GPUs.
DEVICE = "cpu"


def _load(source, fast: bool = True):
    """The model (on the CPU: the ranks here are processes on one machine; with a GPU each, the
    launcher would give rank r cuda:r) and its tokenizer."""
    from ..loading import load_model
    from ..tokenizer import load_tokenizer

    model = load_model(source, device=DEVICE, fast=fast)
    try:
        tokenizer = load_tokenizer(source)
    except (ValueError, TypeError, FileNotFoundError):
        tokenizer = None
    return model, tokenizer


def _greedy_ids(model, tokenizer, prompt_ids, new_tokens):
    from ..generation.loop import generate

    result = generate(model, tokenizer, list(prompt_ids), max_new_tokens=new_tokens)
    return list(result.token_ids)


def tensor_parallel_rank(rank, world_size, source, prompt_ids, new_tokens):
    from ..fast import optimize_in_place

    model, tokenizer = _load(source, fast=False)  # split the readable layers, then fuse
    tp = optimize_in_place(shard_model(model, rank, world_size))
    with torch.inference_mode():
        logits = tp(torch.tensor([prompt_ids]))
    prefill = (tp.comm.calls, tp.comm.bytes)
    tokens = _greedy_ids(tp, tokenizer, prompt_ids, new_tokens) if new_tokens else []
    return {"logits": logits[0] if rank == 0 else None, "tokens": tokens,
            "prefill_calls": prefill[0], "prefill_bytes": prefill[1],
            "kv_heads": list(tp.kv_heads), "ffn_rows": (tp.ffn_rows.start, tp.ffn_rows.stop),
            "total_calls": tp.comm.calls, "total_bytes": tp.comm.bytes}


def pipeline_rank(rank, world_size, source, prompt_ids):
    model, _ = _load(source)
    stage = PipelineStage(model, rank, world_size)
    with torch.inference_mode():
        logits = stage.forward(torch.tensor([prompt_ids]))
    return {"logits": None if logits is None else logits[0], "layers": list(stage.layers),
            "held_parameters": stage.held_parameters(), "sent_bytes": stage.sent_bytes}


@dataclass
class ParallelReport:
    max_abs_diff: float
    top1_agree: bool
    tokens_equal: bool | None
    reference_tokens: list
    parallel_tokens: list
    ranks: list

    def __str__(self) -> str:
        lines = [text("max |logit difference| = {diff:.2e}, top-1 agrees at every position: "
                      "{top1}", "最大 |logit 差| = {diff:.2e}，每个位置的第一名都一致：{top1}",
                      diff=self.max_abs_diff, top1=self.top1_agree)]
        if self.tokens_equal is not None:
            lines.append(text("greedy tokens equal: {same}", "贪心解码的词元相同：{same}",
                              same=self.tokens_equal))
        return "\n".join(lines)


def _reference(source, prompt_ids, new_tokens):
    model, tokenizer = _load(source)
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids]))[0]
    tokens = _greedy_ids(model, tokenizer, prompt_ids, new_tokens) if new_tokens else []
    return logits, tokens


def compare_tensor_parallel(source, prompt_ids, world_size=2, new_tokens=8) -> ParallelReport:
    """Logits and greedy tokens of the whole model against a `world_size`-way tensor-parallel run."""
    ref_logits, ref_tokens = _reference(source, prompt_ids, new_tokens)
    ranks = run_distributed(tensor_parallel_rank, world_size,
                            (source, list(prompt_ids), new_tokens), device=DEVICE)
    logits = ranks[0]["logits"]
    return ParallelReport((logits - ref_logits).abs().max().item(),
                          bool((logits.argmax(-1) == ref_logits.argmax(-1)).all()),
                          all(r["tokens"] == ref_tokens for r in ranks) if new_tokens else None,
                          ref_tokens, ranks[0]["tokens"], ranks)


def compare_pipeline_parallel(source, prompt_ids, world_size=2) -> ParallelReport:
    ref_logits, _ = _reference(source, prompt_ids, 0)
    ranks = run_distributed(pipeline_rank, world_size, (source, list(prompt_ids)), device=DEVICE)
    logits = ranks[-1]["logits"]
    return ParallelReport((logits - ref_logits).abs().max().item(),
                          bool((logits.argmax(-1) == ref_logits.argmax(-1)).all()), None, [], [],
                          ranks)


__all__ = ["compare_tensor_parallel", "compare_pipeline_parallel", "all_reduce_cost",
           "ParallelReport"]
