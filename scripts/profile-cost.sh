#!/usr/bin/env bash
# Counts the instructions of 10 000 tiny inline dispatch round trips on the CPU device with
# callgrind (stable on a noisy VM, unlike wall time), then measures their wall time with the
# profiler off and on interleaved (ROUNDS rounds, default 400): the profiler off and on, and, with
# BASE=<git rev>, the same loop built from that revision (before profiling existed; lines
# marked `// profiler` are dropped there). Prints instructions per round trip.
#
# MODE=pool counts the pool device instead (every thread's instructions).
#
# Usage: scripts/profile-cost.sh            BASE=63d04ef~1 scripts/profile-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "profile-cost.sh: valgrind is not installed" >&2; exit 2; }
N=${N:-10000}
MODE=${MODE:-inline}

count() { # binary, args...: instructions per round trip
    local out
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >/dev/null 2>&1
    local total
    total=$(grep -E '^summary:|^totals:' "$out" | head -1 | awk '{print $2}')
    rm -f "$out"
    echo $(( total / N ))
}

cargo build -q --release -p halcyon-cpu --example profile_cost
bin=target/release/examples/profile_cost
# Subtract a run of 0 round trips (setup) so only the loop counts.
setup=$(N=1 count "$bin" off 0 "$MODE")
echo "setup: $setup instructions"
off=$(count "$bin" off "$N" "$MODE")
on=$(count "$bin" on "$N" "$MODE")
echo "off: $(( off - setup / N )) instructions per round trip"
echo "on:  $(( on - setup / N )) instructions per round trip"
# Wall time, off and on interleaved, and off against off (the method's own bias).
"$bin" paired "${ROUNDS:-400}" "$MODE"
PAIRED_CONTROL=1 "$bin" paired "${ROUNDS:-400}" "$MODE" | sed 's/^/control (off vs off): /'

if [[ -n "${BASE:-}" ]]; then
    dir=$(mktemp -d)
    git worktree add -q --detach "$dir" "$BASE"
    mkdir -p "$dir/backends/cpu/examples"
    grep -v '// profiler' backends/cpu/examples/profile_cost.rs > "$dir/backends/cpu/examples/profile_cost.rs"
    (cd "$dir" && CARGO_TARGET_DIR="$PWD/../profile-cost-target" cargo build -q --release -p halcyon-cpu --example profile_cost)
    base_bin="$dir/../profile-cost-target/release/examples/profile_cost"
    base=$(count "$base_bin" off "$N" "$MODE")
    echo "base ($BASE): $(( base - setup / N )) instructions per round trip"
    git worktree remove --force "$dir"
fi
