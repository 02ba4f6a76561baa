#!/usr/bin/env bash
# Assembles halcyon-cuda's PTX with NVIDIA's ptxas for the oldest and newest architectures
# halcyon targets, the check a driver's JIT would make, without a GPU: the hand-written gather
# kernel (src/gather.rs) and the checked-in test PTX (tests/cuda.rs,
# checked_in_ptx_assembles_with_ptxas). ptxas comes from NVIDIA's nvcc wheel on PyPI
# (nvidia-cuda-nvcc-cu12), fetched into $CARGO_TARGET_DIR (default target/)/ptxas; PTXAS names
# another ptxas instead.
#
# Exit 2 (and PTXAS DID NOT RUN) when no ptxas can be had; any other failure is the PTX's.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
ptxas=${PTXAS:-}
if [ -z "$ptxas" ]; then
    dir="$target/ptxas"
    ptxas=$(find "$dir" -name ptxas -type f 2>/dev/null | head -1 || true)
    if [ -z "$ptxas" ]; then
        mkdir -p "$dir"
        if ! python3 -m pip download --quiet --no-deps --dest "$dir" nvidia-cuda-nvcc-cu12 \
            >/dev/null 2>&1; then
            echo "PTXAS DID NOT RUN: cannot download nvidia-cuda-nvcc-cu12"
            exit 2
        fi
        python3 -m zipfile -e "$dir"/nvidia_cuda_nvcc_cu12-*.whl "$dir/wheel"
        ptxas=$(find "$dir/wheel" -name ptxas -type f | head -1)
        chmod +x "$ptxas"
    fi
fi
ptxas=$(realpath "$ptxas")
"$ptxas" --version | tail -1
export PTXAS="$ptxas"
cargo test -p halcyon-cuda --lib gather::tests -- --nocapture
cargo test -p halcyon-cuda --test cuda checked_in_ptx_assembles_with_ptxas -- --nocapture
