#!/usr/bin/env bash
# Builds llama.cpp's llama-quantize, llama-bench, llama-perplexity, llama-batched-bench,
# llama-imatrix and llama-server (CPU only): the peers of bench/llamacpp_quants.py
# (llama.cpp's own quantization presets, plain and with an importance matrix,
# on the same model, text and KLD code), bench/cpu_performance.py,
# bench/batching.py and bench/serving.py.
#
# Source: the llama.cpp that the llama-cpp-python sdist vendors (a pinned,
# released snapshot reachable through the ordinary pip client). Everything
# lives under .cache/peer/ (git-ignored). Idempotent: each step is skipped when
# its result is already there. Deliberately light: one compile job at nice 19
# (the machine is shared), static libraries, only the tools in TARGETS. A
# tool added to TARGETS later is built into the existing build directory
# (same configuration; the others are up to date and not rebuilt).
#
# LLAMACPP_CUDA=1: the CUDA peer of scripts/gpu-check.sh instead: llama-bench
# and llama-batched-bench with GGML_CUDA=ON for sm_90 machine code only
# (90-real: the H200 of the device machine; no PTX), CPU code without
# -march=native (the device's processor is another one), shared libraries
# (the two tools share one libggml-cuda.so: the device tool carries at most
# 64 MiB, and each static tool was 78 MB with PTX), all in
# .cache/peer/build-cuda/bin. It links the toolkit's cudart and cuBLAS
# dynamically (CUDA 13 here and on the device machine).
#
# Usage: scripts/build_llamacpp.sh        (prints the bin directory at the end)
#        LLAMACPP_JOBS=2 scripts/build_llamacpp.sh
#        LLAMACPP_CMAKE_ARGS="..." scripts/build_llamacpp.sh   (extra cmake flags)
# On an Intel Xeon VM that lists AMX but does not grant it, the native build
# (GGML_NATIVE=ON: -march=native, AMX included) dies with SIGILL in
# llama-bench, and -DGGML_AMX_*=OFF alone changes nothing under
# GGML_NATIVE=ON (measured 2026-12-01). Build it without native and with
# the ISA listed instead (remove .cache/peer/build first):
#   LLAMACPP_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
#     -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
#     -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
#     -DGGML_AMX_BF16=OFF" scripts/build_llamacpp.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$ROOT/.cache/peer"
PIP="$ROOT/.venv/bin/pip"
JOBS="${LLAMACPP_JOBS:-1}"
if [ "${LLAMACPP_CUDA:-0}" = 1 ]; then
  BUILD="$WORK/build-cuda"
  TARGETS=(llama-bench llama-batched-bench)
  KIND_ARGS=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF
    -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=ON
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined")
  # (libggml-cuda.so calls the driver, libcuda.so.1, which only the device
  # machine has: the tools link without resolving it here.)
  KIND="CUDA for sm_90 (GGML_NATIVE=OFF on the CPU side)"
else
  BUILD="$WORK/build"
  TARGETS=(llama-quantize llama-bench llama-perplexity llama-imatrix llama-batched-bench llama-server)
  KIND_ARGS=(-DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF)
  KIND="CPU only"
fi
BIN="$BUILD/bin"
say() { echo "[build_llamacpp] $*" >&2; }

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}
if have_all && [ -s "$BIN/LLAMACPP_VERSION.txt" ]; then
  say "already built: $BIN"
  echo "$BIN"
  exit 0
fi

mkdir -p "$WORK"
# 1. The sdist (source only, no dependencies).
SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)"
if [ -z "$SDIST" ]; then
  [ -x "$PIP" ] || { say "no $PIP (run scripts/setup.sh first)"; exit 1; }
  say "downloading the llama-cpp-python sdist"
  "$PIP" download -q --no-deps --no-binary :all: -d "$WORK" llama-cpp-python
  SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz | head -1)"
fi
VERSION="$(basename "$SDIST" .tar.gz)"; VERSION="${VERSION#llama_cpp_python-}"

# 2. Its vendored llama.cpp.
SRC="$WORK/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  say "extracting vendor/llama.cpp from $(basename "$SDIST")"
  rm -rf "$WORK/extract" "$SRC"
  mkdir -p "$WORK/extract"
  tar -xzf "$SDIST" -C "$WORK/extract"
  mv "$WORK/extract/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SRC"
  rm -rf "$WORK/extract"
fi

# 3. Configure (once) and build only the tools in TARGETS.
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  say "configuring $BUILD"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    "${KIND_ARGS[@]}" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DGGML_OPENMP=OFF ${LLAMACPP_CMAKE_ARGS:-} \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$BIN" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$BIN" >/dev/null
fi
# A build configured before llama-server was a target gains it here.
if [ "${LLAMACPP_CUDA:-0}" != 1 ] && grep -q '^LLAMA_BUILD_SERVER:BOOL=OFF' "$BUILD/CMakeCache.txt"; then
  cmake -S "$SRC" -B "$BUILD" -DLLAMA_BUILD_SERVER=ON >/dev/null
fi
say "building ${TARGETS[*]} with -j$JOBS (slow on a shared machine)"
nice -n 19 cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"

# 4. Record what was built. The ggml flags come from the build's own
# CMakeCache (GGML_NATIVE and the ISA switches that are ON; AMX when off),
# so an existing build that gains a tool keeps an honest description.
cache_flags() {
  local c="$BUILD/CMakeCache.txt" native on amx
  native="$(sed -n 's/^GGML_NATIVE:BOOL=//p' "$c" | head -1)"
  on="$(sed -n 's/^GGML_\(AVX[A-Z0-9_]*\|FMA\|F16C\|BMI2\):BOOL=ON$/\1/p' "$c" | paste -sd' ' -)"
  amx="$(grep -q '^GGML_AMX_[A-Z0-9]*:BOOL=OFF' "$c" && echo ", AMX off")"
  echo "GGML_NATIVE=${native:-?}${on:+ with $on}${amx}"
}
# The sdist has no git metadata (llama.cpp's own
# build number is 0 there), but its CHANGELOG names the vendored commit.
# awk reads the whole CHANGELOG: leaving early would kill tar with SIGPIPE,
# which pipefail + set -e turn into a failed build.
BUILD_NUMBER="$(sed -n 's/.*LLAMA_BUILD_NUMBER *= *\([0-9]*\).*/\1/p' \
  "$BUILD/common/build-info.cpp" 2>/dev/null | head -1)"
[ "${BUILD_NUMBER:-0}" = 0 ] && BUILD_NUMBER="unknown (no git metadata in the sdist)"
COMMIT="$(tar -xzf "$SDIST" -O "llama_cpp_python-$VERSION/CHANGELOG.md" 2>/dev/null |
  awk -v v="## [$VERSION]" '$0 == v {on = 1; next} on && /^## / {on = 0}
    on && !found && match($0, /llama\.cpp@[0-9a-f]+/) {
      print substr($0, RSTART + 10, RLENGTH - 10); found = 1}')"
{
  echo "llama-cpp-python sdist: $VERSION"
  echo "llama.cpp build number: $BUILD_NUMBER"
  echo "llama.cpp commit: ${COMMIT:-unknown} (from the sdist's CHANGELOG)"
  echo "ggml version: $(sed -n 's/.*set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\)).*/\2/p' \
    "$SRC/ggml/CMakeLists.txt" 2>/dev/null | paste -sd. -)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(cache_flags), $KIND"
  echo "tools: ${TARGETS[*]}"
} >"$BIN/LLAMACPP_VERSION.txt"
have_all || { say "build finished but a tool is missing in $BIN"; exit 1; }
say "done: $BIN"
echo "$BIN"
