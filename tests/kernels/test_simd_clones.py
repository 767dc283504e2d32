#!/usr/bin/env python3
"""Every `target_clones` function's AVX2 and AVX-512 clones compute in vector registers.

GCC compiles a `target_clones("avx512f", "avx2", "default")` function once per target and
picks the clone at load time. Whether a clone is vectorised depends on the compiler, not on the
source: for milestones GCC's AVX2 clones of the LSTM/GRU cells were scalar (their AVX-512 clones
vectorised), and nobody saw it because every tuning machine had AVX-512. This test reads the
binary itself: each `[clone .avx2]` must hold packed floating-point arithmetic on %ymm registers
and each `[clone .avx512f]` on %ymm or %zmm. A clone with none is a scalar loop behind an ifunc;
vectorise it (intrinsics, or a loop GCC can vectorise) or drop the clones. And an AVX2 clone
must hold at least MIN_AVX2_SHARE of its AVX-512 sibling's packed instructions: a clone that
vectorises some loops and not others (the element-wise programs' exp, sigmoid, erf and GELU
loops stayed scalar for AVX2, "control flow in loop", until -fno-trapping-math) passes the
first check and fails this one (it had 57 against 249; 347 against 553 since).

Usage: test_simd_clones.py BINARY
"""
import re
import shutil
import subprocess
import sys

# Packed arithmetic (not moves, not scalar `ss`/`sd` forms): what a vectorised numeric loop does.
PACKED = re.compile(
    r"\bv(?:add|sub|mul|div|max|min|sqrt|rcp|rsqrt|fn?m(?:add|sub)\d{3}|blendv|and|or|xor|cmp\w*)p[sd]\b"
    r"|\bvcvt\w*p[sd]\w*\b|\bvpermp[sd]\b|\bvexp\w+|\bvscalefp[sd]\b"
)
MIN_AVX2_SHARE = 0.4
CLONE = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) [tT] (.*) \[clone \.(avx2|avx512f)\]$")


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    binary = argv[1]
    for tool in ("nm", "objdump"):
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} not found (binutils)")
            return 0
    listing = subprocess.run(["nm", "-S", "-C", binary], check=True, capture_output=True,
                             text=True).stdout
    clones = []
    for line in listing.splitlines():
        m = CLONE.match(line)
        if m:
            clones.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4)))
    if not clones:
        print(f"FAIL: no [clone .avx2] or [clone .avx512f] symbol in {binary} "
              "(stripped, or the build no longer uses target_clones: update this test)")
        return 1
    failures = []
    packed_of = {}
    for start, size, name, isa in sorted(clones):
        asm = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
             f"--stop-address={start + size}", binary],
            check=True, capture_output=True, text=True).stdout
        regs = ("%ymm",) if isa == "avx2" else ("%ymm", "%zmm")
        packed = [l for l in asm.splitlines() if PACKED.search(l) and any(r in l for r in regs)]
        status = "ok" if packed else "SCALAR"
        print(f"{status:6s} {isa:8s} {len(packed):4d} packed ops  {name}")
        packed_of[(name, isa)] = len(packed)
        if not packed:
            failures.append(f"{name} [{isa}]: no packed arithmetic")
    for (name, isa), n in sorted(packed_of.items()):
        wide = packed_of.get((name, "avx512f"))
        if isa == "avx2" and n and wide and n < MIN_AVX2_SHARE * wide:
            failures.append(f"{name} [avx2]: {n} packed ops against {wide} in its AVX-512 clone "
                            "(some of its loops are scalar for AVX2)")
    if failures:
        print(f"FAIL: {len(failures)} clone(s) not vectorised:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS: {len(clones)} clones vectorised")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
