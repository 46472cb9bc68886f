#!/usr/bin/env bash
# Formats Hyla's C++/CUDA sources with clang-format and the repo's .clang-format.
#   tools/format.sh                 format every tracked (and new, not ignored) *.h *.cpp *.cu *.cuh
#   tools/format.sh --check         change nothing; list unformatted files and exit 1 if there are any
#   tools/format.sh [--check] PATH  only files under the given paths
# clang-format 14 (Debian 12) is the reference version: other versions may format differently.
set -euo pipefail

check=0
paths=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    -h | --help)
      sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "format.sh: unknown option $arg (use --check or --help)" >&2
      exit 2
      ;;
    *) paths+=("$arg") ;;
  esac
done

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

clang_format="${CLANG_FORMAT:-}"
if [[ -z "$clang_format" ]]; then
  for candidate in clang-format-14 clang-format; do
    if command -v "$candidate" >/dev/null 2>&1; then
      clang_format="$candidate"
      break
    fi
  done
fi
if [[ -z "$clang_format" ]]; then
  echo "format.sh: clang-format not found (apt-get install clang-format, or tools/install_deps.sh)" >&2
  exit 2
fi
version="$("$clang_format" --version)"
if [[ "$version" != *"version 14."* ]]; then
  echo "format.sh: warning: $version; the reference is clang-format 14, output may differ" >&2
fi

# Tracked files plus new files that git does not ignore; files deleted in the work tree are skipped.
files=()
while IFS= read -r -d '' f; do
  [[ -f "$f" ]] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- \
  "${paths[@]:-.}" | grep -zE '\.(h|cpp|cu|cuh)$' | sort -zu)

if [[ ${#files[@]} -eq 0 ]]; then
  echo "format.sh: no C++/CUDA files to format"
  exit 0
fi

if [[ $check -eq 0 ]]; then
  "$clang_format" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "format.sh: ${#bad[@]} of ${#files[@]} files are not formatted (run tools/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted"
