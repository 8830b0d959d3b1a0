#!/usr/bin/env bash
# GPU check of the CUDA backend (issue 6). On a machine with an NVIDIA GPU and CUDA 13:
#   1. builds the driver and the CUDA tests in release,
#   2. runs the CUDA tests (einsum-cuda's operator tests, the driver's tests/cuda.rs),
#   3. checks llama-block at p = 1 and p = 8 (8 virtual devices on the GPUs there are)
#      against the single-device CPU reference (`einsummable run ... --backend cuda --check`),
#   4. times p = 1 (median of 10 graph replays after 2 warm-ups) against the same block in
#      PyTorch (bf16, cuBLAS, SDPA; scripts/torch_llama_block.py) when torch imports,
# and prints one table. Budget: one 10-minute call on a 16-core H200 box with no network.
#
# Honest notes on running it through the project's device tool:
# - The tool copies the working tree (tracked and untracked, not ignored, files); `target/`
#   is ignored, so it only travels when named in `carry` (64 MiB in all: enough for
#   `target/release/einsummable`, not for a whole target directory).
# - The device machine has no network and, as far as we know, no ~/.cargo registry, so
#   `cargo build --offline` fails there for lack of crates. The script then says so and
#   falls back to a prebuilt `target/release/einsummable` if one was carried (steps 3-4
#   only; the cargo tests of step 2 need the toolchain and the crates).
# - NVRTC must be loadable at run time (libnvrtc.so.13 from the CUDA toolkit, or pip's
#   nvidia-cuda-nvrtc; set LD_LIBRARY_PATH to its lib directory).
set -uo pipefail
cd "$(dirname "$0")/.."

SMALL="llama-block:tokens=1024,seqs=2,d_model=512,heads_q=8,heads_kv=4,d_head=64,d_ff=1536"
SMALL_DIMS="1024 2 512 8 4 64 1536"
BIG="llama-block:tokens=4096,seqs=2,d_model=2048,heads_q=16,heads_kv=8,d_head=128,d_ff=5632"
BIG_DIMS="4096 2 2048 16 8 128 5632"
BIN=target/release/einsummable
status=0

echo "== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi not found"
date -u

echo "== build (release, offline)"
built=0
if command -v cargo >/dev/null 2>&1 && timeout 300 cargo build --offline --release --bin einsummable 2>build.log; then
    built=1
else
    echo "cargo build --offline failed (no toolchain, or the crates are not in ~/.cargo: the device"
    echo "machine has no network). Last lines:"; tail -5 build.log 2>/dev/null
fi
if [ ! -x "$BIN" ]; then
    echo "no $BIN: build here and carry it (run carry=[\"target/release/einsummable\"])"; exit 1
fi

echo "== CUDA tests"
if [ "$built" = 1 ]; then
    timeout 240 cargo test --offline --release -p einsum-cuda -- --nocapture 2>&1 | grep -E "test result|skipped|panicked|FAILED|error" || status=1
    timeout 240 cargo test --offline --release --test cuda -- --nocapture 2>&1 | grep -E "test result|skipped|panicked|FAILED|error" || status=1
else
    echo "skipped: cargo cannot build here"
fi

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('$1', d.get('error', '?')))"; }

echo "== llama-block against the CPU reference"
declare -A ERR OK
for p in 1 8; do
    for dt in f32 bf16; do
        out=$(timeout 120 "$BIN" run "$SMALL" --devices "$p" --backend cuda --check --dtype "$dt" --json 2>&1 | tail -1)
        ERR[$p$dt]=$(echo "$out" | json max_rel_error)
        OK[$p$dt]=$(echo "$out" | json ok)
        [ "${OK[$p$dt]}" = "True" ] || status=1
        echo "p=$p $dt: max error ${ERR[$p$dt]} ok ${OK[$p$dt]}"
    done
done

echo "== timing p = 1, bf16 (median of 10 after 2 warm-ups)"
declare -A MS TORCH
for w in SMALL BIG; do
    wl=${!w}
    MS[$w]=$(timeout 150 "$BIN" run "$wl" --devices 1 --backend cuda --dtype bf16 --warmup 2 --repeat 10 --json 2>&1 | tail -1 | json wall_ms)
    dims_var=${w}_DIMS
    if python3 -c "import torch" 2>/dev/null; then
        TORCH[$w]=$(timeout 120 python3 scripts/torch_llama_block.py ${!dims_var} 2 10 | json ms)
    else
        TORCH[$w]="torch missing"
    fi
done

echo
echo "| workload | check p=1 f32 | p=1 bf16 | p=8 f32 | p=8 bf16 | einsummable p=1 bf16 (ms) | PyTorch bf16 (ms) |"
echo "|---|---|---|---|---|---|---|"
echo "| $SMALL | ${ERR[1f32]} | ${ERR[1bf16]} | ${ERR[8f32]} | ${ERR[8bf16]} | ${MS[SMALL]} | ${TORCH[SMALL]} |"
echo "| $BIG | - | - | - | - | ${MS[BIG]} | ${TORCH[BIG]} |"
echo
echo "einsummable times include copying inputs into pinned memory and outputs back (the driver's execute());"
echo "PyTorch times are the block alone on resident tensors."
exit $status
