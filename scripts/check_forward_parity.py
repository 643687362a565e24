"""Chapter 02's figures: load times and the logit difference between minillm and transformers.

    MINILLM_CACHE=... .venv/bin/python scripts/check_forward_parity.py [--device cpu]

Prints, then writes as JSON on the last line:
  - minillm's load time from its converted copy in the cache (and the one-off conversion, if the
    copy was missing),
  - transformers' load time from the GGUF file (it dequantizes on every load) and from the
    safetensors copy `minillm.load_reference()` keeps,
  - the max absolute logit difference (fp32) and top-1 agreement for prompts of 1, 7, 64, 512 tokens,
  - one batch-1 decode step's time, minillm against transformers (median of 20).
"""

from __future__ import annotations

import argparse
import json
import os
import platform

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402

import minillm  # noqa: E402
from minillm.utils.devices import Timer  # noqa: E402
from minillm.loading import load_model  # noqa: E402
from minillm.model.converted import read_converted  # noqa: E402

TEXT = ("The weather today is sunny, and the children are playing in the park. Large language "
        "models predict the next token from the ones before it. 今天天气晴朗。 ")


def timed(fn):
    with Timer() as stopwatch:
        out = fn()
    return out, stopwatch.seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-gguf-reference", action="store_true",
                        help="skip timing transformers' load from the GGUF file (about 20 s)")
    args = parser.parse_args()
    torch.manual_seed(0)
    gguf = minillm.model_file("smollm2-135m")
    figures = {"machine": platform.processor() or platform.machine(), "threads":
               torch.get_num_threads(), "torch": torch.__version__, "device": args.device}
    import transformers
    transformers.utils.logging.disable_progress_bar()
    figures["transformers"] = transformers.__version__

    if read_converted(gguf) is None:
        _, figures["minillm_convert_s"] = timed(lambda: load_model(gguf, device=args.device))
        print(f"minillm: first load (dequantize + write the cache): "
              f"{figures['minillm_convert_s']:.2f} s")
    model, figures["minillm_load_s"] = timed(lambda: load_model(gguf, device=args.device))
    print(f"minillm: load from its converted copy:              {figures['minillm_load_s']:.2f} s")
    _, figures["minillm_load_again_s"] = timed(lambda: load_model(gguf, device=args.device))
    print(f"minillm: the same, again (file in the OS cache):    "
          f"{figures['minillm_load_again_s']:.2f} s")

    if not args.skip_gguf_reference:
        from transformers import AutoModelForCausalLM

        _, figures["transformers_gguf_load_s"] = timed(lambda: AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32))
        print(f"transformers: load from the GGUF file:              "
              f"{figures['transformers_gguf_load_s']:.2f} s")
    (ref, tokenizer), figures["transformers_cached_load_s"] = timed(minillm.load_reference)
    print(f"transformers: load from its safetensors copy:       "
          f"{figures['transformers_cached_load_s']:.2f} s")
    ref = ref.to(args.device)

    ids = torch.tensor([tokenizer.encode(TEXT * 30)[:512]], device=args.device)
    figures["max_abs_logit_diff"], figures["top1_agree"] = {}, {}
    for n in (1, 7, 64, 512):
        with torch.inference_mode():
            got, want = model(ids[:, :n]), ref(ids[:, :n]).logits.float()
        diff = (got - want).abs().max().item()
        agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
        figures["max_abs_logit_diff"][n], figures["top1_agree"][n] = diff, agree
        print(f"prompt of {n:3d} tokens: max |logit diff| = {diff:.3g}, top-1 agreement "
              f"{agree:.0%}")

    # One batch-1 decode step after a 128-token prompt, each library with its own cache.
    from transformers import DynamicCache

    from minillm.generation.kv_cache import KVCache

    def decode_seconds(step, steps=20):
        times = []
        for _ in range(steps):
            with Timer() as stopwatch:
                step()
            times.append(stopwatch.seconds)
        return sorted(times)[len(times) // 2]

    prompt, token = ids[:, :128], ids[:, 128:129]
    with torch.inference_mode():
        cache = KVCache.for_model(model, batch_size=1, max_tokens=256)
        model(prompt, cache=cache)

        def ours():
            model(token, cache=cache)
            cache.crop(128)

        ref_cache = DynamicCache(config=ref.config)
        ref(prompt, past_key_values=ref_cache, use_cache=True)
        position = torch.tensor([[128]], device=args.device)

        def theirs():
            ref(token, past_key_values=ref_cache, use_cache=True, position_ids=position)
            ref_cache.crop(-1)  # transformers 5 removes the last token so

        figures["decode_step_ms"] = {"minillm": 1e3 * decode_seconds(ours),
                                     "transformers": 1e3 * decode_seconds(theirs)}
    step = figures["decode_step_ms"]
    print(f"one decode step (batch 1, 128 cached tokens, median of 20): minillm "
          f"{step['minillm']:.1f} ms, transformers {step['transformers']:.1f} ms "
          f"(ratio {step['transformers'] / step['minillm']:.2f}x)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
