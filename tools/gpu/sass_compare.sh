#!/usr/bin/env bash
# Compares the machine code of every CUDA kernel of this tree with a reference tree's, file by
# file (tools/gpu/cubin_text.py: each kernel's code section, byte for byte), for changes that must
# not change what runs. Needs nvcc (this machine or the GPU machine); compiles both trees' .cu
# files in parallel, for sm_90a with the build's defines.
#   git archive REV src | tar -x -C DIR          (the reference: DIR/src)
#   RENAMES="old_kernel=new_kernel OldArgs=NewArgs" bash tools/gpu/sass_compare.sh DIR [JOBS]
# Prints one line per .cu file (identical / different, with the kernels' names) and exits 1 when
# any kernel differs, is missing or is new. RENAMES: identifiers renamed on purpose (cubin_text.py
# --rename), so a renamed kernel is compared with its new self.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ref=$(cd "${1:?usage: sass_compare.sh REFERENCE_DIR [JOBS]}" && pwd)
jobs=${2:-$(nproc)}
tmp=$(mktemp -d)
flags=(-std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -DHYLA_WITH_CUDA=1
  --expt-relaxed-constexpr)
units=$( (cd src && find . -name '*.cu'; cd "$ref/src" && find . -name '*.cu') | sort -u)
compile() {  # tree unit -> $tmp/<tree>/<unit>.cubin
  local tree=$1 unit=$2 root out
  root=$([[ $tree == new ]] && echo src || echo "$ref/src")
  [[ -f $root/$unit ]] || return 0
  out="$tmp/$tree/${unit//\//_}.cubin"
  mkdir -p "$tmp/$tree"
  nvcc "${flags[@]}" -I "$root" -cubin "$root/$unit" -o "$out" 2> "$out.log" ||
    { echo "compile failed: $tree $unit"; tail -5 "$out.log"; }
}
export -f compile
export tmp ref
export flags_string="${flags[*]}"
for unit in $units; do
  printf '%s\n%s\n' "old $unit" "new $unit"
done | xargs -P "$jobs" -L 1 bash -c 'flags=($flags_string); compile $0 $1'
status=0
for unit in $units; do
  name=${unit//\//_}
  old="$tmp/old/$name.cubin" new="$tmp/new/$name.cubin"
  if [[ ! -f $old || ! -f $new ]]; then
    echo "$unit: only in $([[ -f $old ]] && echo the reference || echo this tree)"
    status=1
    continue
  fi
  renames=()
  for r in ${RENAMES:-}; do renames+=(--rename "$r"); done
  if line=$(python3 tools/gpu/cubin_text.py --all "${renames[@]}" "$old" "$new"); then
    echo "$unit: identical (${line%%;*})"
  else
    echo "$unit:"
    echo "$line" | sed 's/^/  /'
    status=1
  fi
done
rm -rf "$tmp"
exit $status
