"""Beam search (束搜索): keep the `num_beams` best partial sequences instead of one.

Each step every running beam proposes its continuations; the best 2 x num_beams of all of them
(more with several EOS ids) are ranked by total log-probability. Candidates that just ended (EOS,
or max_new_tokens reached) among the top num_beams go to the finished list, scored
sum(log p) / new_tokens ** length_penalty; the best num_beams that did not end run on.

This follows transformers' `_beam_search` (transformers/generation/utils.py) step for step, for
one prompt: the same candidate count, the same -1e9 masks, the same early-stopping rules, so it
picks the same tokens. Sampling inside beam search is not supported (GenerationConfig refuses it).
Stop strings are not applied here; `minillm.generate` cuts the text at one afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.devices import model_device
from ..utils.notices import say_once
from .processors import build_processors

MASK = -1.0e9  # transformers' "never pick this" score; it keeps tensors finite


@dataclass
class Hypothesis:
    """One finished beam."""

    token_ids: list[int]   # the new tokens, without the prompt
    score: float           # sum of log-probabilities / len(token_ids) ** length_penalty
    finish_reason: str     # "eos" or "length"


def _could_cache(model) -> bool:
    """Whether `model` is a minillm model (its config gives a cache's shape), which a cache would
    spare running the whole sequence every step."""
    config = getattr(model, "config", None)
    return all(hasattr(config, name) for name in ("n_layers", "n_kv_heads", "head_dim"))


def _eos_list(eos_token_ids) -> list[int]:
    if eos_token_ids is None:
        return []
    if isinstance(eos_token_ids, int):
        return [eos_token_ids]
    return [int(t) for t in eos_token_ids]


@torch.no_grad()
def beam_search(model, prompt_ids: list[int], config, eos_token_ids=None, *,
                cache=None) -> list[Hypothesis]:
    """Beam search from one prompt. Returns `config.num_return_sequences` Hypothesis objects,
    best score first.

    model          model(input_ids, cache=None) -> logits (batch, seq, vocab)
    prompt_ids     the prompt's token ids
    config         a GenerationConfig (num_beams, length_penalty, early_stopping,
                   num_return_sequences, max_new_tokens and the repeat / bad-word rules)
    eos_token_ids  id or ids that end a beam (default: config.eos_token_id)
    cache          an empty KV cache of one row with room for the prompt and max_new_tokens,
                   that can `reorder` its rows (chapter 03's KVCache.for_model(model, 1, n));
                   `minillm.generate` passes one. Without it every step runs the whole sequence."""
    if config.do_sample:
        raise ValueError("beam_search does not sample: use do_sample=False with num_beams > 1")
    prompt_ids = [int(t) for t in prompt_ids]
    if not prompt_ids:
        raise ValueError("beam_search needs a prompt of at least one token")
    if eos_token_ids is None:
        eos_token_ids = config.eos_token_id
    eos = _eos_list(eos_token_ids)
    num_beams, length_penalty = config.num_beams, config.length_penalty
    early_stopping = config.early_stopping
    processors = build_processors(config, eos)

    device = model_device(model)
    prompt_len = len(prompt_ids)
    max_len = prompt_len + config.max_new_tokens
    eos_tensor = torch.tensor(eos, dtype=torch.long, device=device)
    # Keep enough candidates that num_beams survive even if every beam's best is an EOS.
    n_candidates = max(2, 1 + len(eos)) * num_beams
    in_top_beams = torch.arange(n_candidates, device=device) < num_beams

    # Running beams: all start as the prompt; only beam 0 is "live" at first (the others score
    # MASK), so the first step does not pick the same token num_beams times.
    running = torch.full((num_beams, max_len), -1, dtype=torch.long, device=device)
    running[:, :prompt_len] = torch.tensor(prompt_ids, device=device)
    running_scores = torch.zeros(num_beams, device=device)
    running_scores[1:] = MASK
    # Finished beams: the best num_beams so far, with their length-penalised scores.
    finished = running.clone()
    finished_scores = torch.full((num_beams,), MASK, device=device)
    finished_len = torch.full((num_beams,), prompt_len, dtype=torch.long, device=device)
    is_finished = torch.zeros(num_beams, dtype=torch.bool, device=device)
    can_improve = True  # transformers' "early-stop heuristic unsatisfied"

    prompt = running[:1, :prompt_len]
    if cache is None and _could_cache(model):
        say_once("beam_search: no cache given, so every step runs the whole sequence (slower); "
                 "pass cache=KVCache.for_model(model, 1, len(prompt) + max_new_tokens)")
    if cache is not None:
        if cache.length or cache.batch_size != 1:
            raise ValueError(f"beam_search needs an empty cache of one row; this one holds "
                             f"{cache.length} tokens in {cache.batch_size} rows")
        logits = model(prompt, cache=cache)[:, -1, :].float()
        cache.reorder(torch.zeros(num_beams, dtype=torch.long, device=device))  # 1 row -> beams
    else:
        logits = model(prompt)[:, -1, :].float()
    logits = logits.expand(num_beams, -1)
    cur_len = prompt_len

    while True:
        vocab = logits.shape[-1]
        log_probs = torch.log_softmax(logits, dim=-1)
        log_probs = processors(running[:, :cur_len], log_probs)
        totals = (log_probs + running_scores[:, None]).reshape(-1)  # (num_beams * vocab,)

        # 1. The best candidates over all beams: which beam they extend, with which token.
        cand_scores, flat = torch.topk(totals, n_candidates)
        parent, token = flat // vocab, flat % vocab
        candidates = running[parent]
        candidates[:, cur_len] = token
        ends = torch.isin(token, eos_tensor) | (cur_len + 1 >= max_len)

        # 2. The best num_beams candidates that did not end keep running.
        alive_scores = cand_scores + ends.float() * MASK
        keep = torch.topk(alive_scores, num_beams).indices
        running, running_scores = candidates[keep], alive_scores[keep]
        beam_parents = parent[keep]

        # 3. Ended candidates among the top num_beams join the finished list if good enough.
        new_len = cur_len + 1 - prompt_len
        scores = cand_scores / (new_len ** length_penalty)
        if early_stopping is True and bool(is_finished.all()):
            scores = scores + MASK  # the list is full and early_stopping forbids replacing
        if not can_improve:
            scores = scores + MASK
        just_finished = ends & in_top_beams
        scores = scores + (~just_finished).float() * MASK
        merged_scores = torch.cat([finished_scores, scores])
        best = torch.topk(merged_scores, num_beams).indices
        finished = torch.cat([finished, candidates])[best]
        finished_scores = merged_scores[best]
        finished_len = torch.cat([finished_len, torch.full_like(token, cur_len + 1)])[best]
        is_finished = torch.cat([is_finished, just_finished])[best]

        cur_len += 1
        # 4. Can a running beam still beat the worst finished one? (transformers' heuristic:
        # assume the best running beam keeps its score per token at the current length, or,
        # with early_stopping="never" and a positive penalty, grows to the maximum length.)
        if early_stopping == "never" and length_penalty > 0.0:
            best_length = max_len - prompt_len
        else:
            best_length = cur_len - prompt_len
        best_possible = running_scores[0] / (best_length ** length_penalty)
        worst_finished = torch.where(is_finished, finished_scores.min(),
                                     finished_scores.new_tensor(MASK))
        can_improve = can_improve and bool((best_possible > worst_finished).any())

        done = (not can_improve or (early_stopping is True and bool(is_finished.all()))
                or bool(ends.all()))
        if done:
            break
        next_tokens = running[:, cur_len - 1:cur_len]
        if cache is not None:
            cache.reorder(beam_parents)
            logits = model(next_tokens, cache=cache)[:, -1, :].float()
        else:
            logits = model(running[:, :cur_len])[:, -1, :].float()

    hypotheses = []
    for row in range(config.num_return_sequences):
        tokens = finished[row, prompt_len:int(finished_len[row])].tolist()
        reason = "eos" if tokens and tokens[-1] in eos else "length"
        hypotheses.append(Hypothesis(tokens, float(finished_scores[row]), reason))
    return hypotheses
