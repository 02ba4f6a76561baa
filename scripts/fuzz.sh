#!/usr/bin/env bash
# Runs halcyon's cargo-fuzz targets (fuzz/fuzz_targets/, see docs/FUZZING.md) for a bounded time
# each, from a copy of its committed seeds (fuzz/seeds/<target>/) in a temporary folder, so the
# committed seeds never grow. Prints, per target, the executions libFuzzer ran, and exits
# nonzero on a crash (libFuzzer saves the input under fuzz/artifacts/<target>/).
#
# Usage: scripts/fuzz.sh [target...]        (default: every target)
#   FUZZ_SECONDS    seconds per target (default 20)
#   FUZZ_TOOLCHAIN  the nightly toolchain cargo-fuzz builds with (default nightly)
#   FUZZ_SANITIZER  address, none, ... (default none: the targets are safe Rust over safe APIs,
#                   and without ASan a build takes half the time and runs several times faster)
#   FUZZ_SEED       libFuzzer's -seed (default: libFuzzer picks one, printed in each log); CI
#                   fixes it so that a run explores the same inputs each time
#   CARGO_TARGET_DIR is honoured (default fuzz/target).
#
# Exit status: 0 every target ran clean; 1 a crash or a build failure; 2 the fuzzers did not run
# because the nightly toolchain or cargo-fuzz cannot be installed (printed as FUZZ DID NOT RUN).
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=${FUZZ_TOOLCHAIN:-nightly}
seconds=${FUZZ_SECONDS:-20}
sanitizer=${FUZZ_SANITIZER:-none}
seed_flag=()
if [ -n "${FUZZ_SEED:-}" ]; then
    seed_flag=(-seed="$FUZZ_SEED")
fi

did_not_run() {
    echo "FUZZ DID NOT RUN: $*" >&2
    exit 2
}

command -v rustup >/dev/null || did_not_run "no rustup to provide a nightly toolchain"
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing the '$toolchain' toolchain" >&2
    rustup toolchain install "$toolchain" --profile minimal ||
        did_not_run "cannot install the '$toolchain' toolchain"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed; installing it from crates.io" >&2
    cargo install cargo-fuzz --locked || did_not_run "cannot install cargo-fuzz"
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$toolchain" fuzz list)
fi

echo "fuzz.sh: building ${targets[*]} (sanitizer: $sanitizer)"
cargo "+$toolchain" fuzz build -s "$sanitizer"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=()
failed=0
for target in "${targets[@]}"; do
    corpus="$work/$target"
    mkdir -p "$corpus"
    if [ -d "fuzz/seeds/$target" ]; then
        cp -R "fuzz/seeds/$target/." "$corpus/"
    fi
    seeds=$(find "$corpus" -type f | wc -l)
    echo
    echo "=== $target: ${seconds}s from $seeds seeds ==="
    status=0
    cargo "+$toolchain" fuzz run -s "$sanitizer" "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 "${seed_flag[@]}" \
        >"$work/$target.log" 2>&1 || status=$?
    runs=$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$work/$target.log" | tail -1 || true)
    corpus_size=$(find "$corpus" -type f | wc -l)
    if [ "$status" = 0 ]; then
        results+=("$target: ${runs:-no 'Done' line}; corpus $seeds -> $corpus_size inputs")
    else
        failed=1
        tail -n 60 "$work/$target.log"
        results+=("$target: FAILED (exit $status) after ${runs:-an unknown number of runs}; see fuzz/artifacts/$target/")
    fi
done

echo
echo "=== fuzz summary (${seconds}s per target, sanitizer $sanitizer) ==="
printf '%s\n' "${results[@]}"
exit "$failed"
