#!/usr/bin/env bash
# The GPU check of issue 25 (item 6), one script for a lent GPU machine; each part under its own
# time limit, so one that fails or hangs leaves the others their turn. Figures print as plain
# lines and land as one JSON per part in $OUT (default /tmp/gpu_check). Without CUDA the parts
# that need it say "skipped: no CUDA" and the rest run (a dry run on a CPU machine).
#
#   benchmarks/gpu_check.sh            # from the repository root; at most 9.9 minutes (the limits), 4 on an H200
#   QUICK=1 benchmarks/gpu_check.sh    # a light dry run: small steps, small sizes
#   PARTS="atom dask" benchmarks/gpu_check.sh   # only the parts named
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
declare -A RC

part() {  # part NAME SECONDS COMMAND...: run COMMAND under a limit, note its exit status
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  if [[ -n ${PARTS:-} && " $PARTS " != *" $name "* ]]; then return; fi
  echo "== $name (limit ${limit} s): $*"
  timeout -k 10 "$limit" "$@"
  RC[$name]=$?
  echo "== $name rc=${RC[$name]} in $((SECONDS - start)) s"
}

echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if [[ -n ${QUICK:-} ]]; then
  part tests 120 $PY -m pytest tests/gpu -q -p no:randomly -p no:cacheprovider -o addopts= --timeout=100 -rs
  part mfu 60 $PY -m benchmarks.gpu_mfu --sizes nano --seq-len 64 --microbatch 2 --repeats 2 --out "$OUT/mfu.json"
  part atom 60 $PY -m benchmarks.gpu_atom --size nano --seq-len 32 --microbatch 2 --steps 2 --out "$OUT/atom.json"
  part collectives 120 $PY -m benchmarks.gpu_collectives --ranks 2 --mb 1 --reform-at 2 --out "$OUT/collectives.json"
  part dask 300 $PY -m benchmarks.gpu_dask --sizes nano --baseline nano --seq-len 32 --steps 3 --out "$OUT/dask.json"
else
  part tests 80 $PY -m pytest tests/gpu -q -p no:randomly -p no:cacheprovider -o addopts= --timeout=80 -rs \
    --junitxml="$OUT/tests.xml"
  part mfu 70 $PY -m benchmarks.gpu_mfu --out "$OUT/mfu.json"
  part atom 120 $PY -m benchmarks.gpu_atom --out "$OUT/atom.json"
  part atom_peak 90 $PY -m benchmarks.gpu_atom_peak --out "$OUT/atom_peak.json"
  part atom_bench 40 $PY benchmarks/atom.py --device cuda --size small --seq-len 512 --microbatch 8 --accumulation 4 \
    --budget-fraction 0.9 --repeats 2
  part collectives 45 $PY -m benchmarks.gpu_collectives --out "$OUT/collectives.json"
  part dask 150 $PY -m benchmarks.gpu_dask --out "$OUT/dask.json"
fi
echo -n "== gpu_check done in ${SECONDS} s:"
for name in "${!RC[@]}"; do echo -n " $name=${RC[$name]}"; done
echo
