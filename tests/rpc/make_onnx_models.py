#!/usr/bin/python3
"""Writes the ONNX files of the broker's ONNX-load tests (tests/rpc/test_onnx_load.cpp) into
OUTDIR, in the ONNX backend-test layout, with expected outputs from NumPy:

  mlp/       opset 11 (attribute forms the importer rewrites: Unsqueeze/Squeeze axes):
             Y = Softmax(Squeeze(Relu(Unsqueeze(X) @ W1 + B1) @ W2 + B2)), X float32[N, 64]
             (N symbolic), W1 [64, 256] (64 KiB), W2 [256, 10]; test_data_set_0 with N = 3
  external/  the same model with its initializers in a file beside it (weights.bin)
  unsupported/  opset 17, Y = Relu(FrobnicateV2(X)): an op no importer knows

Usage: /usr/bin/python3 make_onnx_models.py OUTDIR   (Debian python3-onnx, python3-numpy)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model_and_data():
    rng = np.random.default_rng(11)
    w1 = (rng.standard_normal((64, 256)) * 0.2).astype(np.float32)
    b1 = (rng.standard_normal(256) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((256, 10)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(10) * 0.1).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    nodes = [
        helper.make_node("Unsqueeze", ["X"], ["U"], axes=[1], name="unsqueeze"),
        helper.make_node("MatMul", ["U", "W1"], ["H0"], name="matmul1"),
        helper.make_node("Add", ["H0", "B1"], ["H1"], name="add1"),
        helper.make_node("Relu", ["H1"], ["H2"], name="relu"),
        helper.make_node("MatMul", ["H2", "W2"], ["L0"], name="matmul2"),
        helper.make_node("Add", ["L0", "B2"], ["L1"], name="add2"),
        helper.make_node("Squeeze", ["L1"], ["L2"], axes=[1], name="squeeze"),
        helper.make_node("Softmax", ["L2"], ["Y"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)],
                              producer_name="make_onnx_models.py", producer_version="1")
    model.ir_version = 6
    onnx.checker.check_model(model)
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return model, x, y


def write_data(folder, x, y):
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for name, v, vname in (("input_0.pb", x, "X"), ("output_0.pb", y, "Y")):
        with open(os.path.join(data, name), "wb") as f:
            f.write(numpy_helper.from_array(v, vname).SerializeToString())


def main(out):
    model, x, y = model_and_data()
    folder = os.path.join(out, "mlp")
    os.makedirs(folder, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    write_data(folder, x, y)
    folder = os.path.join(out, "external")
    os.makedirs(folder, exist_ok=True)
    onnx.save_model(model, os.path.join(folder, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    write_data(folder, x, y)
    graph = helper.make_graph(
        [helper.make_node("FrobnicateV2", ["X"], ["F"], name="frob"),
         helper.make_node("Relu", ["F"], ["Y"], name="relu")],
        "unsupported",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = os.path.join(out, "unsupported")
    os.makedirs(folder, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))  # not checked: the op is unknown


if __name__ == "__main__":
    main(sys.argv[1])
