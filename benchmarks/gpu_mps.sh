#!/usr/bin/env bash
# The protocol's grid with a worker process per core sharing the GPU through CUDA MPS (the
# Multi-Process Service: the workers' kernels run side by side instead of time-slicing the
# device), beside benchmarks/gpu.sh's runs without it — the comparison that decides whether a
# sweep on one GPU should start several processes under MPS or one interleaving process. A
# second call after gpu.sh, when the device has a minute and a half left (GRID_S, 45 s, and
# start-up); it writes grid_local_mps.json and grid_local-mps.txt into the same OUT_DIR.
#
#     benchmarks/gpu_mps.sh DATA_DIR [OUT_DIR]
#
# The MPS control daemon is started for this run alone, with its pipe and log folders in a
# temporary directory, and asked to quit at the end (the GPU's compute mode is left as it is).
# Where `nvidia-cuda-mps-control` is missing it says so and exits 0: nothing measured.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
gpu_setup benchmarks/gpu_mps.sh "$@"
if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "gpu_mps.sh: no nvidia-cuda-mps-control on this machine: MPS not measured" | tee "$out/grid_local-mps.txt"
    exit 0
fi
mps=$(mktemp -d)
export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "gpu_mps.sh: the MPS daemon did not start" | tee "$out/grid_local-mps.txt"; exit 1; }
trap 'echo quit | nvidia-cuda-mps-control; cat "$CUDA_MPS_LOG_DIRECTORY"/control.log >> "$out/grid_local-mps.txt" 2>/dev/null' EXIT

started=$(date +%s)
grid_run local-mps
echo "gpu_mps.sh: done in $(( $(date +%s) - started )) s; results in $out"
