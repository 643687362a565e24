#!/usr/bin/env bash
# The whole course on a CUDA GPU: every lesson and every solution notebook at full size, the
# latency benchmark (minillm against transformers, GPU and CPU), the engine benchmark, and the
# tests marked `cuda`. Everything it writes goes to one folder.
#
#     bash scripts/gpu_check.sh [OUT_DIR]     (default: $OUT when set, else ./gpu-check-output)
#     bash scripts/gpu_check.sh --list        the notebooks it runs, one a line (no GPU needed)
#
# Set-up: run from a checkout where `make setup` has made .venv (or set PYTHON to another
# interpreter with minillm's dependencies); the model must be in the cache ($MINILLM_CACHE,
# default ~/.cache/minillm): nothing is downloaded. Plain bash; each step has a time limit, a
# failed step is recorded and the next one runs; the exit status is 1 when any step failed.
#
# Writes: summary.md (each step: passed or failed, its time, the headline figures),
# environment.txt, nvidia-smi.txt, notebooks/ and solutions/ (each notebook executed, charts
# included), bench_cuda.{txt,json}, bench_cpu.{txt,json}, bench_batching.{txt,json},
# pytest_cuda.{txt,xml}, and logs/ (each step's output).
set -uo pipefail
cd "$(dirname "$0")/.."

notebooks() {
  ls notebooks/[0-9][0-9]_*.ipynb solutions/[0-9][0-9]_*.ipynb
}

if [ "${1:-}" = "--list" ]; then
  notebooks
  exit 0
fi

OUT="${1:-${OUT:-gpu-check-output}}"
mkdir -p "$OUT/logs" "$OUT/notebooks" "$OUT/solutions"
OUT="$(cd "$OUT" && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLCONFIGDIR="${MPLCONFIGDIR:-$(mktemp -d)}"
unset CI  # full size
SUMMARY="$OUT/summary.md"
FAILED=0

# step NAME LIMIT_SECONDS COMMAND...: run it, log its output, record the result in the summary.
step() {
  local name="$1" limit="$2"
  shift 2
  local log="$OUT/logs/$name.log" start=$SECONDS status
  echo "== $name"
  timeout "$limit" "$@" > "$log" 2>&1
  status=$?
  local took=$((SECONDS - start))
  if [ $status -eq 0 ]; then
    echo "| $name | passed | ${took} s |" >> "$SUMMARY"
  else
    FAILED=1
    [ $status -eq 124 ] && status="timed out after ${limit} s" || status="failed (exit $status)"
    echo "| $name | **$status** | ${took} s |" >> "$SUMMARY"
    tail -n 20 "$log"
  fi
}

{
  echo "# minillm on a CUDA GPU: scripts/gpu_check.sh"
  echo
  commit="$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
  echo
} > "$SUMMARY"

"$PYTHON" - > "$OUT/environment.txt" 2>&1 <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
if not torch.cuda.is_available():
    raise SystemExit("no CUDA GPU visible to torch: this check needs one")
print("gpu", torch.cuda.get_device_name(0))
PY
status=$?
cat "$OUT/environment.txt" | tee -a "$SUMMARY"
if [ $status -ne 0 ]; then
  exit 1
fi
command -v nvidia-smi > /dev/null && nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
echo | tee -a "$SUMMARY"
echo "| step | result | time |" >> "$SUMMARY"
echo "|---|---|---|" >> "$SUMMARY"

step model 300 "$PYTHON" -m minillm fetch

# Each notebook executed in place of a copy under $OUT (errors kept in the notebook, then
# counted), so a failing cell still leaves its notebook with everything before it.
for notebook in $(notebooks); do
  name="$(basename "$notebook" .ipynb)"
  folder="$(dirname "$notebook")"
  step "$folder-$name" 3600 "$PYTHON" -m jupyter nbconvert --to notebook --execute \
    --allow-errors --ExecutePreprocessor.timeout=1800 --output-dir "$OUT/$folder" "$notebook" \
    && step "$folder-$name-errors" 60 "$PYTHON" - "$OUT/$notebook" <<'PY'
import sys, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
errors = [(i, o["ename"], o["evalue"]) for i, c in enumerate(nb.cells) if c.cell_type == "code"
          for o in c.get("outputs", []) if o.get("output_type") == "error"]
for i, name, value in errors:
    print(f"cell {i}: {name}: {value}")
sys.exit(1 if errors else 0)
PY
done

# `bench latency` is the name once the load test moves `bench` to subcommands.
if "$PYTHON" -m minillm bench latency --help > /dev/null 2>&1; then
  BENCH=(bench latency)
else
  BENCH=(bench)
fi
step bench_cuda 1200 "$PYTHON" -m minillm "${BENCH[@]}" --device cuda --json "$OUT/bench_cuda.json"
cp "$OUT/logs/bench_cuda.log" "$OUT/bench_cuda.txt"
step bench_cpu 1200 "$PYTHON" -m minillm "${BENCH[@]}" --device cpu --dtypes fp32 --repeats 2 \
  --json "$OUT/bench_cpu.json"
cp "$OUT/logs/bench_cpu.log" "$OUT/bench_cpu.txt"
step bench_batching 1800 "$PYTHON" scripts/bench_batching.py --device cuda \
  --json "$OUT/bench_batching.json"
cp "$OUT/logs/bench_batching.log" "$OUT/bench_batching.txt"
step pytest_cuda 1200 "$PYTHON" -m pytest -m cuda tests -p no:cacheprovider -q \
  --junitxml "$OUT/pytest_cuda.xml"
cp "$OUT/logs/pytest_cuda.log" "$OUT/pytest_cuda.txt"

{
  echo
  echo "## The latency benchmark on the GPU (bench_cuda.txt)"
  echo
  echo '```'
  cat "$OUT/bench_cuda.txt"
  echo '```'
  echo
  echo "## The engine benchmark on the GPU (bench_batching.txt)"
  echo
  echo '```'
  cat "$OUT/bench_batching.txt"
  echo '```'
} >> "$SUMMARY"
echo "summary: $SUMMARY"
exit $FAILED
