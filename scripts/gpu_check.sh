#!/usr/bin/env bash
# Chapter 05 on a CUDA machine: the benchmark and the lesson's measurements, figures and charts
# written to one folder.
#
#     bash scripts/gpu_check.sh [OUT_DIR]        (default: gpu_results/)
#
# Set-up: uses .venv/bin/python when there is one (`make setup` makes it), else `python`; set
# PYTHON to choose another. The model file must be in the cache ($MINILLM_CACHE, default
# ~/.cache/minillm) or fetchable (`python -m minillm fetch`). Nothing else is downloaded.
# Writes: environment.txt, nvidia-smi.txt, bench_cuda.txt/.json (minillm against transformers on
# the GPU), bench_cpu.txt/.json (the same on this machine's CPU, for the CPU:GPU ratio), and the
# executed lesson 05_metrics.ipynb with its charts (plus an HTML copy).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu_results}"
mkdir -p "$OUT"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
export MPLCONFIGDIR="${MPLCONFIGDIR:-$(mktemp -d)}"

"$PYTHON" - <<'PY' | tee "$OUT/environment.txt"
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__)
if not torch.cuda.is_available():
    raise SystemExit("no CUDA GPU visible to torch: this check needs one")
print("gpu", torch.cuda.get_device_name(0), "cuda", torch.version.cuda)
PY
command -v nvidia-smi >/dev/null && nvidia-smi > "$OUT/nvidia-smi.txt" || true
"$PYTHON" -c "import minillm" 2>/dev/null || "$PYTHON" -m pip install --quiet --no-deps -e .
"$PYTHON" -m minillm fetch > /dev/null

echo "== benchmark on the GPU"
timeout 600 "$PYTHON" -m minillm bench latency --device cuda --json "$OUT/bench_cuda.json" \
  | tee "$OUT/bench_cuda.txt"
echo "== benchmark on the CPU (same machine, for the CPU:GPU ratio)"
timeout 600 "$PYTHON" -m minillm bench latency --device cpu --dtypes fp32 --repeats 2 \
  --json "$OUT/bench_cpu.json" | tee "$OUT/bench_cpu.txt"

echo "== the lesson, executed on the GPU"
timeout 1200 "$PYTHON" -m jupyter nbconvert --to notebook --execute notebooks/05_metrics.ipynb \
  --ExecutePreprocessor.timeout=900 --output-dir "$OUT" --output 05_metrics.ipynb
"$PYTHON" -m jupyter nbconvert --to html "$OUT/05_metrics.ipynb" --output-dir "$OUT" || true
echo "figures and charts are in $OUT/"
