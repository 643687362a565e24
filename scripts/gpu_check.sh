#!/usr/bin/env bash
# The whole course on a CUDA GPU: every lesson and every solution notebook at full size, the
# latency benchmark (minillm against transformers, GPU and CPU), the engine benchmark, and the
# tests marked `cuda`. Everything it writes goes to one folder.
#
#     bash scripts/gpu_check.sh [OUT_DIR]     (default: $OUT when set, else ./gpu-check-output)
#     bash scripts/gpu_check.sh --list        the notebooks it runs, one a line (no GPU needed)
#
# Options, to fit a run into the time a machine is lent for:
#     --only REGEX     only the notebooks whose path matches (e.g. 'notebooks/0[56]')
#     --steps LIST     which steps, comma-separated (default notebooks,bench,batching,pytest)
#     --ci             the notebooks at their reduced CI sizes
#
# A dry run on a CPU, every Python process on the fake CUDA device of tests/fake_cuda.py:
#     PYTHONPATH=tests/fake_cuda_site bash scripts/gpu_check.sh --ci --only notebooks/04
#
# Set-up: run from a checkout where `make setup` has made .venv (or set PYTHON to another
# interpreter with minillm's dependencies); the model must be in the cache ($MINILLM_CACHE,
# default ~/.cache/minillm): nothing is downloaded. Plain bash; each step has a time limit, a
# failed step is recorded and the next one runs; the exit status is 1 when any step failed.
#
# Writes: summary.md (each step: passed or failed, its time, the benchmark reports),
# environment.txt, nvidia-smi.txt, notebooks/ and solutions/ (each notebook executed, charts
# included), bench_cuda.{txt,json}, bench_cpu.{txt,json}, bench_batching.{txt,json},
# pytest_cuda.{txt,xml}, and logs/ (each step's output).
set -uo pipefail
cd "$(dirname "$0")/.."

LIST=0 ONLY="" STEPS="notebooks,bench,batching,pytest" SIZES=full OUT_ARG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --list) LIST=1 ;;
    --only) ONLY="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --ci) SIZES=ci ;;
    -*) echo "unknown option $1 (see the top of $0)" >&2; exit 2 ;;
    *) OUT_ARG="$1" ;;
  esac
  shift
done

notebooks() {
  ls notebooks/[0-9][0-9]*_*.ipynb solutions/[0-9][0-9]_*.ipynb | grep -E -- "${ONLY:-.}"
}

wanted() {  # is step $1 among --steps?
  [[ ",$STEPS," == *",$1,"* ]]
}

if [ $LIST -eq 1 ]; then
  notebooks
  exit 0
fi

OUT="${OUT_ARG:-${OUT:-gpu-check-output}}"
mkdir -p "$OUT/logs" "$OUT/notebooks" "$OUT/solutions"
OUT="$(cd "$OUT" && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLCONFIGDIR="${MPLCONFIGDIR:-$(mktemp -d)}"
if [ $SIZES = ci ]; then export CI=1; else unset CI; fi
SUMMARY="$OUT/summary.md"
FAILED=0

# step NAME LIMIT_SECONDS COMMAND...: run it, log its output, record the result in the summary;
# returns the command's exit status.
step() {
  local name="$1" limit="$2"
  shift 2
  local log="$OUT/logs/$name.log" start=$SECONDS rc result
  echo "== $name"
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    result="passed"
  elif [ $rc -eq 124 ]; then
    result="**timed out after ${limit} s**"
  else
    result="**failed (exit $rc)**"
  fi
  echo "| $name | $result | ${took} s |" >> "$SUMMARY"
  if [ $rc -ne 0 ]; then
    FAILED=1
    tail -n 20 "$log"
  fi
  return $rc
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
for notebook in $(wanted notebooks && notebooks); do
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
if "$PYTHON" -m minillm bench --help 2> /dev/null | grep -q "{latency"; then
  BENCH=(bench latency)
else
  BENCH=(bench)
fi
if wanted bench; then
  step bench_cuda 1200 "$PYTHON" -m minillm "${BENCH[@]}" --device cuda \
    --json "$OUT/bench_cuda.json"
  cp "$OUT/logs/bench_cuda.log" "$OUT/bench_cuda.txt"
  step bench_cpu 1200 "$PYTHON" -m minillm "${BENCH[@]}" --device cpu --dtypes fp32 \
    --repeats 2 --json "$OUT/bench_cpu.json"
  cp "$OUT/logs/bench_cpu.log" "$OUT/bench_cpu.txt"
fi
if wanted batching; then
  step bench_batching 1800 "$PYTHON" scripts/bench_batching.py --device cuda \
    --json "$OUT/bench_batching.json"
  cp "$OUT/logs/bench_batching.log" "$OUT/bench_batching.txt"
fi
if wanted pytest; then
  step pytest_cuda 1200 "$PYTHON" -m pytest -m cuda tests -p no:cacheprovider -q \
    --junitxml "$OUT/pytest_cuda.xml"
  cp "$OUT/logs/pytest_cuda.log" "$OUT/pytest_cuda.txt"
fi

for report in bench_cuda bench_batching; do
  if [ -f "$OUT/$report.txt" ]; then
    printf '\n## %s.txt\n\n```\n' "$report" >> "$SUMMARY"
    cat "$OUT/$report.txt" >> "$SUMMARY"
    printf '```\n' >> "$SUMMARY"
  fi
done
echo "summary: $SUMMARY"
exit $FAILED
