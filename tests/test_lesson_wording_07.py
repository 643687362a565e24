"""Lesson 07 keeps the corrections of issue 34: what the int8 kernel rounds, no typed-in
llama.cpp figure, SmolLM2 not called distilled, the Q4_1 file named as the baseline, bf16's
stored mantissa bits, and no assert that restates arithmetic."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSON = (ROOT / "minillm" / "course" / "lessons" / "07_quantization.py").read_text(
    encoding="utf-8")
KERNEL_05 = (ROOT / "minillm" / "course" / "lessons" / "05_metrics.py").read_text(
    encoding="utf-8")


def test_the_int8_kernel_rounds_x_to_int16_as_lesson_05_says():
    for old in ("rounds nothing but the weights", "40 lines of C", "keeps the activations in float"):
        assert old not in LESSON
    kernel = LESSON.split("# - **kernel**:")[1].split("\n#\n")[0]
    assert "int16" in kernel and "05 §6" in kernel
    assert "rounds each row of\n# activations x to 16-bit integers (int16)" in KERNEL_05


def test_no_typed_in_llama_cpp_speed_and_the_benchmark_is_named():
    assert "110 tokens" not in LESSON
    section = LESSON.split("What a dedicated kernel reaches: llama.cpp")[1].split("# %%")[0]
    assert "python -m minillm bench latency" in section and "docs/benchmarks.md" in section


def test_smollm2_is_not_presented_as_distilled_and_the_baseline_is_the_q4_1_file():
    assert "SmolLM2 was not distilled" in LESSON
    assert "trained to be good at its size" not in LESSON
    assert "the course's baseline is the Q4_1 file itself" in LESSON


def test_bf16_has_seven_stored_mantissa_bits():
    assert "bf16 stores 7 mantissa bits" in LESSON
    model_doc = (ROOT / "minillm" / "quant" / "model.py").read_text(encoding="utf-8")
    assert "8 bits of precision" not in model_doc and "7 stored mantissa bits" in model_doc


def test_the_zero_point_comparison_is_printed_not_asserted():
    assert "assert zp_back" not in LESSON


def test_the_kv_cache_is_left_to_its_appendix_and_tgi_is_not_offered_as_a_server():
    assert "appendix 07b" in LESSON
    assert "TGI" not in LESSON and "Text Generation Inference" not in LESSON
