"""Generates the ONNX node conformance tests (node/ and simple/) from the installed python3-onnx
into a folder, as ../shared/onnx-node-tests was made (see its README): ONNX's own test-case
generators and reference implementations, `python3 -m onnx.backend.test.cmd_tools generate-data`.

    generate_node_tests.py OUT

onnx 1.12's generators use NumPy aliases that NumPy 1.24 removed (np.float, np.int, ...): they
are put back before generating. Writes OUT/node, OUT/simple (and OUT/real, URLs only) and
OUT/GENERATED (onnx's version) last, so a folder with GENERATED is complete; an existing
complete folder for the same onnx version is left as it is. Exits 77 when python3-onnx is not
installed.
"""
import os
import shutil
import sys
import time


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    try:
        import numpy as np
        import onnx
        from onnx.backend.test import cmd_tools
    except ImportError as e:
        print(f"SKIP: cannot generate the ONNX node tests: python3-onnx / numpy missing ({e})")
        return 77
    stamp = os.path.join(out, "GENERATED")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().split()[:2] == ["onnx", onnx.__version__]:
                print(f"ONNX node tests already generated at {out} (onnx {onnx.__version__})")
                return 0
    for alias, real in (("float", float), ("int", int), ("bool", bool), ("object", object),
                        ("complex", complex), ("str", str)):
        if alias not in np.__dict__:
            setattr(np, alias, real)
    np.random.seed(0)  # the generators draw random inputs: the same data every time
    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.time()

    class Args:
        output = tmp
        op_type = None

    cmd_tools.generate_data(Args())
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.rename(tmp, out)
    counts = {d: len(os.listdir(os.path.join(out, d))) for d in sorted(os.listdir(out))
              if os.path.isdir(os.path.join(out, d))}
    with open(stamp, "w") as f:
        f.write(f"onnx {onnx.__version__}\n")
    print(f"generated the ONNX node tests from onnx {onnx.__version__} into {out} in "
          f"{time.time() - t0:.0f} s: " + ", ".join(f"{d}/ {n}" for d, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
