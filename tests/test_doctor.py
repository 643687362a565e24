"""`python -m minillm doctor`: one line per item, a fix for each failure, exit 0 only when ready."""

import subprocess
import sys
from importlib import metadata

import pytest
import torch

from minillm.tools import doctor


def test_a_ready_machine_passes_every_item(gguf_path, capsys):
    assert doctor.main(generate=False) == 0
    out = capsys.readouterr().out
    assert "Everything the course needs is here." in out
    assert "[FAIL]" not in out
    for name in ["python", "package torch", "torch build", "model file", "cache", "free memory",
                 "free disk", "JupyterLab + widgets", "kernels"]:
        assert f"] {name}:" in out


def test_missing_model_fails_with_the_fetch_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    assert doctor.main(generate=False) == 1
    out = capsys.readouterr().out
    assert "[FAIL] model file:" in out
    assert "fix: run `python -m minillm fetch`" in out
    assert "1 item(s) need attention: model file" in out


def test_corrupted_model_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF not really")
    check = doctor.check_model_file()
    assert not check.ok and "truncated or wrong file" in check.detail


def test_a_cuda_build_without_a_gpu_is_the_wrong_torch_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check = doctor.check_torch_build()
    assert not check.ok
    assert "CUDA build of torch but no usable NVIDIA GPU" in check.detail
    assert "TORCH_INDEX=" in check.fix and "rm -rf .venv" in check.fix


def test_a_missing_package_names_the_fix(monkeypatch):
    real = metadata.version

    def version(name):
        if name == "nbval":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(doctor.metadata, "version", version)
    check = doctor.check_package("nbval")
    assert not check.ok and check.detail == "not installed" and "make course" in check.fix
    checks = doctor.run_checks(generate=True)
    assert checks[-1].name == "generation" and not checks[-1].ok, \
        "generation is skipped, and counted as failed, while something else is missing"


def test_failed_generation_is_reported_not_raised(monkeypatch):
    import minillm

    def broken_load(*args, **kwargs):
        raise RuntimeError("simulated: weights unreadable")

    monkeypatch.setattr(minillm, "load", broken_load, raising=False)
    check = doctor.check_generation()
    assert not check.ok and "simulated: weights unreadable" in check.detail


def test_the_command_exits_non_zero_when_something_is_missing(tmp_path):
    env = {"MINILLM_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "minillm", "doctor", "--no-generate"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] model file" in result.stdout


@pytest.mark.slow
def test_doctor_times_a_real_generation(gguf_path):
    pytest.importorskip("minillm.model")
    pytest.importorskip("minillm.generation.loop")
    check = doctor.check_generation()
    assert check.ok, check.detail
    assert "10 tokens" in check.detail or "tokens in" in check.detail


def test_the_kernels_line_says_what_was_built_or_why_not(monkeypatch):
    from minillm.kernels import build

    monkeypatch.delenv("MINILLM_NO_KERNEL", raising=False)  # a `MINILLM_NO_KERNEL=1 make test`

    if build.cannot_build() is None:
        check = doctor.check_kernels(measure=False)
        assert check.ok and check.detail == (
            f"built, {build.status().label} (levels this machine runs: "
            f"{', '.join(build.levels_here())}; MINILLM_KERNEL_LEVEL picks one)"), check.detail
    monkeypatch.setattr(build, "cannot_build", lambda: "this CPU is arm64, and ...")
    check = doctor.check_kernels(measure=False)
    assert check.ok and check.detail == "not built: this CPU is arm64, and ..."
    monkeypatch.setenv("MINILLM_NO_KERNEL", "1")
    assert doctor.check_kernels(measure=False).detail == \
        "not used: switched off by MINILLM_NO_KERNEL"


def test_a_failed_kernel_build_is_a_failed_item_with_its_fix(monkeypatch):
    from minillm.kernels import build

    failed = build.Status(False, "", "", "the compiler (cc) failed: norm.c:3:1: error: ...",
                          failed=True)
    monkeypatch.setattr(build, "cannot_build", lambda: None)
    monkeypatch.setattr(build, "status", lambda: failed)
    check = doctor.check_kernels(measure=True)  # nothing to measure: it failed
    assert not check.ok and "not built: the compiler (cc) failed: norm.c:3:1" in check.detail
    assert "install a C compiler" in check.fix
    assert "[FAIL] kernels:" in check.line()


@pytest.mark.slow
def test_the_kernels_line_measures_what_they_change_here(gguf_path, monkeypatch):
    """With the kernels: a decode step with them against one on PyTorch's, both measured now.
    Without (a machine that cannot build them): PyTorch's step against the time this machine
    needs to read the weights once."""
    import re

    from minillm.kernels import build

    monkeypatch.delenv("MINILLM_NO_KERNEL", raising=False)  # a `MINILLM_NO_KERNEL=1 make test`
    if build.cannot_build() is None:
        check = doctor.check_kernels(measure=True)
        assert check.ok, check.detail
        assert re.search(r"; \d+\.\dx faster decoding here \(a decode step takes \d+\.\d ms with "
                         r"them, \d+\.\d ms on PyTorch's kernels\)", check.detail), check.detail
    monkeypatch.setattr(build, "cannot_build", lambda: "there is no C compiler (cc, gcc or clang)")
    check = doctor.check_kernels(measure=True)
    assert check.ok, check.detail
    assert re.search(r"^not built: there is no C compiler .*; decoding runs on PyTorch, about "
                     r"\d+\.\dx slower here than reading the weights allows \(\d+\.\d ms a step "
                     r"against \d+\.\d ms to read them once\)$", check.detail), check.detail


def test_a_read_only_cache_is_reported_with_where_writes_go(tmp_path, monkeypatch):
    from minillm import files

    shared, user = tmp_path / "shared", tmp_path / "user"
    monkeypatch.setenv("MINILLM_CACHE", str(shared))
    monkeypatch.setenv("MINILLM_USER_CACHE", str(user))
    monkeypatch.setattr(files, "can_write", lambda folder: folder != shared)
    check = doctor.check_cache()
    assert check.ok and f"{shared} is read-only here" in check.detail and str(user) in check.detail
    assert str(user) in doctor.check_disk().detail
    monkeypatch.setattr(files, "can_write", lambda folder: False)
    check = doctor.check_cache()
    assert not check.ok and "MINILLM_USER_CACHE" in check.fix
