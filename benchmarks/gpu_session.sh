#!/usr/bin/env bash
# A GPU session in one call (device time is short): install the pinned numba / numba-cuda
# carried in .whl/, say what the machine has, run tests/gpu, the CUDA benchmark suite and the
# fuzzer on the device. Logs and records land in $OUT (default /tmp/verglas-gpu); each stage has
# its own time limit so that one hang leaves the others their time.
#   bash benchmarks/gpu_session.sh [tests-s bench-s inner-s fuzz-s fuzz-programs models-s]
# (a limit of 0 skips its stage)
set -u
OUT=${OUT:-/tmp/verglas-gpu}
mkdir -p "$OUT"
LOG="$OUT/run.log"
T_TESTS=${1:-130} T_BENCH=${2:-150} T_INNER=${3:-40} T_FUZZ=${4:-60} PROGRAMS=${5:-1000} T_MODELS=${6:-90}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD" XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
say() { echo "=== $* ($(date -u +%T))" | tee -a "$LOG"; }

say setup
if [ -d .whl ]; then  # the pins of pyproject.toml; llvmlite travels as a stripped tar.xz
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || { say "wheel install failed"; exit 1; }
  for t in .whl/*.tar.xz; do [ -e "$t" ] && tar xJf "$t" -C /tmp/site; done
  export PYTHONPATH="$PWD:/tmp/site"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  $PY - <<'EOF'
import numpy, numba, llvmlite, cupy
from numba import cuda
from numba.cuda.cudadrv import nvvm
print("numpy", numpy.__version__, "numba", numba.__version__, "llvmlite", llvmlite.__version__,
      "cupy", cupy.__version__)
print("driver", cuda.cudadrv.driver.driver.get_version(), "nvvm", nvvm.NVVM().get_version(),
      "device", cuda.get_current_device().name, cuda.get_current_device().compute_capability)
EOF
} >>"$LOG" 2>&1
tail -n 4 "$LOG"

copy_records() { find benchmarks/results -maxdepth 1 -newer "$LOG.start" -type f \
  -exec cp {} "$OUT/" \; ; }
touch "$LOG.start"

if [ "$T_TESTS" -gt 0 ]; then
  say "tests/gpu (limit ${T_TESTS}s)"
  timeout "$T_TESTS" $PY -m pytest tests/gpu -q -n 8 -rfE -p no:cacheprovider >>"$LOG" 2>&1
  say "tests/gpu exit $?"
  grep -E "passed|failed|error" "$LOG" | tail -n 2
fi

if [ "$T_BENCH" -gt 0 ]; then
  say "benchmarks --device cuda (limit ${T_BENCH}s)"
  timeout "$T_BENCH" $PY -m benchmarks --device cuda --repeat 5 --json --name cuda >>"$LOG" 2>&1
  say "benchmarks exit $?"
  copy_records
fi

if [ "$T_INNER" -gt 0 ]; then
  say "inner programs (limit ${T_INNER}s)"
  timeout "$T_INNER" $PY -m benchmarks --device cuda --repeat 3 --json --name cuda-inner \
    --programs scan_rnn,ofg_layers,ofg_inlined >>"$LOG" 2>&1
  say "inner exit $?"
  copy_records
fi

if [ "$T_MODELS" -gt 0 ]; then
  say "model programs (limit ${T_MODELS}s)"
  timeout "$T_MODELS" $PY -m benchmarks --device cuda --repeat 5 --json --name cuda-models \
    --programs models >>"$LOG" 2>&1
  say "models exit $?"
  copy_records
fi

if [ "$T_FUZZ" -gt 0 ]; then
  # no new chunk of seeds starts in the last 40 s, so that the record gets written
  say "fuzz on the device (limit ${T_FUZZ}s)"
  timeout "$T_FUZZ" $PY -m benchmarks.fuzz --device cuda --configs cuda_gpu \
    --programs "$PROGRAMS" --jobs 14 --minimize 1 \
    --max-minutes "$($PY -c "print(($T_FUZZ - 40) / 60)")" --json --name fuzz-cuda-gpu \
    >>"$LOG" 2>&1
  say "fuzz exit $?"
  copy_records
  grep -E "^\| cuda_gpu" "$LOG" | tail -n 1
fi
rm -f "$LOG.start"
