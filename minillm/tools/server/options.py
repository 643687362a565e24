"""The command line of `python -m minillm serve` (kept apart so that building it imports nothing
heavy)."""

from __future__ import annotations

LOOPBACK = "127.0.0.1"
API_KEY_ENV = "MINILLM_API_KEY"
# The weight formats the server loads (minillm.load's `weights`): float32, bfloat16, int8 per
# channel, or the GGUF file's own Q4_1 blocks.
SERVE_WEIGHTS = ("fp32", "bf16", "int8", "q4_1")
# Who computes response_format's token masks (minillm.decoding.grammar_backend; kept here as
# names so that building the command line imports nothing heavy; a test keeps the two equal).
GRAMMAR_BACKENDS = ("minillm", "llguidance")


def add_arguments(parser):
    parser.add_argument("--model", default="smollm2-135m",
                        help="a model name, a .gguf file or a Hugging Face folder "
                             "(default smollm2-135m)")
    parser.add_argument("--tiny", action="store_true",
                        help="serve a tiny random model instead (for tests: fast, nonsense)")
    parser.add_argument("--served-model-name", default=None,
                        help="the name clients use in 'model' (default: --model)")
    parser.add_argument("--host", default=LOOPBACK,
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--weights", default="fp32", choices=SERVE_WEIGHTS,
                        help="how the linear layers' weights are stored and multiplied: "
                             f"{', '.join(SERVE_WEIGHTS)} (q4_1: the GGUF file's own 4-bit "
                             "blocks, CPU only; default fp32)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--max-num-seqs", type=int, default=16,
                        help="most requests in one batch (default 16)")
    parser.add_argument("--num-blocks", type=int, default=512,
                        help="KV-cache blocks in the pool (default 512)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (16)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512,
                        help="token budget of one step (default 512)")
    parser.add_argument("--default-max-tokens", type=int, default=256,
                        help="chat answers' length when a request gives no max_tokens (256)")
    parser.add_argument("--grammar-backend", default="minillm", choices=GRAMMAR_BACKENDS,
                        help="what computes the token masks of a JSON response_format: "
                             "minillm (its own grammar, in Python; default) or llguidance "
                             "(the same grammar in a Rust engine: pip install "
                             "'minillm-course[grammar]')")
    parser.add_argument("--lora", "--lora-modules", dest="lora", action="extend", nargs="+",
                        metavar="NAME=PATH", default=None,
                        help="serve a LoRA adapter beside the model: clients send NAME as "
                             "'model'; PATH is a file minillm.engine.lora.save_adapter wrote. "
                             "Repeat it for more (vLLM's spelling: --lora-modules A=PATH "
                             "B=PATH)")
    parser.add_argument("--api-key", default=None,
                        help=f"require 'Authorization: Bearer KEY' on the /v1 routes (default: "
                             f"${API_KEY_ENV}, else none); /health and /metrics stay open")
    return parser


def parse_lora(values) -> dict[str, str]:
    """--lora's NAME=PATH values as {name: path}, in the order given; ValueError for a value
    without a name or a path, or a name given twice."""
    adapters: dict[str, str] = {}
    for value in values or ():
        name, equals, path = value.partition("=")
        name, path = name.strip(), path.strip()
        if not equals or not name or not path:
            raise ValueError(f"--lora takes NAME=PATH (the name clients send as 'model', the "
                             f"adapter's file), got {value!r}")
        if name in adapters:
            raise ValueError(f"--lora: the name {name!r} is given twice")
        adapters[name] = path
    return adapters
