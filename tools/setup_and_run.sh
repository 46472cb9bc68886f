#!/usr/bin/env bash
# Installs the packages, builds Hyla (Release, in build/, CUDA when nvcc is found) and runs the main
# job: `hyla selfcheck`, the CPU self-check and short benchmark of the delta-rule core (it uses
# CUDA when the build has it and a GPU is visible). Idempotent. Arguments go to `hyla selfcheck`.
# Environment: HYLA_CUDA=AUTO|ON|OFF (default AUTO), HYLA_BUILD_DIR (default build/).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/install_deps.sh

build_dir="${HYLA_BUILD_DIR:-build}"
# Keep the generator of an existing build directory; a new one uses Ninja.
generator=()
[[ -f "$build_dir/CMakeCache.txt" ]] || generator=(-G Ninja)

# The same configuration as tools/setup_and_test.sh, so the two share build/.
cmake -S . -B "$build_dir" "${generator[@]}" -DHYLA_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
  -DHYLA_SANITIZE=OFF -DHYLA_CUDA="${HYLA_CUDA:-AUTO}"
cmake --build "$build_dir" --target hyla_cli
"$build_dir/bin/hyla" selfcheck "$@"
