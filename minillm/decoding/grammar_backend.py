"""Which engine computes a JSON constraint's token masks.

    constraint = make_json_constraint(tokenizer, schema, backend="llguidance")

    minillm     json_constraint.JSONConstraint: minillm's own grammar, walked in Python (the one
                the lessons teach; the default)
    llguidance  llguidance_constraint.LLGuidanceConstraint: the same grammar compiled by
                llguidance, a maintained engine in Rust (the optional extra
                minillm-course[grammar])

Both take the same schemas (minillm's subset; the same SchemaError for the rest) and give the
same masks; docs/benchmarks.md ("JSON grammar backends") measures both.
"""

from __future__ import annotations

GRAMMAR_BACKENDS = ("minillm", "llguidance")


def check_grammar_backend(backend: str) -> str:
    if backend not in GRAMMAR_BACKENDS:
        raise ValueError(f"grammar backend {backend!r} is not one of "
                         f"{', '.join(GRAMMAR_BACKENDS)}")
    return backend


def make_json_constraint(tokenizer, schema=None, eos_token_ids=None, *, backend: str = "minillm",
                    prompt_length: int | None = None):
    """A logits processor that allows only JSON matching `schema` (None: any JSON object), its
    masks computed by `backend` (GRAMMAR_BACKENDS)."""
    if check_grammar_backend(backend) == "llguidance":
        from .llguidance_constraint import LLGuidanceConstraint

        return LLGuidanceConstraint(tokenizer, schema, eos_token_ids, prompt_length)
    from .json_constraint import JSONConstraint

    return JSONConstraint(tokenizer, schema, eos_token_ids, prompt_length)


__all__ = ["GRAMMAR_BACKENDS", "check_grammar_backend", "make_json_constraint"]
