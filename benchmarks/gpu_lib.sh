# What benchmarks/gpu.sh and benchmarks/gpu_mps.sh share, sourced by both (bash).

# gpu_setup SCRIPT DATA_DIR [OUT_DIR]: sets data, gpu (the device's name, lower case) and out
# (default benchmarks/recorded/<gpu>-<date>), makes out, and exports the data folder.
gpu_setup() {
    data=${2:?usage: $1 DATA_DIR [OUT_DIR]}
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr 'A-Z' 'a-z')
    out=${3:-benchmarks/recorded/${gpu:-gpu}-$(date -u +%Y-%m-%d)}
    mkdir -p "$out"
    export PYTHONUNBUFFERED=1 PLASTICLAB_DATA=$data
}

# grid_run FORM: `main-permuted_mnist-adam` on the device for GRID_S seconds (45), trained by
# FORM — local (a worker process per core), local-mps (the same, its caller having started CUDA
# MPS), interleaved (one process, every ensemble on its own stream) or interleaved-compile-philox
# (that with --compile and Shrink & Perturb's and CBP's draws on the device:
# benchmarks/philox_grid.py's sweep file) — then its wall time, or its pace extrapolated from
# the results folder (benchmarks/grid_pace.py), into $out/grid.json (local) or
# $out/grid_<form>.json, its output and `plasticlab status` into $out/grid_<form>.txt.
grid_run() {
    local form=$1 executor=${1%%-*} grid record started code finished ended=()
    grid=$(mktemp -d)
    record=$out/grid.json
    [ "$form" = local ] || record=$out/grid_${form//-/_}.json
    started=$(date +%s)
    if [ "$form" = interleaved-compile-philox ]; then
        python3 benchmarks/philox_grid.py "$grid/philox.toml"
        timeout --signal=TERM "${GRID_S:-45}" plasticlab sweep "$grid/philox.toml" --device cuda \
            --executor interleaved --compile --out "$grid/runs/main-permuted_mnist-adam" \
            --data-dir "$data" --no-progress > "$out/grid_$form.txt" 2>&1
    else
        timeout --signal=TERM "${GRID_S:-45}" plasticlab reproduce main-permuted_mnist-adam --device cuda \
            --executor "$executor" --out "$grid/runs" --docs "$grid/docs" --data-dir "$data" \
            --no-progress > "$out/grid_$form.txt" 2>&1
    fi
    code=$?
    finished=$(date +%s)
    [ "$code" -eq 0 ] && ended=(--finished "$finished")
    python3 benchmarks/grid_pace.py "$grid/runs/main-permuted_mnist-adam" --started "$started" \
        "${ended[@]}" --device "$gpu" --executor "$form" --log "$out/grid_$form.txt" --json "$record"
    plasticlab status "$grid/runs/main-permuted_mnist-adam" >> "$out/grid_$form.txt" 2>&1
}
