#!/usr/bin/env bash
# The IREE anchors of the CPU round trips, measured in the same run as halcyon's: a 256-element
# f32 add compiled for IREE's llvm-cpu backend and invoked with iree-benchmark-module on the
# local-task (thread pool) and local-sync (calling thread) devices, next to halcyon's tiny
# dispatch round trip on the pool and inline CPU devices (benches/cpu.rs, tiny_add).
#
# IREE comes from PyPI (iree-base-runtime, iree-base-compiler) into target/iree-venv; without a
# network the script says so and exits 2. Each IREE figure is one invocation: argument
# buffers, a result allocation, the dispatch and the wait; halcyon's is a dispatch into
# buffers allocated once, and its await.
#
# Usage: scripts/iree-anchor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/iree-venv
if [[ ! -x $venv/bin/iree-benchmark-module ]]; then
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install -q iree-base-runtime iree-base-compiler; then
        echo "iree-anchor.sh: cannot install IREE from PyPI (no network?); nothing measured" >&2
        exit 2
    fi
fi
dir=target/iree-anchor
mkdir -p "$dir"
cat > "$dir/add.mlir" <<'MLIR'
func.func @add(%a: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<256xf32> {
  %c = arith.addf %a, %b : tensor<256xf32>
  return %c : tensor<256xf32>
}
MLIR
"$venv/bin/iree-compile" --iree-hal-target-device=local \
    --iree-hal-local-target-device-backends=llvm-cpu --iree-llvmcpu-target-cpu=host \
    "$dir/add.mlir" -o "$dir/add.vmfb"

iree_us() { # device: microseconds per invocation (median of 5 repetitions)
    "$venv/bin/iree-benchmark-module" --device="$1" --module="$dir/add.vmfb" --function=add \
        --input=256xf32=1 --input=256xf32=2 --benchmark_min_time=1s \
        --benchmark_repetitions=5 --benchmark_format=json 2>/dev/null |
        python3 -c 'import json, statistics, sys
runs = [b for b in json.load(sys.stdin)["benchmarks"] if b.get("run_type") == "iteration"]
print("%.2f" % statistics.median(1e6 / b["items_per_second"] for b in runs))'
}
task=$(iree_us local-task)
sync=$(iree_us local-sync)

cargo bench -q -p halcyon-cpu --bench cpu -- --noplot 'tiny_add/(pool|inline)/dispatch_block_on' \
    >/dev/null 2>&1
median_us() { # criterion id (with '/' as '_' in the directory name): median in microseconds
    python3 -c 'import json, sys
print("%.2f" % (json.load(open(sys.argv[1]))["median"]["point_estimate"] / 1e3))' \
        "target/criterion/tiny_add/$1/new/estimates.json"
}
pool=$(median_us pool_dispatch_block_on)
inline=$(median_us inline_dispatch_block_on)
printf '%-34s %10s %10s %7s\n' "round trip" "halcyon" "IREE" "ratio"
printf '%-34s %8s us %8s us %6.2fx\n' "pool vs IREE local-task" "$pool" "$task" \
    "$(python3 -c "print($pool / $task)")"
printf '%-34s %8s us %8s us %6.2fx\n' "inline vs IREE local-sync" "$inline" "$sync" \
    "$(python3 -c "print($inline / $sync)")"
