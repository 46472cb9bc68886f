#!/usr/bin/env bash
# Installs the Debian 12 packages Hyla builds and tests with. Idempotent: when every package is
# already installed it changes nothing and needs no network. Runs apt-get as root, or through sudo.
# CUDA is not installed here: the build uses nvcc when it finds one (see README, HYLA_CUDA).
set -euo pipefail

# One list for every script (setup_and_run.sh, setup_and_test.sh, .ci/run).
packages=(
  cmake                  # >= 3.24
  ninja-build
  g++                    # C++20
  git                    # tools/format.sh lists tracked files
  libcli11-dev           # the hyla command's argument parser (CLI11, header-only)
  libgtest-dev           # tests (GoogleTest)
  libgmock-dev
  libbenchmark-dev       # CPU benchmarks (Google Benchmark)
  nlohmann-json3-dev     # JSON: safetensors headers, config.json (header-only)
  libpcre2-dev           # tokenizer: pre-tokenizer regexes (optional in CMake: no tokenizer without)
  libicu-dev             # tokenizer: NFC normalization (optional like PCRE2)
  libboost-dev           # hyla serve: Boost.Beast + Asio, header-only (optional in CMake)
  libopenblas-openmp-dev # BLAS, run single-threaded inside Hyla's own parallel tasks
  clang-format           # tools/format.sh (version 14 on Debian 12)
  nodejs                 # the tokenizer tests' reference: HF's JS tokenizer (tokenizer_reference.sh)
  npm                    # ... fetched with npm (pinned versions)
  chromium-headless-shell # the chat page of `hyla serve` checked in a headless browser (serve_chat_page)
)

missing=()
for p in "${packages[@]}"; do
  # NodeSource's nodejs package bundles npm and conflicts with Debian's: a working npm will do.
  if [[ $p == npm ]] && command -v npm >/dev/null 2>&1; then
    continue
  fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install_deps.sh: not root and no sudo; install these packages: ${missing[*]}" >&2
  exit 1
fi

echo "install_deps.sh: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
