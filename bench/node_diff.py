"""Where two devices part: every float32 intermediate of an ONNX model on two devices, in graph
order, and (for a bench/model_set.py model) both against a float64 run of the same PyTorch
module, to tell a kernel bug from float32 rounding.

usage: /usr/bin/python3 bench/node_diff.py DIR [--a cpu:0] [--b opencl:0] [--outputs-only]
           [--ops Conv,Add] [--truth NAME] [--tensord build/tensord]

DIR is a folder of the ONNX test layout with input.npy and expected.npy (what
`bench/model_set.py export` writes). Every float32 node output is made a graph output (so
fusion across it stops: this locates a bad kernel, it does not time anything), the model runs
through `tensord run` on both devices, and each output prints its max |a - b|, that over the
largest |a| ("max/scale": float32 rounding stays near 1e-6, a wrong kernel is far above) and
how many elements fail `tensord bench`'s check (|a - b| <= 1e-6 + 5e-4 |a|). --truth NAME runs
model_set's module NAME in float64 on the same input and prints each result's (PyTorch's
float32 one included) distance to it: when PyTorch's own float32 output fails the check
against float64, no float32 implementation can be expected to pass it against PyTorch's.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def check_fails(ref, got):
    return int((np.abs(got - ref) > 1e-6 + 5e-4 * np.abs(ref)).sum())


def run(tensord, model, inp, device, out):
    r = subprocess.run([tensord, "run", model, inp, "--device", device, "-o", out],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"tensord run on {device} failed:\n{r.stderr[-3000:]}")
    files = {}
    for line in r.stdout.splitlines():
        if " -> " in line:
            files[line.split(": ", 1)[0]] = line.rsplit(" -> ", 1)[1]
    return files


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--a", default="cpu:0")
    p.add_argument("--b", default="opencl:0")
    p.add_argument("--ops", default="", help="only the outputs of these ops (comma list)")
    p.add_argument("--outputs-only", action="store_true", help="compare the model's outputs only")
    p.add_argument("--truth", default="", help="bench/model_set.py model name: compare with float64")
    p.add_argument("--tensord", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                     "tensord"))
    a = p.parse_args(argv)
    import onnx
    from onnx import TensorProto, helper, shape_inference

    m = shape_inference.infer_shapes(onnx.load(os.path.join(a.dir, "model.onnx")))
    types = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.value_info) + list(m.graph.output)}
    order = []
    have = {o.name for o in m.graph.output}
    ops = set(a.ops.split(",")) if a.ops else None
    for n in ([] if a.outputs_only else m.graph.node):
        if ops and n.op_type not in ops:
            continue
        for o in n.output:
            if o and o not in have and types.get(o) == TensorProto.FLOAT:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
                have.add(o)
                order.append((o, n.op_type))
    first_output = m.graph.output[0].name
    order.append((first_output, "output"))
    work = tempfile.mkdtemp(prefix="node_diff-")
    model = os.path.join(work, "model.onnx")
    onnx.save(m, model)
    inp = os.path.join(a.dir, "input.npy")
    fa = run(a.tensord, model, inp, a.a, os.path.join(work, "a"))
    fb = run(a.tensord, model, inp, a.b, os.path.join(work, "b"))
    print(f"{'op':<22}{'max_abs':>10}{'max/scale':>11}{'fails':>9} / n  name   ({a.a} vs {a.b})")
    for o, op in order:
        x = np.load(fa[o]).astype(np.float64)
        y = np.load(fb[o]).astype(np.float64)
        if x.shape != y.shape:
            print(f"{op:<22} shapes differ: {x.shape} vs {y.shape}  {o}")
            continue
        d = np.abs(x - y)
        rel = d.max() / (np.abs(x).max() + 1e-30) if d.size else 0.0
        flag = "  <<<" if rel > 1e-4 else ""
        print(f"{op:<22}{d.max() if d.size else 0:10.2e}{rel:11.2e}{check_fails(x, y):9d} / {x.size}  {o}{flag}")
    outs = {a.a: np.load(fa[first_output]), a.b: np.load(fb[first_output])}
    exp = os.path.join(a.dir, "expected.npy")
    if os.path.exists(exp):
        e = np.load(exp).astype(np.float64)
        for dev, v in outs.items():
            print(f"{dev} vs PyTorch float32: max_abs {np.abs(v - e).max():.2e}, "
                  f"fails {check_fails(e, v.astype(np.float64))}/{e.size}")
    if a.truth:
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import model_set
        x = np.load(inp)
        with torch.no_grad():
            t = torch.from_numpy(x)
            tr = model_set.build(torch, a.truth).double()(t.double() if t.is_floating_point() else t)
        tr = tr.numpy()
        results = dict(outs)
        if os.path.exists(exp):
            results["PyTorch float32"] = np.load(exp)
        for dev, v in results.items():
            d = np.abs(v.astype(np.float64) - tr)
            print(f"{dev} vs float64: max_abs {d.max():.2e} (largest |output| {np.abs(tr).max():.2e}), "
                  f"fails {check_fails(tr, v.astype(np.float64))}/{tr.size}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
