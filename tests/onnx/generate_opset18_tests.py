"""Generates ONNX node tests for the operator sets 18 to 21 (ops the Debian python3-onnx 1.12
generator predates) in the ONNX backend-test layout, from the ONNX project's own test-case
generators.

tests/onnx/upstream_cases/ holds copies of onnx/backend/test/case/node/<op>.py from the ONNX
repository (Apache-2.0, unchanged) for the ops of the opsets 18-21 the importer handles (and
DFT, GridSample, Mish and the pools, whose opset 19-20 forms changed), and
onnx/reference/ops/op_resize.py, op_affine_grid.py and op_pool_common.py (the references the
cases use). Each case computes its expected outputs with NumPy code written from the operator
specification; this script runs them under python3-onnx 1.12 with a small shim (`expect` writes the folder; `Base`, the newer
`numpy_helper.create_random_int`, and the reference's OpRun are stubbed), so the outputs are the
ones the ONNX repository's own node tests hold. Models import the opset the case names, else 21
(the newest the importer accepts), as upstream imports its newest. `*_expanded` function-body
variants are not generated.

    /usr/bin/python3 tests/onnx/generate_opset18_tests.py OUT_DIR
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import types

import numpy as np

for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object),
                      ("complex", complex), ("str", str)):
    if not hasattr(np, _alias):
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "upstream_cases")
DEFAULT_OPSET = 21
# The ops whose cases are generated (file names in upstream_cases/).
CASE_FILES = [
    "reducesum", "reducemean", "reducemax", "reducemin", "reduceprod", "reducel1", "reducel2",
    "reduce_log_sum", "reduce_log_sum_exp", "reducesumsquare", "split", "pad", "resize",
    "groupnormalization", "col2im", "gelu", "bitwiseand", "bitwisenot", "bitwiseor",
    "bitwisexor", "scatternd", "scatterelements", "deformconv", "affinegrid", "center_crop_pad",
    "dft", "gridsample", "mish", "averagepool", "lppool", "maxpool",
]

OUT = None
written = []


def _value_info(name, arr):
    arr = np.asarray(arr)
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(arr.dtype) if hasattr(helper, "np_dtype_to_tensor_dtype")
        else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[arr.dtype], arr.shape)


def expect(node, inputs, outputs, name, **kwargs):
    opset_imports = kwargs.get("opset_imports") or [helper.make_opsetid("", DEFAULT_OPSET)]
    present_inputs = [n for n in node.input if n]
    present_outputs = [n for n in node.output if n]
    graph = helper.make_graph(
        [node], name,
        [_value_info(n, a) for n, a in zip(present_inputs, inputs)],
        [_value_info(n, a) for n, a in zip(present_outputs, outputs)])
    model = helper.make_model(graph, producer_name="backend-test", opset_imports=opset_imports)
    model.ir_version = 8
    folder = os.path.join(OUT, name)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for prefix, names, arrays in (("input", present_inputs, inputs),
                                  ("output", present_outputs, outputs)):
        for i, (n, a) in enumerate(zip(names, arrays)):
            t = numpy_helper.from_array(np.asarray(a), n)
            with open(os.path.join(data, f"{prefix}_{i}.pb"), "wb") as f:
                f.write(t.SerializeToString())
    written.append(name)


class Base:  # the upstream cases call their static export* methods; this stub only holds them
    pass


def create_random_int(input_shape, dtype, seed=1):
    np.random.seed(seed)
    end = min(np.iinfo(dtype).max, np.iinfo(np.int32).max)
    start = max(np.iinfo(dtype).min, np.iinfo(np.int32).min)
    return np.random.randint(start, end, size=input_shape).astype(dtype)


def install_shims():
    node_mod = types.ModuleType("onnx.backend.test.case.node")
    node_mod.expect = expect
    base_mod = types.ModuleType("onnx.backend.test.case.base")
    base_mod.Base = Base
    sys.modules["onnx.backend.test.case.node"] = node_mod
    sys.modules["onnx.backend.test.case.base"] = base_mod
    numpy_helper.create_random_int = create_random_int
    op_run = types.ModuleType("onnx.reference.op_run")

    class OpRun:
        pass

    op_run.OpRun = OpRun
    for name in ("onnx.reference", "onnx.reference.ops"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["onnx.reference.op_run"] = op_run
    for ref in ("op_resize", "op_affine_grid", "op_pool_common"):
        spec = importlib.util.spec_from_file_location(f"onnx.reference.ops.{ref}",
                                                      os.path.join(CASES, ref + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"onnx.reference.ops.{ref}"] = mod
        spec.loader.exec_module(mod)


def main():
    global OUT
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    install_shims()
    failed = []
    for f in CASE_FILES:
        spec = importlib.util.spec_from_file_location(f"upstream_{f}", os.path.join(CASES, f + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for cls in list(vars(mod).values()):
            if isinstance(cls, type) and issubclass(cls, Base) and cls is not Base:
                for attr in sorted(list(vars(cls))):
                    if attr.startswith("export"):
                        np.random.seed(0)
                        try:
                            getattr(cls, attr)()
                        except Exception as e:  # a case this onnx/numpy cannot build
                            failed.append(f"{f}.{cls.__name__}.{attr}: {type(e).__name__}: {e}")
    print(f"{len(written)} tests written to {OUT}")
    for line in failed:
        print("not generated:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
