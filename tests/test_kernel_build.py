"""Building minillm's C kernels: the sources compile without a warning at every kernel level,
the flags follow what the CPU reports, a failed build says so once and loudly (and the kernel
tests then fail, not skip), also when no folder can be written (tests/test_readonly_cache.py
has the read-only shared cache)."""

import os
from pathlib import Path
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from minillm import kernels
from minillm.kernels import build, dispatch, limits, signatures
from kernel_machine import needs_kernels

AVX512_CPU = frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni"})
NO_VBMI = " without VBMI"  # AVX-512 before Ice Lake (Cascade Lake)


@needs_kernels
@pytest.mark.parametrize("level", [*build.LEVELS, f"avx512-vnni{NO_VBMI}"])
def test_the_sources_compile_with_all_warnings_on_and_print_nothing(level, tmp_path):
    """-Wall -Wextra and not one warning, at each level this machine runs, and at AVX-512 without
    VBMI (the only build of Q4_1's two-block steps)."""
    isa = level.removesuffix(NO_VBMI)
    flags = build.cpu_flags() - ({"avx512vbmi", "avx512vl"} if level != isa else set())
    if isa not in build.levels_here(flags):
        pytest.skip(f"this machine does not run {level}")
    found = build.target(flags, level=isa)
    output = build._compile(build.compiler(), [*found.flags, build.OPENMP], tmp_path / "lib.so")
    assert output == "", output
    assert (tmp_path / "lib.so").is_file()


def test_the_flags_follow_what_the_cpu_reports(monkeypatch):
    monkeypatch.delenv(build.LEVEL_VARIABLE, raising=False)
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    full = build.target(AVX512_CPU)
    assert full.level == "AVX-512" and full.label == "AVX-512 (VNNI)"
    assert "-mavx512vnni" in full.flags and "-mavx512bw" in full.flags
    assert "-mavx512vnni" not in build.target(AVX512_CPU - {"avx512vnni"}).flags
    assert "-mavx512vbmi" not in full.flags  # Q4_1's four-block steps need VBMI and VL
    amx = build.target(AVX512_CPU | {"amxtile", "amxint8"})
    assert {"-mamx-tile", "-mamx-int8"} <= set(amx.flags) and amx.label == "AVX-512 (VNNI, AMX)"
    assert "-mamx-int8" not in full.flags
    assert {"-mavx512vbmi", "-mavx512vl"} <= set(
        build.target(AVX512_CPU | {"avx512vl", "avx512vbmi"}).flags)
    assert build.target(AVX512_CPU - {"avx512bw"}).level == "AVX2"  # its int8 half needs BW
    assert build.target(frozenset({"avx2", "fma", "f16c"})).flags == ("-mavx2", "-mfma", "-mf16c")
    assert "lacks fma" in build.target(frozenset({"avx2", "f16c"}))
    assert "does not say" in build.target(frozenset())
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # lowered
    assert build.target(AVX512_CPU).level == "AVX2"
    monkeypatch.setattr(build.platform, "machine", lambda: "arm64")
    assert "this CPU is arm64" in build.target(AVX512_CPU)


AMX_CPU = AVX512_CPU | {"avx512vl", "avx512vbmi", "amxtile", "amxint8", "amxbf16"}


def test_each_level_below_the_cpus_own_can_be_forced(monkeypatch):
    """MINILLM_KERNEL_LEVEL builds the code a CPU of that level gets: each level's flags are the
    one below's plus its own instructions, and nothing above it."""
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert build.levels_here(AMX_CPU) == list(build.LEVELS)
    assert build.levels_here(AVX512_CPU - {"avx512vnni"}) == ["avx2", "avx512"]
    flags = {}
    for level in build.LEVELS:
        monkeypatch.setenv(build.LEVEL_VARIABLE, level)
        found = build.target(AMX_CPU)
        assert found.isa == level
        flags[level] = set(found.flags)
    assert flags["avx2"] == {"-mavx2", "-mfma", "-mf16c"}
    assert flags["avx512"] - flags["avx2"] == {"-mavx512f", "-mavx512bw", "-mavx512vl",
                                               "-mavx512vbmi"}
    assert flags["avx512-vnni"] - flags["avx512"] == {"-mavx512vnni"}
    assert flags["amx"] - flags["avx512-vnni"] == {"-mamx-tile", "-mamx-int8", "-mamx-bf16"}
    monkeypatch.setenv(build.LEVEL_VARIABLE, "native")
    assert build.target(AMX_CPU).isa == "amx"
    monkeypatch.setenv(build.LEVEL_VARIABLE, "AVX512")  # any case
    assert build.target(AMX_CPU).label == "AVX-512"


def test_a_level_the_cpu_does_not_run_or_no_level_is_refused_with_the_allowed_ones(monkeypatch):
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setenv(build.LEVEL_VARIABLE, "amx")
    with pytest.raises(ValueError, match="runs avx2, avx512, avx512-vnni"):
        build.target(AVX512_CPU)
    monkeypatch.setenv(build.LEVEL_VARIABLE, "avx9")
    with pytest.raises(ValueError, match="'avx9' is not a kernel level: use one of avx2, avx512, "
                                         "avx512-vnni, amx, or native"):
        build.target(AVX512_CPU)


