"""The load client's command: `python -m minillm bench serve --url URL [options]`."""

from __future__ import annotations

import json
import math
import sys

from .tokens import DEFAULT_TOKENIZER


def _clean(value):
    """JSON has no NaN: write null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run_cli(args) -> int:
    from .client import run
    from .report import table
    from .workload import Workload

    url = args.url
    if not url.startswith(("http://", "https://")):
        print(f"minillm bench serve: --url must start with http:// or https://, got {url!r}",
              file=sys.stderr)
        return 2
    try:
        workload = Workload(requests=args.requests, concurrency=args.concurrency, rate=args.rate,
                            prompt_tokens=args.prompt_tokens, output_tokens=args.tokens,
                            stream=not args.no_stream,
                            endpoint="chat" if args.chat else "completions",
                            full_length=not args.no_full_length, seed=args.seed,
                            timeout_s=args.timeout, max_seconds=args.max_seconds)
    except ValueError as error:
        print(f"minillm bench serve: {error}", file=sys.stderr)
        return 2
    tokenizer = args.tokenizer
    if tokenizer != DEFAULT_TOKENIZER:  # named: load it now, so a wrong one stops here
        from ...tokenizer import load_tokenizer

        try:
            tokenizer = load_tokenizer(tokenizer)
        except (OSError, ValueError, TypeError) as error:
            print(f"minillm bench serve: --tokenizer {args.tokenizer!r}: {error}",
                  file=sys.stderr)
            return 2
    report = run(url, workload, model=args.model, progress=not args.no_progress,
                 api_key=args.api_key, tokenizer=tokenizer)
    print(table(report))
    line = json.dumps(_clean(report), sort_keys=True)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0 if report["ok"] == report["requests"] else 1
