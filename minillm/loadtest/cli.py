"""The load client's command: `python -m minillm bench --url URL [options]`."""

from __future__ import annotations

import json
import math
import sys


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
        print(f"minillm bench: --url must start with http:// or https://, got {url!r}",
              file=sys.stderr)
        return 2
    try:
        workload = Workload(requests=args.requests, concurrency=args.concurrency, rate=args.rate,
                            prompt_tokens=args.prompt_tokens, output_tokens=args.tokens,
                            stream=not args.no_stream,
                            endpoint="chat" if args.chat else "completions",
                            ignore_eos=not args.no_ignore_eos, seed=args.seed,
                            timeout_s=args.timeout, max_seconds=args.max_seconds)
    except ValueError as error:
        print(f"minillm bench: {error}", file=sys.stderr)
        return 2
    report = run(url, workload, model=args.model, progress=not args.no_progress,
                 api_key=args.api_key)
    print(table(report))
    line = json.dumps(_clean(report), sort_keys=True)
    print(line)
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0 if report["ok"] == report["requests"] else 1
