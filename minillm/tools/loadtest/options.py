"""The options of `python -m minillm bench serve --url URL`: the load test of a server.

Named after vLLM's `vllm bench serve` where one exists there too: --url (vLLM: --base-url),
--requests (--num-prompts), --concurrency (--max-concurrency), --rate (--request-rate),
--prompt-tokens and --tokens (--random-input-len, --random-output-len), --tokenizer."""

from __future__ import annotations

from .tokens import DEFAULT_TOKENIZER


def add_arguments(parser):
    parser.add_argument("--url", required=True,
                        help="the server's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=32, help="requests in all (default 32)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="most requests in flight at once (default 4)")
    parser.add_argument("--rate", type=float, default=None,
                        help="requests per second, Poisson arrivals (default: as fast as the "
                             "concurrency allows)")
    parser.add_argument("--prompt-tokens", type=int, default=512,
                        help="words per prompt, about as many tokens (default 512)")
    parser.add_argument("--tokens", type=int, default=32,
                        help="output tokens per answer: max_tokens (default 32)")
    parser.add_argument("--seed", type=int, default=0, help="fixes prompts and arrivals (0)")
    parser.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    parser.add_argument("--no-stream", action="store_true",
                        help="ask for whole answers (then only latency and throughput are known)")
    parser.add_argument("--no-full-length", "--no-ignore-eos", dest="no_full_length",
                        action="store_true",
                        help="do not ask for answers of exactly --tokens tokens (by default "
                             "ignore_eos and min_tokens are sent, those the server accepts): "
                             "answers may end at end of text")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER,
                        help="counts tokens when the server reports no usage: a model name, a "
                             ".gguf file, a saved minillm tokenizer or a Hugging Face model "
                             "folder (default smollm2-135m, the course model)")
    parser.add_argument("--model", default=None,
                        help="the model name to send (default: the first of /v1/models)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one request may take (default 120)")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="stop sending after this many seconds (default 600)")
    parser.add_argument("--api-key", default=None,
                        help="sent as 'Authorization: Bearer KEY' (default: none)")
    parser.add_argument("--json", default=None, help="also write the JSON report to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser
