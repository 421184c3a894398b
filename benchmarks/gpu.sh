#!/usr/bin/env bash
# The GPU checks in one run that ends within 8 minutes, for a machine with a CUDA device:
#   1. the device and torch;
#   2. the CUDA tests (every test marked `cuda`);
#   3. the engine's L2 Init step against the compiled torch.func peer at K = 256 and 1024, and a
#      whole `plasticlab run --device cuda` (K = 256) against the engine (benchmarks/speed.py);
#   3b. the L2 Init drop-in's `loss + reg()` in a plain model of 100 parameter tensors, one node
#      of foreach kernels against its plain form (benchmarks/dropin_penalty.py);
#   4. Shrink & Perturb's step with its noise from each member's host generator against Philox
#      on the device (draws=philox), eager and compiled whole (--compile: one CUDA graph),
#      K = 64, 300 steps (plasticlab run --json: steps/s, compilation included);
#   5. the paper's protocol on Permuted MNIST with Adam (`plasticlab reproduce
#      main-permuted_mnist-adam --device cuda`: grid on 3 seeds, selection, 10 new seeds, 500
#      tasks) three times: with a worker process per core (`--executor local`, the default),
#      with one process stepping every ensemble in turn, each on a CUDA stream of its own
#      (`--executor interleaved`), and that with `--compile` and Shrink & Perturb's and CBP's
#      draws on the device (`benchmarks/philox_grid.py`'s sweep file: every grid method's step a
#      CUDA graph replay; other random numbers than the committed study's); each its
#      wall time if it ends within its budget, else its pace extrapolated to the whole study
#      (benchmarks/grid_pace.py), into grid.json (local), grid_interleaved.json and
#      grid_interleaved_compile_philox.json, with the device, the commit and the executor; the
#      interleaved runs' grid_*.txt hold their aggregate pace every 10 s with the number of
#      ensembles in flight, and where the rate admission settled (`admission` in the JSON).
# Everything goes to OUT_DIR (default benchmarks/recorded/<gpu>-<date>), to be committed.
# With a minute and a half of device time left after it: benchmarks/gpu_mps.sh DATA_DIR OUT_DIR,
# the first grid run again with its workers under CUDA MPS (grid_local_mps.json).
#
#     benchmarks/gpu.sh DATA_DIR [OUT_DIR]
#
# Budgets (seconds, each a hard timeout; 455 s in all): TESTS_S=135 (four of the CUDA tests
# compile a step) SPEED_S=75 PENALTY_S=10 SP_S=25 (each of the two eager draws; the compiled one
# SP_COMPILED_S=50) GRID_S=45 (each of the three grid runs).
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
gpu_setup benchmarks/gpu.sh "$@"
{
    date -u +%FT%TZ
    git rev-parse HEAD
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$out/device.txt"

timeout "${TESTS_S:-135}" python3 -m pytest -q -p no:cacheprovider -rs -m cuda tests/ 2>&1 \
    | tee "$out/cuda_tests.txt"

timeout "${SPEED_S:-75}" python3 benchmarks/speed.py --device cuda --data-dir "$data" \
    --archs mlp --methods l2_init --members 256,1024 --cli-members 256 --peer-members 256,1024 \
    --mlp-steps 625 --repeats 1 --verbose --csv "$out/speed_cuda.csv" 2>&1 | tee "$out/speed_cuda.txt"

timeout "${PENALTY_S:-10}" python3 benchmarks/dropin_penalty.py --device cuda --repeats 3 2>&1 \
    | tee "$out/dropin_penalty.txt"

for form in generator philox philox-compiled; do
    draws=${form%-compiled} budget=${SP_S:-25} compile=()
    [ "$form" = philox-compiled ] && budget=${SP_COMPILED_S:-50} compile=(--compile)
    timeout "$budget" plasticlab run --device cuda --problem permuted_mnist --method shrink_perturb \
        --set draws=$draws "${compile[@]}" --seeds 0-63 --tasks 1 --steps-per-task 300 --no-measure \
        --no-progress --data-dir "$data" --out "$(mktemp -d)" --json > "$out/shrink_perturb_$form.json" \
        2> "$out/shrink_perturb_$form.err"
    echo "shrink_perturb $form: exit $?, $(grep -o '"steps_per_second": [0-9.]*' "$out/shrink_perturb_$form.json" | head -1)"
done 2>&1 | tee "$out/shrink_perturb_draws.txt"

# The protocol, with each executor: the grid trains in the background; at its budget's end (or
# its own end) its pace is read from the results folder (gpu_lib.sh's grid_run).
for form in local interleaved interleaved-compile-philox; do
    grid_run "$form"
done
echo "gpu.sh: done in $(( $(date +%s) - $(date -d "$(head -1 "$out/device.txt")" +%s) )) s; results in $out"
