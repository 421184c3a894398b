#!/usr/bin/env bash
# One reproduction study on a CUDA device within a wall-clock limit, with the CUDA tests
# beside it: what a GPU machine lent for minutes can record. Into OUT_DIR go the machine's
# description, the CUDA tests' log, the study's log, its status when it stopped (the pace of
# each ensemble still training), the export of every run that finished, and how those runs
# compare with the study's committed CPU runs (`compare --statistical`).
#
#     docs/reproduction/gpu.sh DATA_DIR OUT_DIR STUDY [LIMIT_S [reproduce options…]]
#
# Run it from the repository root; it needs no install (PYTHONPATH=src). DEVICE=cpu runs the
# same steps without a GPU, to try the script.
set -uo pipefail
usage="usage: docs/reproduction/gpu.sh DATA_DIR OUT_DIR STUDY [LIMIT_S [options…]]"
data=${1:?$usage}
out=${2:?$usage}
study=${3:?$usage}
limit=${4:-480}
shift $(( $# < 4 ? $# : 4 ))
device=${DEVICE:-cuda}
runs=${RUNS_DIR:-/tmp/plasticlab-gpu/runs}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$out"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available()
                and torch.cuda.get_device_name())"
} 2>&1 | tee "$out/machine.txt"

# Every test that needs a CUDA device (marked `cuda`; CI skips them), while the study trains:
# from the test files that mark some (tests/test_gpu_scripts.py checks that these hold every
# one), so that collecting the rest of the suite takes no core from the study.
# The CNN's need CIFAR-10 in DATA as well as MNIST.
[ -d "$data/cifar10" ] || echo "no $data/cifar10: the CNN's CUDA tests will be skipped" | tee -a "$out/machine.txt"
# shellcheck disable=SC2046  # one word per file
PLASTICLAB_DATA=$data python3 -m pytest -q -p no:cacheprovider -rs -m cuda $(grep -l 'mark\.cuda' tests/test_*.py) \
    > "$out/cuda_tests.txt" 2>&1 &
tests=$!

start=$(date +%s)
# TERM at the limit: the sweep saves each ensemble at its next task end and stops.
timeout -k 60 "$limit" python3 -m plasticlab.cli reproduce "$study" --device "$device" \
    --out "$runs" --docs "$runs/docs" --data-dir "$data" --no-progress "$@" > "$out/study.log" 2>&1
echo "reproduce exited $? after $(( $(date +%s) - start )) s (limit $limit s)" | tee -a "$out/study.log"
python3 -m plasticlab.cli status "$runs/$study" > "$out/status.txt" 2>&1
python3 -m plasticlab.cli export "$runs/$study" --to "$out/results.json.gz" >> "$out/study.log" 2>&1
[ -f "$runs/docs/$study/run.json" ] && cp "$runs/docs/$study/run.json" "$out/"
# The finished runs against this repository's CPU runs of the study, on the tasks both ran.
if [ -f "docs/reproduction/$study/results.json.gz" ]; then
    python3 -m plasticlab.cli compare --statistical "$out" "docs/reproduction/$study" > "$out/compare.txt" 2>&1
fi
wait $tests
echo "CUDA tests: $(tail -1 "$out/cuda_tests.txt")"
tail -25 "$out/status.txt"
