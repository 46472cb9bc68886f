#!/usr/bin/env bash
# Decode tokens/s of `hyla generate` on the embedded demo model (one sequence, greedy, 16 prompt
# ids, 256 new tokens), quiet and with one busy process beside it (a spinning shell loop that
# takes a core), each with the default threads and with --threads 1. A parallel region that waits
# for a descheduled thread collapses in the busy column; the issue's bar: busy >= half of quiet.
# Prints a table and one JSON line. Median of RUNS runs (default 3).
#   bash bench/busy_core.sh [HYLA_BINARY (default build/bin/hyla)] [RUNS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hyla="${1:-build/bin/hyla}"
runs="${2:-3}"
[[ -x "$hyla" ]] || { echo "busy_core.sh: $hyla is not an executable (build first)" >&2; exit 2; }

# decode tokens/s of one run ("tokens_per_s" of --json)
rate() {
  "$hyla" generate --prompt-ids "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16" --max-new-tokens 256 \
    --temperature 0 --json "$@" 2>/dev/null |
    sed -n 's/.*"tokens_per_s":\([0-9.e+-]*\).*/\1/p'
}
median() {
  local values=()
  for ((i = 0; i < runs; ++i)); do values+=("$(rate "$@")"); done
  printf '%s\n' "${values[@]}" | sort -g | sed -n "$(((runs + 1) / 2))p"
}

busy_pid=""
trap '[[ -n "$busy_pid" ]] && kill "$busy_pid" 2>/dev/null || true' EXIT
declare -A result
for threads in default 1; do
  args=()
  [[ $threads == 1 ]] && args=(--threads 1)
  result[quiet_$threads]=$(median "${args[@]}")
  sh -c 'while :; do :; done' &
  busy_pid=$!
  result[busy_$threads]=$(median "${args[@]}")
  kill "$busy_pid"
  wait "$busy_pid" 2>/dev/null || true
  busy_pid=""
done

cores=$(nproc)
printf '%-8s %14s %14s %12s\n' threads "quiet tok/s" "busy tok/s" "busy/quiet"
for threads in default 1; do
  printf '%-8s %14.1f %14.1f %12.2f\n' "$threads" "${result[quiet_$threads]}" \
    "${result[busy_$threads]}" "$(awk "BEGIN { print ${result[busy_$threads]} / ${result[quiet_$threads]} }")"
done
printf '{"bench": "busy_core", "cores": %d, "runs": %d, "quiet": %s, "busy": %s, "quiet_1_thread": %s, "busy_1_thread": %s}\n' \
  "$cores" "$runs" "${result[quiet_default]}" "${result[busy_default]}" "${result[quiet_1]}" "${result[busy_1]}"
