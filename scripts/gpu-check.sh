#!/usr/bin/env bash
# GPU check of the CUDA backend: correctness first, then speed against PyTorch.
#
# Needs: an NVIDIA GPU (compute capability 7.5 or later) with its driver (libcuda.so.1),
# cuBLAS and NVRTC of CUDA 13 (libcublas.so.13, libnvrtc.so.13: from the CUDA toolkit or
# from pip's nvidia packages under python3's site-packages, both searched), python3, and
# for the timing comparison PyTorch with CUDA. Either cargo with the crates already fetched
# (it builds offline) or the prebuilt binaries of `--prepare` in target/gpu-check/.
#
#   scripts/gpu-check.sh --prepare      # where cargo works: release builds, stripped, into
#                                       # target/gpu-check/ (the driver and two test binaries)
#   scripts/gpu-check.sh [--out DIR]    # on the GPU machine
#
# What it does, inside one overall budget (GPU_CHECK_BUDGET seconds, default 540; every step
# has its own limit, and a step that runs out of time says so):
#   1. finds the CUDA libraries and says which are missing;
#   2. correctness, all at once: einsum-cuda's operator tests (every kernel against the CPU
#      reference in f32, f16 and bf16, attention at head dims 64 and 128, causal and packed,
#      at 8K tokens), the driver's tests/cuda.rs, and `einsummable run llama-block --check`
#      at p = 1 and p = 8 (8 virtual devices on the one GPU) in f32 and bf16;
#   3. timing, one run at a time: p = 1 bf16 (median of 10 graph replays after 2 warm-ups;
#      CUDA events) of LLaMA-3-8B's block at 1K, 8K and 32K tokens and of its attention alone
#      at 8K, beside the simulator's prediction on the `h200` preset and the same computation
#      in PyTorch (cuBLAS, flash SDPA; scripts/torch_llama_block.py, scripts/torch_attention.py).
# It prints one Markdown table and writes it, with every step's full log, to DIR (default
# $OUT when set, else a new temporary directory). Exit status: 0 only when every test and
# check ran on a GPU and passed.
set -uo pipefail
cd "$(dirname "$0")/.."

PREBUILT=target/gpu-check
LOGS=${OUT:-}
if [ "${1:-}" = "--out" ]; then
    [ -n "${2:-}" ] || { echo "--out needs a directory"; exit 2; }
    LOGS=$2
fi
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
found = None
for line in sys.stdin:  # all of it: leaving early would end cargo with SIGPIPE
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if not found and m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        found = m["executable"]
if found:
    print(found)'
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
    echo "then, on the GPU machine with $PREBUILT beside the checkout: scripts/gpu-check.sh --out DIR"
    exit 0
fi

if [ -z "$LOGS" ]; then
    LOGS=$(mktemp -d)
fi
mkdir -p "$LOGS" || exit 2
# Every step's own log and exit status; gathered into a few files in $LOGS at the end.
WORK=$(mktemp -d)

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
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "lib64")):
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

declare -A TEST CHECK
# start NAME LIMIT CMD...: runs CMD in the background under `timeout LIMIT`, its output in
# $WORK/NAME.log and its exit status in $WORK/NAME.rc.
start() {
    local name=$1 t=$2
    shift 2
    ( timeout "$t" "$@" >"$WORK/$name.log" 2>&1; echo $? >"$WORK/$name.rc" ) &
}
# rc NAME: the exit status a started job left (124 when timed out, 255 when it left none).
rc() { cat "$WORK/$1.rc" 2>/dev/null || echo 255; }

# Correctness first, all at once (they only share the GPU; nothing here is timed): the two
# test binaries and the four CLI checks.
echo "== correctness (in parallel): CUDA tests, llama-block against the CPU reference"
t=$(limit 200)
if [ "$built" = 1 ]; then
    start operators "$t" cargo test --offline --release -p einsum-cuda --test operators -- --include-ignored --nocapture
    start driver "$t" cargo test --offline --release --test cuda -- --include-ignored --nocapture
