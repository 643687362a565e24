"""Lessons 06 and 09 keep the corrections of issue 34: the engines they compare, the terms they
define before use, and the figures they no longer state."""

import re
from pathlib import Path

from script_modules import chinese_source

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
BATCHING = (LESSONS / "06_batching.py").read_text(encoding="utf-8")
SCALING = (LESSONS / "09_scaling_out.py").read_text(encoding="utf-8")
SCALING_EXERCISE = (LESSONS / "09_scaling_out_exercise.py").read_text(encoding="utf-8")


def test_text_generation_inference_is_named_only_as_archived():
    for text in (BATCHING, SCALING):
        for match in re.finditer(r"Text Generation Inference|\bTGI\b", text):
            nearby = text[match.start():match.end() + 120]
            assert "archived" in nearby, nearby


def test_the_serving_table_compares_vllm_with_sglang_and_names_the_drafting_methods():
    table = SCALING.split("| idea | minillm chapter | vLLM | SGLang |")[1].split("\n#\n")[0]
    speculative = next(line for line in table.splitlines() if "speculative decoding" in line)
    for method in ("EAGLE", "Medusa", "MTP"):
        assert method in speculative
    assert "expert parallelism" in table


def test_terms_are_defined_before_they_are_used():
    assert BATCHING.index("dynamic batching (动态批处理)") < BATCHING.index("## 2 ·")
    assert BATCHING.index("Poisson process (泊松过程)") < BATCHING.index("run_online(")


def test_expert_parallelism_is_its_own_axis_and_model_parallelism_the_umbrella():
    intro = SCALING.split("# %%\nimport")[0]
    assert "expert parallelism (专家并行)" in intro
    assert "Under tensor parallelism the experts" not in SCALING
    assert re.search(r"model parallelism \(模型并行\)\*\* is the umbrella", intro)


def test_int4_is_counted_at_q4_1s_bits_and_the_exercise_names_a_real_class():
    assert "4.5" not in SCALING
    assert "BLOCK_BYTES / BLOCK_WEIGHTS" in SCALING
    assert "minillm.model.llama.SwiGLU" not in SCALING_EXERCISE
    assert "minillm.layers.GatedMLP" in SCALING_EXERCISE


SPECULATIVE = (LESSONS / "08_speculative.py").read_text(encoding="utf-8")
ZH_SPECULATIVE = chinese_source(LESSONS / "08_speculative.py")
ZH_SCALING = chinese_source(LESSONS / "09_scaling_out.py")


def test_medusa_is_not_called_exact_and_its_typical_acceptance_is_named():
    """Issue 44: Medusa as published samples with typical acceptance, which does not keep the
    target's distribution; greedy verification, rejection sampling and EAGLE's tree are exact."""
    assert "All three are exact" not in SPECULATIVE
    assert "All three are verified by the same acceptance rule" not in SCALING
    assert "三者都是精确的" not in ZH_SPECULATIVE and "三者都用与第 08 章相同的" not in ZH_SCALING
    section = SPECULATIVE.split("## 7 · Drafts built into the target")[1].split("# %%")[0]
    flat = " ".join(section.replace("#", " ").split())
    assert "**typical acceptance**" in flat
    assert "no longer follows the target's distribution" in flat
    assert "EAGLE checks its draft tree with rejection sampling" in flat and "is exact" in flat
    scaling = " ".join(SCALING.replace("#", " ").split())
    assert "typical acceptance" in scaling and "EAGLE applies it over a tree" in scaling
    for zh in (ZH_SPECULATIVE, ZH_SCALING):
        assert "典型接受（typical acceptance）" in zh.replace("*", "") and "拒绝采样" in zh


def test_the_chunked_prefill_section_shows_what_it_measures_not_the_harness():
    """The harness (long_prompt_arrival) is described in words; its result, `Arrival`, is shown."""
    assert "show_source(long_prompt_arrival)" not in BATCHING
    assert "show_source(Arrival)" in BATCHING


def test_the_chinese_edition_names_the_schedulers_in_chinese():
    """Labels and titles come from `BATCHING`, which the Chinese edition translates (no
    "static 批处理")."""
    chinese = chinese_source(LESSONS / "06_batching.py")
    assert 'BATCHING = {"static": "静态批处理", "continuous": "连续批处理"}' in chinese
    assert "{kind} 批处理" not in chinese and 'print(f"static' not in chinese
