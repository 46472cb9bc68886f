#!/usr/bin/env bash
# Runs on the H200 device machine: the decode benchmark on several trees in one call, so that
# pending patches are measured side by side with main (same machine, same minutes).
#   bash tools/gpu/decode_compare.sh [--tests] NAME=PATCH[,PATCH...] ... -- BENCH_ARGS...
# e.g. bash tools/gpu/decode_compare.sh --tests late=tools/gpu/pending/decode-late.patch \
#        both=tools/gpu/pending/decode-deep.patch,tools/gpu/pending/decode-late.patch \
#        -- "--overlap --batch 1" "--batch 1" "--sweep --floor --batch 1024"
# Each NAME is this tree with its patches applied (in order) in a copy under $WORK (build-trees/,
# ignored; KEEP=1 reuses a copy made from the same patches, with its build, on a warm machine);
# "main" is the tree as it is. Every quoted BENCH_ARGS group is run on every tree (main first); the table rows
# are printed with the tree's name in front. --tests: also the GPU tests of every tree, main included.
# Output: $OUT/compare.txt (everything printed, with the build errors if any) and the patched
# trees' test logs; build logs stay in $WORK.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
WORK=${WORK:-$PWD/build-trees}  # ignored by git; kept between calls on a warm machine
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/compare.txt") 2>&1
tests=0
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --tests) tests=1 ;;
    *=*) variants+=("$1") ;;
    *) echo "not NAME=PATCHES: $1" && exit 2 ;;
  esac
  shift
done
[[ ${1:-} == -- ]] && shift
groups=("$@")
[[ ${#groups[@]} -eq 0 ]] && groups=("--overlap --batch 1")

root=$PWD
trees=("main=$root")
for v in "${variants[@]}"; do
  name=${v%%=*}
  dir=$WORK/$name
  trees+=("$name=$dir")
  # KEEP=1 on a warm machine: reuse a tree (and its build) made from the same patches.
  if [[ ${KEEP:-0} == 1 && -f $dir/.patches && $(cat "$dir/.patches") == "${v#*=}" ]]; then
    echo "$name: kept from an earlier call"
    continue
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  tar -C "$root" --exclude='./build*' --exclude='./third_party_peer' -cf - . | tar -C "$dir" -xf -
  IFS=, read -ra patches <<< "${v#*=}"
  for p in "${patches[@]}"; do
    (cd "$dir" && git apply "$root/$p") || { echo "$name: $p does not apply"; exit 1; }
  done
  echo "${v#*=}" > "$dir/.patches"
done

# PROBE=1: the diagnostic build (-DHYLA_DECODE_PROBE, see decode_probe.sh) in build-probe/, its
# timeline lines printed with the table rows.
bdir=build-gpu probe_flags=() keep='^\| (GDN|KDA)'
if [[ ${PROBE:-0} == 1 ]]; then
  bdir=build-probe probe_flags=(-DCMAKE_CUDA_FLAGS=-DHYLA_DECODE_PROBE) keep='^\| (GDN|KDA)|barrier|^probe'
fi
build() {  # tree name, dir, targets...
  local name=$1 dir=$2
  shift 2
  cmake -S "$dir" -B "$dir/$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a ${probe_flags[@]+"${probe_flags[@]}"} > "$WORK/$name.configure.log" 2>&1 &&
    cmake --build "$dir/$bdir" -j 16 --target "$@" > "$WORK/$name.build.log" 2>&1
}
# All trees at once: a tree's build is bound by its one or two largest CUDA units, so side by side
# they take about as long as one.
start=$SECONDS
pids=()
for t in "${trees[@]}"; do
  name=${t%%=*} dir=${t#*=}
  targets=(hyla_bench_gated_delta_rule_decode)
  [[ $tests == 1 ]] && targets+=(hyla_gpu_tests)
  build "$name" "$dir" "${targets[@]}" &
  pids+=($!)
done
failed=0
for i in "${!trees[@]}"; do
  name=${trees[$i]%%=*}
  if wait "${pids[$i]}"; then
    echo "$name: built ($((SECONDS - start)) s)"
  else
    echo "$name: build failed"
    grep -E "error" -A5 "$WORK/$name.build.log" | head -40
    failed=1
  fi
done
[[ $failed == 0 ]] || exit 1
if [[ $tests == 1 ]]; then
  for t in "${trees[@]}"; do
    name=${t%%=*} dir=${t#*=}
    echo "== $name: GPU tests"
    (cd "$dir/$bdir" && ctest -L gpu --output-on-failure -j 4 > "$OUT/tests_$name.log" 2>&1)
    grep -E "tests passed|Failed|FAILED" "$OUT/tests_$name.log" | head -20
  done
fi
for g in "${groups[@]}"; do
  echo "== bench $g"
  for t in "${trees[@]}"; do
    name=${t%%=*} dir=${t#*=}
    # shellcheck disable=SC2086  # the group is a list of arguments
    "$dir/$bdir/bin/hyla_bench_gated_delta_rule_decode" $g /tmp/compare.jsonl |
      grep -E "$keep" | sed "s/^/$name /"
  done
done
