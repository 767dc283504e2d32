#!/usr/bin/python3
"""Writes a models folder for the dynamic batching tests (tests/rpc/test_batching.cpp), as
`tensord serve --models DIR` reads it:

  mlp_plain/            Y = Relu(X @ W1) @ W2, X float32[N, 16]; no config (runs alone)
  mlp_batched/          the same, max_batch_size 8, max_queue_delay_microseconds 1 s
  conv_plain/           Conv 3->4 3x3 pad 1, Relu, GlobalAveragePool, Flatten: X [N, 3, 8, 8]
  conv_batched/         the same, batched as mlp_batched
  gather_batched/       Y = GatherElements(X, I, axis 1), X float32[N, 4], I int64[N, 1]: an
                        index out of range fails at run time (a bad request in a good batch)
  multi_batched/        the mlp on ["cpu:0", "cpu:1"], 2 instances each, max 12, preferred 2 and 4
                        (12 x 2 devices > 16 forms: batches padded to 1, 2, 4, 8 or 12 rows)
  slow_batched/         the mlp, batched with a 3 s delay (a request cancelled while queued)
  vm/1/, vm/2/          Y = X + 1 and Y = X + 2 (version folders; vm/config.json batches)
  typo/                 config.json with "max_batch_sise" (refused, naming max_batch_size)
  typo_nested/          "dynamic_batching": {"max_queue_delay_us": ...} (refused)
  badshape/             config.json declares X dims [-1, 17] (the model has [N, 16])

Usage: /usr/bin/python3 make_batch_models.py OUTDIR   (python3-onnx, python3-numpy)
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCHED = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 1000000}}


def save(model, out, name, config=None, sub=None):
    folder = os.path.join(out, name, sub) if sub else os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))
    if config is not None:
        with open(os.path.join(out, name, "config.json"), "w") as f:
            json.dump(config, f)


def make(nodes, name, inputs, outputs, inits):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mlp():
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((32, 4)) * 0.3).astype(np.float32)
    return make([helper.make_node("MatMul", ["X", "W1"], ["H0"]),
                 helper.make_node("Relu", ["H0"], ["H"]),
                 helper.make_node("MatMul", ["H", "W2"], ["Y"])], "mlp",
                [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 16])],
                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
                [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])


def conv():
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((4,)) * 0.1).astype(np.float32)
    return make([helper.make_node("Conv", ["X", "W", "B"], ["C"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["C"], ["R"]),
                 helper.make_node("GlobalAveragePool", ["R"], ["P"]),
                 helper.make_node("Flatten", ["P"], ["Y"])], "conv",
                [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3, 8, 8])],
                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
                [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])


def gather():
    return make([helper.make_node("GatherElements", ["X", "I"], ["Y"], axis=1)], "gather",
                [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
                 helper.make_tensor_value_info("I", TensorProto.INT64, ["N", 1])],
                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])], [])


def add(k):
    return make([helper.make_node("Add", ["X", "K"], ["Y"])], "add",
                [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
                [numpy_helper.from_array(np.array([k], np.float32), "K")])


def main():
    out = sys.argv[1]
    save(mlp(), out, "mlp_plain")
    save(mlp(), out, "mlp_batched", BATCHED)
    save(conv(), out, "conv_plain")
    save(conv(), out, "conv_batched", BATCHED)
    save(gather(), out, "gather_batched", BATCHED)
    save(mlp(), out, "multi_batched",
         {"device": ["cpu:0", "cpu:1"], "instances": 2, "max_batch_size": 12,
          "dynamic_batching": {"max_queue_delay_microseconds": 100000,
                               "preferred_batch_sizes": [2, 4]}})
    save(mlp(), out, "slow_batched",
         {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 3000000}})
    save(add(1), out, "vm", None, "1")
    save(add(2), out, "vm", {"max_batch_size": 4, "dynamic_batching": {}}, "2")
    save(mlp(), out, "typo", {"max_batch_sise": 4})
    save(mlp(), out, "typo_nested",
         {"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_us": 10}})
    save(mlp(), out, "badshape", {"inputs": [{"name": "X", "dims": [-1, 17]}]})


if __name__ == "__main__":
    main()