elif [ -x "$PREBUILT/operators" ] && [ -x "$PREBUILT/cuda" ]; then
    start operators "$t" "$PREBUILT/operators" --include-ignored --nocapture
    start driver "$t" "$PREBUILT/cuda" --include-ignored --nocapture "${CLI_SKIPS[@]}"
else
    for name in operators driver; do
        echo "no cargo, no prebuilt tests" >"$WORK/$name.log"
        echo 254 >"$WORK/$name.rc"
    done
fi
for p in 1 8; do
    for dt in f32 bf16; do
        start "check-p$p-$dt" "$t" "$BIN" run "$SMALL" --devices "$p" --backend cuda --check --dtype "$dt" --json
    done
done
wait

for name in operators driver; do
    log="$WORK/$name.log"
    code=$(rc "$name")
    grep -E "^test |test result|^ok |^FAIL |skipped|panicked" "$log" | tail -60
    if [ "$code" = 124 ]; then
        TEST[$name]="TIMEOUT after ${t}s"
    elif [ "$code" = 254 ]; then
        TEST[$name]="not run (no cargo, no prebuilt tests)"
    elif [ "$code" != 0 ]; then
        TEST[$name]="FAIL (exit $code)"
    elif grep -q "skipped: no CUDA" "$log"; then
        TEST[$name]="skipped: no GPU"
    else
        TEST[$name]="PASS"
    fi
    [ "${TEST[$name]}" = PASS ] || fail
done
for p in 1 8; do
    for dt in f32 bf16; do
        name="check-p$p-$dt"
        err=$(field "$WORK/$name.log" max_rel_error)
        ok=$(field "$WORK/$name.log" ok)
        if [ "$(rc "$name")" = 124 ]; then
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

echo "== timing p = 1, bf16 (median of 10 after 2 warm-ups), one at a time"
declare -A MS DEV PRED TORCH HOST
have_torch=0
python3 -c "import torch" 2>/dev/null && have_torch=1
for entry in "${TIMED[@]}"; do
    IFS='|' read -r label wl torch_cmd <<<"$entry"
    t=$(limit 90)
    log="$WORK/time-$label.log"
    if [ "$t" -le 0 ]; then
        MS[$label]="not run (out of time)"
        DEV[$label]="-"
        PRED[$label]="-"
    else
        timeout "$t" "$BIN" run "$wl" --devices 1 --topology h200 --backend cuda --dtype bf16 --warmup 2 --repeat 10 --json >"$log" 2>&1
        rc=$?
        MS[$label]=$(field "$log" wall_ms)
        DEV[$label]=$(field "$log" device_ms)
        PRED[$label]=$(field "$log" predicted_ms)
        [ "$rc" = 124 ] && MS[$label]="TIMEOUT after ${t}s"
    fi
    t=$(limit 60)
    HOST[$label]="-"
    if [ "$have_torch" = 0 ]; then
        TORCH[$label]="torch missing"
    elif [ "$t" -le 0 ]; then
        TORCH[$label]="not run (out of time)"
    else
        # shellcheck disable=SC2086
        timeout "$t" python3 scripts/$torch_cmd 2 10 >>"$log" 2>&1
        rc=$?
        TORCH[$label]=$(field "$log" ms)
        HOST[$label]=$(field "$log" ms_to_host)
        [ "$rc" = 124 ] && TORCH[$label]="TIMEOUT after ${t}s"
    fi
    echo "$label: einsummable ${DEV[$label]} ms on the device, ${MS[$label]} ms wall (h200 simulator ${PRED[$label]} ms); PyTorch ${TORCH[$label]} ms, ${HOST[$label]} ms with the output to host"
done

# Where the time goes: every kernel of one eager run of the 8K block, ours and PyTorch's, by
# Nsight Compute (duration, SM and DRAM throughput as a percentage of peak; clocks left as
# they are), when ncu is here and time is left.
echo "== profile: the 8K block's kernels (Nsight Compute)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
METRICS=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
if [ -z "$NCU" ]; then
    echo "ncu not found: no profile"
