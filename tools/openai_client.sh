#!/usr/bin/env bash
# Fetches the official `openai` npm client (pinned) into DIR for the end-to-end test of `hyla serve`
# (tests/serve/openai_client_test.mjs, CTest case serve_openai_client):
#   bash tools/openai_client.sh DIR && cmake -DHYLA_OPENAI_CLIENT=DIR ...
# npm installs the package into DIR/npm. When npm cannot fetch it (no network), DIR/unavailable says
# why and the script exits 0: the test then skips with that message. Idempotent: DIR/complete
# records the package; while it is unchanged a second run does nothing (no network).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: tools/openai_client.sh DIR" >&2
  exit 2
fi
dir="$1"
mkdir -p "$dir/npm"
dir="$(cd "$dir" && pwd)"

# Pinned: the client must not move under the test. 6.x needs only the runtime's fetch and streams
# (no dependencies); it runs on Debian 12's Node.js 18 as on 20.
package=openai@6.49.0
if [[ -f "$dir/complete" && "$(cat "$dir/complete")" == "$package" ]]; then
  echo "openai_client.sh: $dir is up to date"
  exit 0
fi
rm -f "$dir/complete" "$dir/unavailable"
for tool in npm node; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found (Debian packages nodejs, npm: tools/install_deps.sh)" >"$dir/unavailable"
    echo "openai_client.sh: $(cat "$dir/unavailable")" >&2
    exit 0
  fi
done
if ! npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$dir/npm" \
  "$package" >"$dir/npm.log" 2>&1; then
  echo "npm could not install $package (offline? see $dir/npm.log)" >"$dir/unavailable"
  echo "openai_client.sh: $(cat "$dir/unavailable")" >&2
  exit 0
fi
echo "$package" >"$dir/complete"
echo "openai_client.sh: installed $package into $dir/npm"