@needs_kernels
def test_a_forced_level_is_built_and_said():
    """In a fresh process: the AVX2 level builds (into its own library), says so in its label,
    and takes AVX2's row limits."""
    env = {**os.environ, build.LEVEL_VARIABLE: "avx2"}
    code = ("from minillm.kernels import build, dispatch\n"
            "s = build.status()\n"
            "print(s.line(), s.isa, s.path.name, dispatch.f32_max_rows())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["built,", "AVX2,", "forced", "by", "MINILLM_KERNEL_LEVEL=avx2",
                                  "avx2", out.stdout.split()[-2], str(dispatch.F32_MAX_ROWS["AVX2"])]
    assert out.stdout.split()[-2].startswith("minillm_kernels_avx2_")


def test_the_cpu_flags_are_read_from_the_system():
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo here")
    flags = build.cpu_flags()
    assert flags and all("_" not in f for f in flags)
    if kernels.cannot_build() is None:
        assert {"avx2", "fma", "f16c"} <= flags


def test_each_signature_is_declared_once_and_every_c_function_is_declared():
    """The header is the one place: every function the .c files export is declared in it
    (static helpers aside), and the table ctypes gets is read from it."""
    defined = set()
    for path in build.SOURCE_DIR.glob("*.c"):
        text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
        defined |= set(re.findall(r"^(?:void|int)\s+(\w+)\s*\(", text, flags=re.M))
    assert defined == set(signatures.SIGNATURES)
    gemm = signatures.SIGNATURES["gemm_int8"]
    assert gemm.params == ("W", "scale", "bias", "X", "Y", "M", "N", "K", "threads")
    assert gemm.restype is not None and signatures.SIGNATURES["gemv_f32"].restype is None


def test_the_limits_are_named_once_and_reach_the_c_as_flags():
    from minillm.quant import gguf_q4_1

    assert (limits.Q4_1_BLOCK_BYTES, limits.Q4_1_BLOCK_WEIGHTS) == \
        (gguf_q4_1.BLOCK_BYTES, gguf_q4_1.BLOCK_WEIGHTS)
    c = "".join(p.read_text() for p in build.SOURCE_DIR.glob("*.[ch]"))
    for name in limits.DEFINES:
        assert re.search(rf"\b{name}\b", c), name
    assert not re.search(r"\b(256|32768)\b", c), "a limit written as a bare number in the C"
    package = build.SOURCE_DIR.parent.parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"(head_dim|shape\[-1\]|hd)\s*<=\s*256", text), path


FAILED_BUILD = textwrap.dedent("""
    import warnings
    import torch
    from minillm import kernels
    from minillm.kernels import dispatch
    warnings.simplefilter("always")
    assert not dispatch.cpu_kernels("cpu") and not dispatch.cpu_kernels("cpu")
    print("STATUS", kernels.status().line())
    print("FAILED", kernels.status().failed)
    try:
        kernels.gemv_f32(torch.ones(4), torch.ones(4, 2))
    except RuntimeError as error:
        print("RAISED", error)
""")


def _run(code, env, timeout=300):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout)


@needs_kernels
def test_a_missing_compiler_warns_once_and_the_wrappers_raise(tmp_path):
    """CC=false (a compiler that fails and prints nothing): one KernelBuildWarning naming what
    went wrong, however often the kernels are asked for; the layers take PyTorch's path, and a
    wrapper called directly raises, so a kernel test fails rather than skips."""
    result = _run(FAILED_BUILD, {"CC": "false", "MINILLM_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("KernelBuildWarning") == 1, result.stderr
    assert "the compiler (false) failed: it exited with status 1 and printed nothing" \
        in result.stderr
    assert "STATUS not built: the compiler (false) failed" in result.stdout
    assert "FAILED True" in result.stdout
    assert "RAISED minillm's C kernels are not available here: the compiler (false)" \
        in result.stdout


@needs_kernels
def test_a_compile_error_is_named_by_its_first_line(tmp_path, monkeypatch):
    source = tmp_path / "c"
    source.mkdir()
    for path in build.SOURCE_DIR.iterdir():
        (source / path.name).write_text(path.read_text())
    (source / "norm.c").write_text((source / "norm.c").read_text() + "\nint broken( {\n")
    monkeypatch.setattr(build, "SOURCE_DIR", source)
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    build.forget()
    try:
        with pytest.warns(kernels.KernelBuildWarning, match=r"norm\.c:\d+:\d+: error"):
            assert build.library() is None
        assert build.status().failed and "error" in build.status().reason
        assert not dispatch.cpu_kernels("cpu")
    finally:
        build.forget()


def test_with_no_folder_to_build_in_the_build_fails_loudly_and_says_so(monkeypatch):
    from minillm import files

    if build.cannot_build():
        pytest.skip(f"this machine cannot build the kernels: {build.cannot_build()}")

    def nowhere():
        raise PermissionError("minillm cannot write to its cache ...: set MINILLM_USER_CACHE")

    monkeypatch.setattr(files, "cache_entry", lambda relative, **_: Path("/nonexistent") / relative)
    monkeypatch.setattr(files, "writable_cache_dir", nowhere)
    build.forget()
    try:
        with pytest.warns(kernels.KernelBuildWarning, match="no folder to build them in"):
            assert build.library() is None
        assert build.status().failed and "MINILLM_USER_CACHE" in build.status().reason
    finally:
        build.forget()


def test_the_switch_builds_nothing_and_says_why(monkeypatch):
    monkeypatch.setenv(dispatch.SWITCH, "1")
    monkeypatch.setattr(build, "library", lambda: pytest.fail("built with the switch set"))
    assert not dispatch.cpu_kernels("cpu")
    assert dispatch.why_not("cpu") == "switched off by MINILLM_NO_KERNEL"
    assert "switched off by MINILLM_NO_KERNEL" in dispatch.describe("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dispatch.why_not("cuda") == "they are CPU code, and this model is on cuda"
