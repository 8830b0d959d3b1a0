#!/usr/bin/env bash
# GPU check of the CUDA backend (issues 6 and 13). On a machine with an NVIDIA GPU and CUDA 13:
#   1. finds the CUDA libraries (driver, cuBLAS, NVRTC) and says which are missing,
#   2. builds the driver and the CUDA tests in release, or uses prebuilt copies (below),
#   3. runs the CUDA tests (einsum-cuda's operator tests, the driver's tests/cuda.rs),
#   4. checks llama-block at p = 1 and p = 8 (8 virtual devices on the GPUs there are)
#      against the single-device CPU reference (`einsummable run ... --backend cuda --check`),
#   5. times p = 1 bf16 (median of 10 graph replays after 2 warm-ups; CUDA events) of
#      LLaMA-3-8B's block at 1K, 8K and 32K tokens and of its attention alone at 8K, against
#      the same in PyTorch (cuBLAS, flash SDPA; scripts/torch_llama_block.py and
#      scripts/torch_attention.py) when torch imports,
# and prints one table (also written to $OUT/gpu-check.md when $OUT is set). Every step has
# its own time limit inside one overall budget (GPU_CHECK_BUDGET seconds, default 540), so
# the whole script ends inside one 10-minute call; a step that runs out of time says so.
# Exit status: 0 only when every test and check ran on a GPU and passed.
#
# Through the project's device tool (no network, no Rust toolchain there, 64 MiB carried):
#   here:   scripts/gpu-check.sh --prepare      # release builds into target/gpu-check/
#   there:  run command="scripts/gpu-check.sh" carry=["target/gpu-check"]
# `--prepare` copies (stripped) the `einsummable` binary and the two test binaries into
# target/gpu-check/ and prints their size. Where cargo can build offline (a machine with the
# toolchain and the crates), the script builds instead. NVRTC (libnvrtc.so.13, ~105 MB) is too
# large to carry: it must come from the machine (the CUDA toolkit, or pip's nvidia packages,
# which the script finds under python3's site-packages). Binaries built here (glibc 2.36) run
# on the device image (Ubuntu 24.04, glibc 2.39); stripped, the three came to 12 MB as debug
# builds (release ones are no larger).
set -uo pipefail
cd "$(dirname "$0")/.."

PREBUILT=target/gpu-check
# Checked against the CPU reference (small enough for the host): head dim 128 as LLaMA's.
SMALL="llama-block:tokens=1024,seqs=2,d_model=512,heads_q=8,heads_kv=2,d_head=128,d_ff=1536"
# Timed against PyTorch: LLaMA-3-8B's block (d_model 4096, 32 query / 8 kv heads of 128,
# d_ff 14336) at 1K, 8K and 32K tokens, and its attention alone at 8K. Each entry:
# label, workload, PyTorch script and its arguments.
TIMED=(
    "block-1K|llama-block:tokens=1024|torch_llama_block.py 1024 1 4096 32 8 128 14336"
    "block-8K|llama-block:tokens=8192|torch_llama_block.py 8192 1 4096 32 8 128 14336"
    "block-32K|llama-block:tokens=32768|torch_llama_block.py 32768 1 4096 32 8 128 14336"
    "attention-8K|attention:tokens=8192|torch_attention.py 8192 1 32 8 128"
)
# The driver tests that run the binary by its build-time path, which a copied test binary
# cannot find (step 4 runs the CLI instead).
CLI_SKIPS=(--skip run_with_the_cuda_backend_says_whether_a_driver_is_found --skip repeat_reports_the_median_of_the_timed_runs)

# Path of the executable cargo built for `cargo test --release --no-run ARGS` (first one).
test_binary() {
    cargo test --release --no-run --message-format=json "$@" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])
        break'
}

