#!/usr/bin/env bash
# Runs the core's and the stream layer's unit tests and the CPU backend's FFI-free tests under
# Miri (nightly): the Rust-kernel binding views on the worker pool (data races, aliasing), the
# typed transfers, device teardown with work in flight, profile records, the refusal of
# checked C-ABI specs, buffer views (typed bindings, the workers' gathers), collectives
# through a test engine, and the access bookkeeping's unit tests. Tests that dlopen C libraries
# are skipped under cfg(miri).
#
# Usage: scripts/miri.sh            (CARGO_TARGET_DIR is honoured; default target/miri-run)
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=${MIRI_TOOLCHAIN:-nightly}
if ! cargo "+$toolchain" miri --version >/dev/null 2>&1; then
    echo "miri.sh: Miri is not installed for the '$toolchain' toolchain; installing it" >&2
    if ! rustup component add miri rust-src --toolchain "$toolchain"; then
        echo "miri.sh: FAILED: cannot install the miri component for '$toolchain'" \
            "(no network, or no Miri in this nightly); the Miri checks did not run" >&2
        exit 2
    fi
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri-run}
# The core's reactor inbox casts integers to pointers; accept that instead of warning on it.
export MIRIFLAGS=${MIRIFLAGS:--Zmiri-permissive-provenance}

set -x
# The concurrency core's unit tests (semaphores, fences, buffers and their mapping guards,
# command buffers).
cargo "+$toolchain" miri test -p halcyon --lib
# The stream layer's unit tests (its tables: staging pool, registry, allocations, timepoints,
# the reclaimer's deferral).
cargo "+$toolchain" miri test -p halcyon-stream --lib
cargo "+$toolchain" miri test -p halcyon-cpu --test rust_kernels
cargo "+$toolchain" miri test -p halcyon-cpu --test device_drop
# The typed user API: element casts of typed writes, reads into Vec<T> and typed constants.
cargo "+$toolchain" miri test -p halcyon-cpu --test typed_api
cargo "+$toolchain" miri test -p halcyon-cpu --test c_kernels
# Profiles: records written by the submitting thread, the pool's workers and the signalling
# thread while others take them; a full window recycling its oldest record.
cargo "+$toolchain" miri test -p halcyon-cpu --test profile
cargo "+$toolchain" miri test -p halcyon-cpu --test views
cargo "+$toolchain" miri test -p halcyon-cpu --test collectives -- --skip an_abandoned
# An abandoned collective keeps its memory for good, by design (the engine may still write it):
# the leak check would flag exactly that, so this one test runs without it.
MIRIFLAGS="$MIRIFLAGS -Zmiri-ignore-leaks" \
    cargo "+$toolchain" miri test -p halcyon-cpu --test collectives -- an_abandoned
cargo "+$toolchain" miri test -p halcyon-cpu --lib access::
