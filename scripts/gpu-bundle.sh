#!/usr/bin/env bash
# Builds, here, every test and benchmark executable that needs a GPU (halcyon-cuda's tests and
# benchmark, halcyon-vulkan's tests and the Vulkan benchmark, and the cross-device benchmark,
# whose cuda_peer group needs two CUDA devices, and the NCCL benchmark) in release mode, and
# gathers them with a runner in one folder, for a GPU machine that has the driver but no Rust
# toolchain.
#
#   scripts/gpu-bundle.sh [FOLDER] [--vulkan-loader] [--nccl LIBNCCL]   # default FOLDER: .gpu
#   # copy FOLDER to the GPU machine (it needs nothing else from the checkout), then there:
#   FOLDER/run.sh OUTPUT_DIR          # OUTPUT_DIR/log (every executable's output) and /summary
#
# Each executable gets PER_EXECUTABLE_TIMEOUT seconds (default 200) so that one hang does not
# cost the rest; the summary and log are appended as each one ends, so they survive the
# runner being killed.
#
# `--vulkan-loader` also downloads Debian's amd64 libvulkan1 package into FOLDER/deb; run.sh
# unpacks it when the machine has no Vulkan loader (GPU images often ship the NVIDIA ICD but
# no libvulkan.so.1). The executables load libcuda / libvulkan at run time, so they also run
# (and skip with a reason) on a machine without a GPU: `FOLDER/run.sh /tmp/out` here is a check
# of the bundle itself.
#
# `--nccl LIBNCCL` carries an NCCL library (the `nvidia-nccl-cu12` wheel's
# `nvidia/nccl/lib/libnccl.so.2`: `pip download nvidia-nccl-cu12` and unzip it) as
# FOLDER/lib/libnccl.so.2; run.sh points the NCCL benchmark at it (HALCYON_NCCL_LIBRARY), or at
# an NCCL it finds on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=.gpu
loader=0
nccl=
while [ $# -gt 0 ]; do
    case "$1" in
        --vulkan-loader) loader=1 ;;
        --nccl) shift; nccl=${1:?--nccl needs the path of a libnccl.so.2} ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) dest=$1 ;;
    esac
    shift
done
rm -rf "$dest"
mkdir -p "$dest/bin"
if [ -n "$nccl" ]; then
    mkdir -p "$dest/lib"
    cp "$nccl" "$dest/lib/libnccl.so.2"
fi

# Prints the executables cargo names for `cargo "$@" --message-format=json`.
executables() {
    cargo "$@" --message-format=json 2>/dev/null |
        grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//'
}

{
    # The fake-driver tests need the fake's library beside them and no GPU: they run in CI.
    executables test -p halcyon-cuda --release --no-run | grep -v '/fake_driver' | sed 's/^/test /'
    executables bench -p halcyon-cuda --no-run | grep -E '/(cuda|nccl)-' | sed 's/^/bench /'
    executables test -p halcyon-vulkan --release --no-run | sed 's/^/test /'
    executables bench -p halcyon-vulkan --bench vulkan --no-run | sed 's/^/bench /'
    executables bench -p halcyon-examples --bench cross_device --no-run | sed 's/^/bench /'
} | while read -r kind path; do
    name=$(basename "$path")
    cp "$path" "$dest/bin/$name"
    strip --strip-debug "$dest/bin/$name" 2>/dev/null || true
    echo "$kind $name" >>"$dest/manifest"
done

if [ "$loader" = 1 ]; then
    mkdir -p "$dest/deb" /tmp/gpu-bundle-apt/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gpu-bundle-apt'
    # shellcheck disable=SC2086
    apt-get $o update -qq && (cd "$dest/deb" && apt-get $o download libvulkan1)
fi

cat >"$dest/run.sh" <<'RUNNER'
#!/usr/bin/env bash
# Runs every executable of this bundle (see scripts/gpu-bundle.sh): their output in $1/log, one
# line per executable in $1/summary.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUTPUT_DIR}
mkdir -p "$out"
# (grep without -q reads all of ldconfig's output: with -q, ldconfig may die of SIGPIPE and,
# under pipefail, the library would read as missing.)
if ! ldconfig -p 2>/dev/null | grep 'libvulkan.so.1' >/dev/null && ls "$here"/deb/*.deb >/dev/null 2>&1; then
    for f in "$here"/deb/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi -L >"$out/summary" 2>&1 || echo "no nvidia-smi" >"$out/summary"
# NVRTC (for the tests that compile CUDA C): the image's toolkit or pip wheels may be off the
# loader path; halcyon-cuda opens libnvrtc.so, .so.13 or .so.12 by name.
if ! ldconfig -p 2>/dev/null | grep 'libnvrtc\.so' >/dev/null; then
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
        /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
        /opt/torch/.venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
        if ls "$dir"/libnvrtc.so* >/dev/null 2>&1; then
            export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        fi
    done
fi
# ptxas and fatbinary (checked_in_ptx_assembles_with_ptxas): the toolkit's, where there is one.
if ! command -v ptxas >/dev/null 2>&1; then
    for dir in /usr/local/cuda/bin /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/bin; do
        if [ -x "$dir/ptxas" ]; then
            export PATH="$dir:$PATH"
            break
        fi
    done
fi
# NCCL for the NCCL benchmark: the carried one, else a wheel's on the machine.
if [ -z "${HALCYON_NCCL_LIBRARY:-}" ]; then
    for lib in "$here/lib/libnccl.so.2" \
        /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2; do
        if [ -f "$lib" ]; then
            export HALCYON_NCCL_LIBRARY="$lib"
            break
        fi
    done
fi
echo "HALCYON_NCCL_LIBRARY=${HALCYON_NCCL_LIBRARY:-}" >>"$out/summary"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$out/summary"
echo "ptxas: $(command -v ptxas || echo none); fatbinary: $(command -v fatbinary || echo none)" >>"$out/summary"
cd "$here"
while read -r kind name; do
    case "$kind" in
        test) args=() ;;
        bench) args=(--bench) ;;
    esac
    start=$(date +%s)
    printf '\n===== %s %s =====\n' "$kind" "$name" >>"$out/log"
    timeout "${PER_EXECUTABLE_TIMEOUT:-200}" "bin/$name" "${args[@]}" >"$out/current" 2>&1
    rc=$?
    cat "$out/current" >>"$out/log"
    printf '%-5s %-44s rc=%-3s %4ss  %s\n' "$kind" "$name" "$rc" "$(($(date +%s) - start))" \
        "$(grep -E '^test result:' "$out/current" | tail -n 1)" >>"$out/summary"
done <manifest
rm -f "$out/current"
cat "$out/summary"
RUNNER
chmod +x "$dest/run.sh"
echo "bundle in $dest ($(du -sh "$dest" | cut -f1)):"
cat "$dest/manifest"