if [ "${1:-}" = "--prepare" ]; then
    set -e
    cargo build --release --bin einsummable
    mkdir -p "$PREBUILT"
    cp target/release/einsummable "$PREBUILT/einsummable"
    ops=$(test_binary -p einsum-cuda --test operators)
    drv=$(test_binary --test cuda)
    [ -n "$ops" ] && [ -n "$drv" ] || { echo "could not find the test binaries cargo built"; exit 1; }
    cp "$ops" "$PREBUILT/operators"
    cp "$drv" "$PREBUILT/cuda"
    command -v strip >/dev/null && strip "$PREBUILT"/einsummable "$PREBUILT"/operators "$PREBUILT"/cuda
    du -ch "$PREBUILT"/*
    total=$(du -cb "$PREBUILT"/* | tail -1 | cut -f1)
    if [ "$total" -gt $((60 << 20)) ]; then
        echo "warning: $total bytes; the device tool carries 64 MiB in all (with the working tree)"
    fi
    echo "now: run command=\"scripts/gpu-check.sh\" carry=[\"$PREBUILT\"]"
    exit 0
fi

START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-540}
# Seconds a step may take: at most $1, and what is left of the budget less a reserve for
# the table.
limit() {
    local want=$1 left=$((BUDGET - ($(date +%s) - START) - 15))
    [ "$left" -lt "$want" ] && want=$left
    [ "$want" -lt 1 ] && want=0
    echo "$want"
}
status=0
fail() { status=1; }

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    echo "nvidia-smi not found"
fi
date -u

echo "== CUDA libraries"
dirs=""
for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs="$dirs:$d"
done
pydirs=$(python3 - 2>/dev/null <<'EOF'
import glob, os, site
roots = set(site.getsitepackages())
try:
    roots.add(site.getusersitepackages())
except Exception:
    pass
found = set()
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        if glob.glob(os.path.join(d, "libnvrtc.so*")) or glob.glob(os.path.join(d, "libcublas.so*")):
            found.add(d)
print(":".join(sorted(found)))
EOF
)
[ -n "$pydirs" ] && dirs="$dirs:$pydirs"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}$dirs"
libs_ok=1
for lib in libcuda.so.1 libcublas.so.13 libnvrtc.so.13; do
    if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$lib" 2>/dev/null; then
        echo "$lib: found"
    else
        echo "$lib: MISSING (searched the loader path${dirs:+ and ${dirs#:}})"
        libs_ok=0
    fi
done
if [ "$libs_ok" = 0 ]; then
    echo "the CUDA backend cannot run here without these libraries; the checks below will say 'no CUDA driver found' or 'no NVRTC/cuBLAS found'"
    fail
fi

echo "== build (release, offline)"
built=0
BIN=""
if command -v cargo >/dev/null 2>&1; then
    t=$(limit 300)
    if [ "$t" -gt 0 ] && timeout "$t" cargo build --offline --release --bin einsummable 2>target-build.log; then
        built=1
        BIN=target/release/einsummable
    else
        echo "cargo build --offline failed or ran out of time (the crates must be in ~/.cargo; the device machine has no network). Last lines:"
        tail -5 target-build.log 2>/dev/null
    fi
    rm -f target-build.log
else
    echo "no cargo here"
fi
if [ -z "$BIN" ] && [ -x "$PREBUILT/einsummable" ]; then
    BIN=$PREBUILT/einsummable
    echo "using the prebuilt $BIN"
fi
if [ -z "$BIN" ]; then
    echo "no einsummable binary: run 'scripts/gpu-check.sh --prepare' where cargo works and carry $PREBUILT"
    exit 1
fi

declare -A TEST
# run_tests NAME CMD...: runs a test binary (or cargo test); PASS only when tests ran and
# none was skipped for lack of a GPU.
run_tests() {
    local name=$1 t log
    shift
    t=$(limit 240)
    if [ "$t" -le 0 ]; then
        TEST[$name]="not run (out of time)"
        fail
        return
    fi
    log=$(timeout "$t" "$@" 2>&1)
    local rc=$?
    echo "$log" | grep -E "^test |test result|skipped|panicked" | tail -40
    if [ "$rc" = 124 ]; then
        TEST[$name]="TIMEOUT after ${t}s"
        fail
    elif [ "$rc" != 0 ]; then
        TEST[$name]="FAIL (exit $rc)"
        fail
    elif echo "$log" | grep -q "skipped: no CUDA"; then
        TEST[$name]="skipped: no GPU"
        fail
    else
        TEST[$name]="PASS"
    fi
}

echo "== CUDA tests"
if [ "$built" = 1 ]; then
    run_tests operators cargo test --offline --release -p einsum-cuda --test operators -- --include-ignored --nocapture
    run_tests driver cargo test --offline --release --test cuda -- --include-ignored --nocapture
elif [ -x "$PREBUILT/operators" ] && [ -x "$PREBUILT/cuda" ]; then
    run_tests operators "$PREBUILT/operators" --include-ignored --nocapture
    run_tests driver "$PREBUILT/cuda" --include-ignored --nocapture "${CLI_SKIPS[@]}"
else
    TEST[operators]="not run (no cargo, no prebuilt tests)"
    TEST[driver]="not run (no cargo, no prebuilt tests)"
    echo "${TEST[operators]}"
    fail
fi

# field FILE KEY: KEY of the last JSON object line of FILE, else a short reason.
field() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
obj = None
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            pass
if obj is None:
    lines = [l.strip() for l in open(sys.argv[1], errors="replace") if l.strip()]
    print("error: " + (lines[-1][:80] if lines else "no output"))
elif "error" in obj:
    print("error: " + str(obj["error"]).splitlines()[0][:80])
else:
    v = obj.get(sys.argv[2])
    print("%.3g" % v if isinstance(v, float) else v)
EOF
}

out=$(mktemp)
echo "== llama-block against the CPU reference"
declare -A CHECK
for p in 1 8; do
    for dt in f32 bf16; do
        t=$(limit 120)
        if [ "$t" -le 0 ]; then
            CHECK[$p$dt]="not run (out of time)"
            fail
            continue
        fi
        timeout "$t" "$BIN" run "$SMALL" --devices "$p" --backend cuda --check --dtype "$dt" --json >"$out" 2>&1
        rc=$?
        err=$(field "$out" max_rel_error)
        ok=$(field "$out" ok)
        if [ "$rc" = 124 ]; then
            CHECK[$p$dt]="TIMEOUT after ${t}s"
            fail
        elif [ "$ok" = "True" ]; then
            CHECK[$p$dt]="$err ok"
        else
            CHECK[$p$dt]="FAIL $err"
            fail
        fi
        echo "p=$p $dt: ${CHECK[$p$dt]}"
    done
done

echo "== timing p = 1, bf16 (median of 10 after 2 warm-ups)"
declare -A MS DEV TORCH
have_torch=0
python3 -c "import torch" 2>/dev/null && have_torch=1
for entry in "${TIMED[@]}"; do
    IFS='|' read -r label wl torch_cmd <<<"$entry"
    t=$(limit 150)
    if [ "$t" -le 0 ]; then
        MS[$label]="not run (out of time)"
        DEV[$label]="-"
    else
        timeout "$t" "$BIN" run "$wl" --devices 1 --backend cuda --dtype bf16 --warmup 2 --repeat 10 --json >"$out" 2>&1
        rc=$?
        MS[$label]=$(field "$out" wall_ms)
        DEV[$label]=$(field "$out" device_ms)
        [ "$rc" = 124 ] && MS[$label]="TIMEOUT after ${t}s"
    fi
    t=$(limit 120)
    if [ "$have_torch" = 0 ]; then
        TORCH[$label]="torch missing"
    elif [ "$t" -le 0 ]; then
        TORCH[$label]="not run (out of time)"
    else
        # shellcheck disable=SC2086
        timeout "$t" python3 scripts/$torch_cmd 2 10 >"$out" 2>&1
        rc=$?
        TORCH[$label]=$(field "$out" ms)
        [ "$rc" = 124 ] && TORCH[$label]="TIMEOUT after ${t}s"
    fi
    echo "$label: einsummable ${DEV[$label]} ms on the device, ${MS[$label]} ms wall; PyTorch ${TORCH[$label]} ms"
done
rm -f "$out"

table=$(
    echo "GPU check, $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo
    echo "| tests | result |"
    echo "|---|---|"
    echo "| einsum-cuda operators | ${TEST[operators]} |"
    echo "| driver tests/cuda.rs | ${TEST[driver]} |"
    echo
    echo "| workload | check p=1 f32 | p=1 bf16 | p=8 f32 | p=8 bf16 |"
    echo "|---|---|---|---|---|"
    echo "| $SMALL | ${CHECK[1f32]} | ${CHECK[1bf16]} | ${CHECK[8f32]} | ${CHECK[8bf16]} |"
    echo
    echo "| p = 1, bf16 | einsummable on the device (ms) | einsummable wall (ms) | PyTorch (ms) | device / PyTorch |"
    echo "|---|---|---|---|---|"
    for entry in "${TIMED[@]}"; do
        IFS='|' read -r label wl _ <<<"$entry"
        ratio=$(python3 -c 'import sys
try: print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))
except ValueError: print("-")' "${DEV[$label]}" "${TORCH[$label]}")
        echo "| $label ($wl) | ${DEV[$label]} | ${MS[$label]} | ${TORCH[$label]} | $ratio |"
    done
    echo
    echo "Check columns: the largest error against the single-device CPU reference, then ok or FAIL."
    echo "einsummable: inputs and weights resident on the GPU (loaded once); the device time is CUDA"
    echo "events around the graph launch, which includes writing the saved output to pinned host"
    echo "memory; wall adds the host's read-back. PyTorch: the computation alone on resident tensors,"
    echo "output left on the GPU, synchronized around each run."
    echo
    if [ "$status" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL (see above)"; fi
)
echo
echo "$table"
[ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && echo "$table" >"$OUT/gpu-check.md"
exit $status
