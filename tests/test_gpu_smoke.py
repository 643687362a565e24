"""scripts/gpu_smoke.py, the device check sized for a lent GPU, run here on the fake GPU
(tests/fake_cuda_site starts tests/fake_cuda.py in the process) with a tiny model, so that it
cannot rot: every part but the real model's runs, its checks hold, the table and the JSON come
out, and it needs none of jupyter, nbformat, ipywidgets, gguf, fastapi or uvicorn (the GPU
machine has none of them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_smoke.py"
ABSENT = ("jupyter", "jupyterlab", "nbformat", "ipywidgets", "IPython", "gguf", "fastapi",
          "uvicorn")
# Run the script with those packages made unimportable (None in sys.modules: ImportError).
RUN = ("import runpy, sys; sys.modules.update(dict.fromkeys({absent!r})); "
       "sys.argv = {argv!r}; runpy.run_path({script!r}, run_name='__main__')")


def smoke(*argv, fake=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if fake:
        env["PYTHONPATH"] = str(ROOT / "tests" / "fake_cuda_site")
    code = RUN.format(absent=ABSENT, argv=[str(SCRIPT), *argv], script=str(SCRIPT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)


def test_it_runs_on_the_fake_gpu_without_the_course_or_server_packages(tmp_path):
    done = smoke(str(tmp_path), "--device", "cuda", "--quick",
                 "--only", "env,logits,decode,engine,chart,move")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_smoke.json").read_text())
    parts = report["parts"]
    assert list(parts) == ["env", "logits", "decode", "engine", "chart", "move"]
    assert parts["env"][0]["device"].startswith("cuda") and parts["env"][0]["gguf"]
    assert all(r["agree"] for r in parts["logits"])
    decode = {r["case"]: r for r in parts["decode"]}
    assert set(decode) == {f"{fmt}, graph: {on}" for fmt in ("fp32", "bf16", "int8")
                           for on in ("on", "off")}
    assert all(r["syncs_per_token"] <= 2 for r in decode.values())
    off = {case.split(",")[0]: r for case, r in decode.items() if case.endswith("off")}
    assert off["bf16"]["launches_per_token"] <= 1.1 * off["fp32"]["launches_per_token"]
    assert off["int8"]["int8_path"] == "dequantize"
    for fmt, eager in off.items():  # a replay is one launch; the step around it a few more
        graphed = decode[f"{fmt}, graph: on"]
        assert graphed["graph_captures"] >= 1 and "graph_failed" not in graphed
        assert graphed["launches_per_token"] < eager["launches_per_token"] / 3
    assert [r["syncs_per_step"] <= r["sync_budget"] for r in parts["engine"]] == [True] * 3
    assert parts["chart"][0]["points"] == len(parts["chart"][0]["tpot_series_ms"]) + 1
    assert parts["move"][0]["exit_code"] == 0
    table = done.stdout
    for part in parts:
        assert f"\n{part} " in table
    assert "every check held" in table


def test_only_refuses_an_unknown_part_and_names_the_parts():
    done = smoke("out", "--only", "decode,speed", fake=False)
    assert done.returncode == 2
    assert "unknown part(s) speed" in done.stderr and "env, logits, decode" in done.stderr