else
    t=$(limit 60)
    [ "$t" -gt 0 ] && timeout "$t" "$NCU" --clock-control none --print-units base --metrics "$METRICS" --csv \
        "$BIN" run llama-block:tokens=8192 --devices 1 --topology h200 --backend cuda --dtype bf16 --eager --json \
        >"$WORK/profile-einsummable.log" 2>&1
    t=$(limit 60)
    [ "$t" -gt 0 ] && [ "$have_torch" = 1 ] && timeout "$t" "$NCU" --clock-control none --print-units base --metrics "$METRICS" --csv \
        python3 scripts/torch_llama_block.py 8192 1 4096 32 8 128 14336 0 1 >"$WORK/profile-torch.log" 2>&1
    for who in einsummable torch; do
        python3 - "$WORK/profile-$who.log" "$who" <<'EOF'
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"')))
if len(rows) < 2:
    print(sys.argv[2] + ": no profile")
    sys.exit()
head = rows[0]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
total = {}
for r in rows[1:]:
    if r[m] == "gpu__time_duration.sum":
        name = r[k][:70]
        total[name] = total.get(name, 0.0) + float(r[v].replace(",", ""))
ns = sum(total.values())
print(f"{sys.argv[2]}: {ns / 1e6:.3f} ms in {len(total)} kernels; the largest:")
for name, t in sorted(total.items(), key=lambda x: -x[1])[:12]:
    print(f"  {t / 1e6:8.3f} ms  {name}")
EOF
    done
fi

# ratio A B: A / B to two places, or "-".
ratio() {
    python3 -c 'import sys
try: print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))
except ValueError: print("-")' "$1" "$2"
}

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
    echo "| p = 1, bf16 | einsummable on the device (ms) | einsummable wall (ms) | simulator, h200 (ms) | PyTorch, output to host (ms) | PyTorch, output on the GPU (ms) | device / PyTorch to host | device / PyTorch on the GPU |"
    echo "|---|---|---|---|---|---|---|---|"
    for entry in "${TIMED[@]}"; do
        IFS='|' read -r label wl _ <<<"$entry"
        echo "| $label ($wl) | ${DEV[$label]} | ${MS[$label]} | ${PRED[$label]} | ${HOST[$label]} | ${TORCH[$label]} | $(ratio "${DEV[$label]}" "${HOST[$label]}") | $(ratio "${DEV[$label]}" "${TORCH[$label]}") |"
    done
    echo
    echo "Check columns: the largest error against the single-device CPU reference, then ok or FAIL."
    echo "einsummable: inputs and weights resident on the GPU (loaded once); the device time is CUDA"
    echo "events around the graph launch, which includes writing the saved output to pinned host"
    echo "memory; wall adds the host's read-back. PyTorch: the same computation on resident tensors,"
    echo "CUDA events around each run, with its output copied to pinned host memory (the work an"
    echo "einsummable run's device time covers) and left on the GPU. Simulator: the run's plan on the h200"
    echo "preset (vendor figures), as \`run --topology h200\` predicts it."
    echo
    if [ "$status" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL (see above)"; fi
)
echo
echo "$table"
# At most seven files: the table, the two test logs, the checks', the timings' and the
# profiles'.
echo "$table" >"$LOGS/gpu-check.md"
cp "$WORK/operators.log" "$LOGS/tests-operators.log" 2>/dev/null
cp "$WORK/driver.log" "$LOGS/tests-driver.log" 2>/dev/null
for kind in check time profile; do
    for f in "$WORK/$kind"-*.log; do
        [ -e "$f" ] && { echo "=== $(basename "$f" .log)"; cat "$f"; }
    done >"$LOGS/$kind.log"
done
echo "the table and every step's log: $LOGS"
exit $status
