#!/usr/bin/env bash
# The load test of `hyla serve` (CTest case serve_load, label `load`): the real binary on the demo
# model with a memory budget too small for every stream at once, driven by
# `hyla_serve_load --check` (bench/serve_load.cpp): each distinct request alone, then 1,000 streams
# of them at once (~10% cancelled midway) with bad input beside them and /health polled; every
# finished stream equal to its request alone, nothing left in use, preemptions > 0. Then the
# server must stop cleanly on SIGTERM.
#   load_test.sh HYLA HYLA_SERVE_LOAD MODEL_DIR WORK_DIR [hyla_serve_load args...]
# $HYLA_LOAD_STREAMS replaces the 1,000 (the sanitizer build runs fewer). Exit 77 (skipped) when
# MODEL_DIR holds no model.
set -u
hyla=$1 load=$2 model=$3 work=$4
shift 4
if [[ ! -f $model/model.safetensors ]]; then
  echo "no demo model in $model: skipped"
  exit 77
fi
mkdir -p "$work"
log=$work/serve.log
read_timeout=2
# 48 state slots but 42 KV pages of 64 tokens (--budget-mib 43 --state-ratio 7.5): each running
# request holds a page from its admission, so one that grows past 64 tokens while the pool is full
# takes the page of another (a preemption). --max-waiting holds all 1,000 streams.
"$hyla" serve --model "$model" --device cpu --port 0 --budget-mib 43 --state-ratio 7.5 \
  --max-running 48 --max-waiting 1100 --read-timeout "$read_timeout" > "$log" 2>&1 &
server=$!
stop_server() {
  if kill -0 "$server" 2> /dev/null; then
    kill -TERM "$server" 2> /dev/null
    wait "$server" 2> /dev/null
  fi
}
trap stop_server EXIT
trap 'stop_server; exit 1' INT TERM

port=
for _ in $(seq 600); do # the model loads in about a second; 60 s at most
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$log")
  [[ -n $port ]] && break
  if ! kill -0 "$server" 2> /dev/null; then
    echo "load_test.sh: hyla serve exited before listening:"
    cat "$log"
    exit 1
  fi
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "load_test.sh: hyla serve did not listen within 60 s:"
  cat "$log"
  exit 1
fi
head -1 "$log"

# Prompts of 4-32 words (5-40 tokens) and 1-48 new tokens: some requests cross a page boundary,
# and the run stays near a minute on two cores. The streams open over one second.
timeout 300 "$load" --host 127.0.0.1 --port "$port" --check --streams "${HYLA_LOAD_STREAMS:-1000}" --distinct 40 \
  --prompt-words 4:32 --max-tokens 1:48 --ramp 1 --server-read-timeout "$read_timeout" \
  --timeout 240 "$@"
rc=$?
[[ $rc -eq 124 ]] && echo "load_test.sh: hyla_serve_load ran past 300 s"

# SIGTERM: the server stops within 10 s and exits 0.
kill -TERM "$server"
for _ in $(seq 100); do
  kill -0 "$server" 2> /dev/null || break
  sleep 0.1
done
if kill -0 "$server" 2> /dev/null; then
  echo "load_test.sh: hyla serve still running 10 s after SIGTERM"
  kill -KILL "$server"
  rc=1
fi
wait "$server"
server_rc=$?
trap - EXIT
if [[ $server_rc -ne 0 ]]; then
  echo "load_test.sh: hyla serve exited $server_rc after SIGTERM; its log:"
  tail -20 "$log"
  rc=1
fi
exit $rc
