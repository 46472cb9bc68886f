#!/usr/bin/env bash
# Runs on the H200 device machine: the decode step's timeline at B = 1. Builds the benchmark with
# -DHYLA_DECODE_PROBE (thread 0 of every block records %globaltimer at the points of
# decode_step_kernel: start, slot id back, griddepcontrol.wait done, conv + gates done, block
# barrier, row update, end; point 5, after the l2 norms, went with them into the rows) and prints,
# per ring step, ns from the step's first block start to each point (min / median / max over
# blocks) and the gap to the previous step, then the median end of the blocks that shared their
# SM with another block of the step against those alone on theirs (%smid, stored as point 5), and
# a "barrier" line: lane 0 of every warp records its arrival at the block barrier; per warp the
# median lag after the block's first warp and how often it came last, and the first -> last spread.
#   bash tools/gpu/decode_probe.sh [bench arguments...]   (default: --batch 1; add --overlap,
#   --rows R, --only gdn|kda)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
mkdir -p "$OUT"
cmake -S . -B build-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DHYLA_DECODE_PROBE > /dev/null 2>&1 &&
  cmake --build build-probe -j 16 --target hyla_bench_gated_delta_rule_decode > "$OUT/probe_build.log" 2>&1 ||
  { grep -E "error" -A5 "$OUT/probe_build.log" | head -40; exit 1; }
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(--batch 1)
./build-probe/bin/hyla_bench_gated_delta_rule_decode "${args[@]}" | tee "$OUT/probe.txt"
