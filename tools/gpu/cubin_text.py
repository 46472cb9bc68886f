#!/usr/bin/env python3
"""Compares the machine code of the kernels in two sets of cubins, byte for byte.

For refactors of CUDA code made without a GPU: if every kernel's code section is identical, the
change cannot have changed what runs (relocations aside). Kernel names are compared without the
anonymous-namespace token, which differs between translation units.

  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I src -cubin X.cu -o old.cubin
  (change, rebuild the new cubins the same way)
  python3 tools/gpu/cubin_text.py [--all] [--rename OLD=NEW ...] old.cubin[,old2.cubin] new.cubin[,new2.cubin]

Names the first 10 kernels of each kind (different, only old, only new); --all names every one.
--rename OLD=NEW: an identifier renamed on purpose (a kernel, its argument struct): the old
kernels' names are read with it replaced, so a renamed kernel is compared with its new self.
"""
import re
import struct
import sys


def kernel_code(path):
    """{kernel name without the anonymous namespace: bytes of its .text section}"""
    data = open(path, 'rb').read()
    if data[:4] != b'\x7fELF' or data[4] != 2:
        sys.exit(f'{path}: not a 64-bit ELF cubin')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    headers = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize) for i in range(shnum)]
    strings = headers[shstrndx][4]
    code = {}
    for name_off, _, _, _, offset, size, *_ in headers:
        end = data.index(b'\0', strings + name_off)
        name = data[strings + name_off:end].decode()
        if name.startswith('.text.'):
            code[strip_anonymous(name[6:])] = data[offset:offset + size]
    return code


def strip_anonymous(mangled):
    """The name without its anonymous-namespace component (<length>_GLOBAL__N__...)."""
    while True:
        m = re.search(r'(\d+)_GLOBAL__N__', mangled)
        if not m:
            return mangled
        length = int(m.group(1))
        start = m.start(1) + len(m.group(1))
        mangled = mangled[:m.start(1)] + 'ANON' + mangled[start + length:]


def load(paths, renames=()):
    code = {}
    for path in paths.split(','):
        code.update(kernel_code(path))
    for old, new in renames:  # mangled identifiers carry their length: 6swiglu
        pattern = re.compile(r'(?<!\d)%d%s' % (len(old), re.escape(old)))
        code = {pattern.sub('%d%s' % (len(new), new), k): v for k, v in code.items()}
    return code


def main():
    args = sys.argv[1:]
    show_all = '--all' in args
    args = [a for a in args if a != '--all']
    renames = []
    while '--rename' in args:
        i = args.index('--rename')
        if i + 1 >= len(args) or '=' not in args[i + 1]:
            sys.exit(__doc__)
        renames.append(tuple(args[i + 1].split('=', 1)))
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    old, new = load(args[0], renames), load(args[1])
    differ = [k for k in old if k in new and old[k] != new[k]]
    missing = [k for k in old if k not in new]
    extra = [k for k in new if k not in old]
    same = len(old) - len(differ) - len(missing)
    print(f'kernels: old {len(old)}, new {len(new)}; identical {same}, different {len(differ)}, '
          f'only old {len(missing)}, only new {len(extra)}')
    for label, names in (('different', differ), ('only old', missing), ('only new', extra)):
        for name in names if show_all else names[:10]:
            print(f'  {label}: {name}')
    sys.exit(0 if not differ and not missing and not extra else 1)


if __name__ == '__main__':
    main()
