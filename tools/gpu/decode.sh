#!/usr/bin/env bash
# Runs on the H200 device machine (see .library/device): build with CUDA, run the GPU tests, then
# the decode benchmark and fla's decode benchmark side by side. Results go under $OUT.
#   bash tools/gpu/decode.sh [tests|bench|sweep|overlap|sweep-overlap|fla|all]...
#   (default: all but sweep, overlap, sweep-overlap)
# sweep: the benchmark again with every tiling of the CUDA body timed (--sweep) and a plain
# in-place copy of the same state bytes (--floor: what this harness can reach at best).
# overlap: the benchmark with every step launched with overlap_previous (--overlap).
# sweep-overlap: every tiling timed with overlap_previous (--sweep --overlap).
# fla's python package must be in third_party_peer/fla (carried, never committed), with
# bench_fla.py beside it (a copy of ../shared/tools/bench_fla.py).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
mkdir -p "$OUT"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(all)
want() { [[ " ${steps[*]} " == *" all "* || " ${steps[*]} " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j 16 --target hyla_bench_gated_delta_rule_decode > "$OUT/build.log" 2>&1 ||
  { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "build: $((SECONDS - start)) s"
if want tests; then
  if cmake --build build-gpu -j 16 --target hyla_gpu_tests > "$OUT/build_tests.log" 2>&1; then
    (cd build-gpu && ctest -L gpu --output-on-failure -j 4 > "$OUT/gpu_tests.log" 2>&1)
    grep -E "tests passed|Failed|FAILED|Skipped" "$OUT/gpu_tests.log" | head -20
  else
    grep -E "error" -A5 "$OUT/build_tests.log" | head -40
  fi
fi
if want bench; then
  ./build-gpu/bin/hyla_bench_gated_delta_rule_decode "$OUT/hyla_decode.jsonl" | tee "$OUT/hyla_decode.txt"
fi
if [[ " ${steps[*]} " == *" sweep "* ]]; then
  ./build-gpu/bin/hyla_bench_gated_delta_rule_decode --sweep --floor "$OUT/hyla_decode_sweep.jsonl" |
    tee "$OUT/hyla_decode_sweep.txt"
fi
if [[ " ${steps[*]} " == *" overlap "* ]]; then
  ./build-gpu/bin/hyla_bench_gated_delta_rule_decode --overlap "$OUT/hyla_decode_overlap.jsonl" |
    tee "$OUT/hyla_decode_overlap.txt"
fi
if [[ " ${steps[*]} " == *" sweep-overlap "* ]]; then
  ./build-gpu/bin/hyla_bench_gated_delta_rule_decode --sweep --overlap \
    "$OUT/hyla_decode_sweep_overlap.jsonl" | tee "$OUT/hyla_decode_sweep_overlap.txt"
fi
if want fla; then
  PYTHONUNBUFFERED=1 PYTHONPATH=third_party_peer timeout 420 python3 third_party_peer/bench_fla.py \
    --only gdn_decode,kda_decode --decode-layouts vk --out "$OUT/fla.json" > "$OUT/fla.log" 2>&1
  echo "fla rc=$?"; grep -iE "decode|graph|GB/s|error" "$OUT/fla.log" | tail -40
fi
