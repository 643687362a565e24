"""`python -m minillm bench --url URL`: the load client's options, added to the bench command.

It shares three options with the chapter 05 benchmark: --tokens (output tokens per request),
--prompt-tokens (prompt length) and --json (also write the report to a file)."""

from __future__ import annotations


def add_arguments(parser):
    group = parser.add_argument_group(
        "load test of a server (with --url)",
        "Send a workload to an OpenAI-compatible server (vLLM, Text Generation Inference, "
        "SGLang, llama.cpp's server, minillm serve) and report TTFT, TPOT, latency p50/p90/p99 "
        "and throughput. --tokens is each answer's length, --prompt-tokens its prompt's.")
    group.add_argument("--url", default=None,
                       help="the server's base URL, e.g. http://127.0.0.1:8000: load-test it "
                            "instead of timing minillm in this process")
    group.add_argument("--requests", type=int, default=32, help="requests in all (default 32)")
    group.add_argument("--concurrency", type=int, default=4,
                       help="most requests in flight at once (default 4)")
    group.add_argument("--rate", type=float, default=None,
                       help="requests per second, Poisson arrivals (default: as fast as the "
                            "concurrency allows)")
    group.add_argument("--seed", type=int, default=0, help="fixes prompts and arrivals (0)")
    group.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    group.add_argument("--no-stream", action="store_true",
                       help="ask for whole answers (then only latency and throughput are known)")
    group.add_argument("--no-ignore-eos", action="store_true",
                       help="do not send vLLM's ignore_eos (answers may end early)")
    group.add_argument("--model", default=None,
                       help="the model name to send (default: the first of /v1/models)")
    group.add_argument("--timeout", type=float, default=120.0,
                       help="seconds one request may take (default 120)")
    group.add_argument("--max-seconds", type=float, default=600.0,
                       help="stop sending after this many seconds (default 600)")
    group.add_argument("--api-key", default=None,
                       help="sent as 'Authorization: Bearer KEY' (default: none)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser
