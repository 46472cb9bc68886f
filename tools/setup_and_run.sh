#!/usr/bin/env bash
# Installs the packages, builds Hyla (Release, in build/, CUDA when nvcc is found) and runs the main
# job: `hyla generate "<prompt>"`, which streams an English continuation from the embedded demo
# model (models/hyla-demo: a small Qwen3.5 with its own tokenizer, see its MODEL_CARD.md) on the
# CPU. Without that model (not trained yet) it runs `hyla selfcheck` instead and says so.
# Idempotent. Arguments go to `hyla generate` (default: a prompt of its own), e.g.
#   bash tools/setup_and_run.sh "The old house at the end of the road" --max-new-tokens 200
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

if [[ ! -f models/hyla-demo/model.safetensors ]]; then
  echo "setup_and_run.sh: models/hyla-demo has no model yet (tools/demo/train.py makes it, see" \
    "models/README.md); running the CPU self-check instead"
  exec "$build_dir/bin/hyla" selfcheck
fi
if [[ $# -eq 0 ]]; then
  set -- "It was a bright cold morning, and"
fi
exec "$build_dir/bin/hyla" generate "$@"
