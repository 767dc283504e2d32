#!/usr/bin/python3
"""Writes a models folder for the named-model tests (tests/rpc/test_named_models.cpp, the Node
and Python tests), as `tensord serve --models DIR` reads it, with expected outputs from NumPy:

  mlp/model.onnx       Y = Relu(X @ W1) @ W2, X float32[N, 1024] (N symbolic),
                       W1 [1024, 4096] (16 MiB: large enough that a copy per session shows in
                       the broker's memory), W2 [4096, 4]
  mlp/x.npy, mlp/y.npy an input with N = 2 and the expected output
  add/model.onnx       Y = X + B, X float32[4], B = [1, 2, 3, 4]; config.json puts it on cpu:1
  broken/model.onnx    not an ONNX file (garbage bytes): reported unavailable, the others load
  README.txt           a stray file: not a model, skipped

Usage: /usr/bin/python3 make_named_models.py OUTDIR [--small]   (python3-onnx, python3-numpy)
  --small: W1 [1024, 256] (1 MiB), for tests that do not measure memory.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(hidden):
    rng = np.random.default_rng(17)
    w1 = (rng.standard_normal((1024, hidden)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 4)) * 0.05).astype(np.float32)
    x = rng.standard_normal((2, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W1"], ["H0"]),
         helper.make_node("Relu", ["H0"], ["H"]),
         helper.make_node("MatMul", ["H", "W2"], ["Y"])],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 1024])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_named_models.py", producer_version="1")
    model.ir_version = 8
    onnx.checker.check_model(model)
    y = (np.maximum(x.astype(np.float64) @ w1, 0) @ w2).astype(np.float32)
    return model, x, y


def add():
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "B"], ["Y"])], "add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    out = sys.argv[1]
    hidden = 256 if "--small" in sys.argv[2:] else 4096
    model, x, y = mlp(hidden)
    os.makedirs(os.path.join(out, "mlp"), exist_ok=True)
    onnx.save_model(model, os.path.join(out, "mlp", "model.onnx"))
    np.save(os.path.join(out, "mlp", "x.npy"), x)
    np.save(os.path.join(out, "mlp", "y.npy"), y)
    os.makedirs(os.path.join(out, "add"), exist_ok=True)
    onnx.save_model(add(), os.path.join(out, "add", "model.onnx"))
    with open(os.path.join(out, "add", "config.json"), "w") as f:
        json.dump({"device": "cpu:1"}, f)
    os.makedirs(os.path.join(out, "broken"), exist_ok=True)
    with open(os.path.join(out, "broken", "model.onnx"), "wb") as f:
        f.write(b"\x08\x07garbage, not a ModelProto \xff\xff\xff\xff" * 8)
    with open(os.path.join(out, "README.txt"), "w") as f:
        f.write("named models for tensord's tests\n")


if __name__ == "__main__":
    main()
