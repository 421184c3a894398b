#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA device: the CUDA tests, then
# benchmarks/speed.py, task_prefetch.py and compiled_step.py on the GPU. Logs and the CSV go to
# OUT_DIR.
#
#     benchmarks/gpu.sh DATA_DIR [OUT_DIR]
set -uo pipefail
data=${1:?usage: benchmarks/gpu.sh DATA_DIR [OUT_DIR]}
out=${2:-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
PLASTICLAB_DATA=$data python3 -m pytest -q -p no:cacheprovider -rs -m cuda tests/ 2>&1 \
    | tee "$out/cuda_tests.log"
timeout "${SPEED_TIMEOUT:-360}" python3 benchmarks/speed.py --device cuda --data-dir "$data" \
    --mlp-steps 625 --cnn-steps 200 --repeats "${REPEATS:-2}" --verbose --csv "$out/speed_cuda.csv" \
    2>&1 | tee "$out/speed_cuda.log"
# The next task prepared in the background, on and off (K = 256, measurements off and on).
for m in "" "--measure"; do
    timeout 300 python3 benchmarks/task_prefetch.py --device cuda --data-dir "$data" --members 256 \
        --tasks 4 --rounds 2 $m 2>&1 | tee -a "$out/task_prefetch.log"
done
# The engine's compiled step (CUDA graphs) against its eager step, and a whole 8-task run each.
timeout 400 python3 benchmarks/compiled_step.py --device cuda --data-dir "$data" --members 64 256 \
    --tasks 8 2>&1 | tee "$out/compiled_step.log"
