#!/usr/bin/env bash
# Runs on the H200 device machine (see .library/device): build with CUDA, run the GPU tests, then
# the decode benchmark and fla's decode benchmark side by side.
#   bash tools/gpu/decode.sh [tests|bench|sweep|overlap|sweep-overlap|large|fla|all|none]...
#   (default: all = tests bench fla; none = build only)
# sweep: the benchmark again with every tiling of the CUDA body timed (--sweep) and the copy floors
# (--floor: what this harness can reach at best, by block shape).
# overlap: the benchmark with every step launched with overlap_previous (--overlap).
# sweep-overlap: every tiling timed with overlap_previous (--sweep --overlap).
# large: every tiling and floor at B = 64, 256, 1024 only (the large-batch rows of sweep, faster).
# fla's python package must be in third_party_peer/fla (carried, never committed), with
# bench_fla.py beside it (a copy of ../shared/tools/bench_fla.py).
#
# What comes back (the device returns at most 8 files from $OUT): summary.txt (everything this
# script prints: GPU, commit, build time, test summary, every benchmark table, fla's times),
# gpu_tests.log, one .jsonl per benchmark step run, fla.json; with bench and fla, the side-by-side
# table and the ANCHORS.md section 4 verdicts (tools/gpu/decode_vs_fla.py). Build and fla logs
# stay in $LOGS (their errors are printed, so they reach summary.txt).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
LOGS=${LOGS:-/tmp/hyla_logs}
mkdir -p "$OUT" "$LOGS"
exec > >(tee "$OUT/summary.txt") 2>&1
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(all)
want() { [[ " ${steps[*]} " == *" $1 "* ]] || { [[ " ${steps[*]} " == *" all "* ]] && [[ " tests bench fla " == *" $1 "* ]]; }; }
bench=./build-gpu/bin/hyla_bench_gated_delta_rule_decode
# The benchmark's table rows only (its header and the JSON go elsewhere).
rows() { grep -E '^\| (GDN|KDA)'; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
# (The device machine's copy of .git can lag behind the working tree it runs: name the commit in
# the perf entry from this machine, not from this line.)
echo "git there: $(git rev-parse --short HEAD 2>/dev/null), $(git status --short 2>/dev/null | wc -l) changed paths"
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
targets=(hyla_bench_gated_delta_rule_decode)
want tests && targets+=(hyla_gpu_tests)
cmake --build build-gpu -j 16 --target "${targets[@]}" > "$LOGS/build.log" 2>&1 ||
  { grep -E "error" -A5 "$LOGS/build.log" | head -60; exit 1; }
echo "build: $((SECONDS - start)) s"
if want tests; then
  (cd build-gpu && ctest -L gpu --output-on-failure -j 4 > "$OUT/gpu_tests.log" 2>&1)
  grep -E "tests passed|Failed|FAILED|Skipped" "$OUT/gpu_tests.log" | head -20
fi
if want bench; then
  echo "== bench"
  $bench "$OUT/hyla_decode.jsonl" | rows
fi
if want sweep; then
  echo "== sweep (every tiling, copy floors)"
  $bench --sweep --floor "$OUT/hyla_decode_sweep.jsonl" | rows
fi
if want large; then
  echo "== large (every tiling, copy floors; B = 64, 256, 1024)"
  for b in 64 256 1024; do $bench --sweep --floor --batch "$b" "$LOGS/large_$b.jsonl" | rows; done
  cat "$LOGS"/large_*.jsonl > "$OUT/hyla_decode_large.jsonl"
fi
if want overlap; then
  echo "== overlap"
  $bench --overlap "$OUT/hyla_decode_overlap.jsonl" | rows
fi
if want sweep-overlap; then
  echo "== sweep-overlap"
  $bench --sweep --overlap "$OUT/hyla_decode_sweep_overlap.jsonl" | rows
fi
if want fla; then
  echo "== fla"
  PYTHONUNBUFFERED=1 PYTHONPATH=third_party_peer timeout 420 python3 third_party_peer/bench_fla.py \
    --only gdn_decode,kda_decode --decode-layouts vk --out "$OUT/fla.json" > "$LOGS/fla.log" 2>&1
  echo "fla rc=$?"; grep -E "TIME|CHECK|error|Error" "$LOGS/fla.log" | sed -E 's/^\[ *[0-9.]+s\] //' | tail -40
fi
if want fla && want bench && [[ -s $OUT/fla.json ]]; then
  echo "== side by side (tools/gpu/decode_vs_fla.py)"
  ovl=()
  want overlap && ovl=("$OUT/hyla_decode_overlap.jsonl")
  python3 tools/gpu/decode_vs_fla.py "$OUT/hyla_decode.jsonl" ${ovl[@]+"${ovl[@]}"} "$OUT/fla.json"
fi
