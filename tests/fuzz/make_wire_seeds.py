#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/fuzz_wire.cpp into a folder (default
tests/fuzz/corpus_wire): a selector byte (0 ExecuteRequest, 1 LoadModelRequest, 2 UploadHeader)
then the message, encoded from text format by `protoc --encode`.

The committed corpus is these seeds plus what ~33 minutes of fuzzing found, minimized by edge
coverage (`fuzz_wire -merge=1 -use_counters=0 NEW tests/fuzz/corpus_wire FOUND...`).

    python3 tests/fuzz/make_wire_seeds.py [out_dir]
"""
import hashlib
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO = os.path.join(ROOT, "proto")


def f32(*vals):
    return "".join("\\x%02x" % b for b in struct.pack("<%df" % len(vals), *vals))


def i64(*vals):
    return "".join("\\x%02x" % b for b in struct.pack("<%dq" % len(vals), *vals))


def vi(name, dtype, shape):
    dims = " ".join("shape: %d" % d for d in shape)
    return 'inputs { name: "%s" type { dtype: %d %s } }' % (name, dtype, dims)


def vo(name, dtype=0, shape=()):
    dims = " ".join("shape: %d" % d for d in shape)
    return 'outputs { name: "%s" type { dtype: %d %s } }' % (name, dtype, dims)


def node(op, ins, outs, attrs=""):
    i = " ".join('inputs: "%s"' % x for x in ins)
    o = " ".join('outputs: "%s"' % x for x in outs)
    return 'nodes { op: "%s" %s %s %s }' % (op, i, o, attrs)


def init(name, dtype, shape, data):
    dims = " ".join("shape: %d" % d for d in shape)
    return 'initializers { key: "%s" value { dtype: %d %s data: "%s" } }' % (name, dtype, dims, data)


def attr_i(k, v):
    return 'attrs { key: "%s" value { i: %d } }' % (k, v)


def attr_ints(k, vs):
    return 'attrs { key: "%s" value { ints { %s } } }' % (k, " ".join("values: %d" % v for v in vs))


def attr_f(k, v):
    return 'attrs { key: "%s" value { f: %g } }' % (k, v)


GRAPHS = {
    "add": [vi("x", 1, [4]), vi("y", 1, [4]), node("Add", ["x", "y"], ["z"]), vo("z")],
    "matmul_chain": [vi("a", 1, [2, 3]), vi("b", 1, [3, 2]), node("MatMul", ["a", "b"], ["c"]),
                     node("Relu", ["c"], ["d"]), node("MatMul", ["d", "d"], ["e"]), vo("e")],
    "abs_symbolic": [vi("x", 1, [-1, 8]), node("Abs", ["x"], ["y"]), vo("y")],
    "two_inputs_names": [vi("x=float32[4];y", 1, [4]), node("Neg", ["x=float32[4];y"], ["o"]), vo("o")],
    "reshape_init": [vi("x", 1, [2, 6]), init("s", 7, [2], i64(3, 4)),
                     node("Reshape", ["x", "s"], ["y"]), node("Transpose", ["y"], ["z"], attr_ints("perm", [1, 0])),
                     vo("z")],
    "gemm": [vi("x", 1, [2, 4]), init("w", 1, [4, 3], f32(*[0.5] * 12)), init("b", 1, [3], f32(1, 2, 3)),
             node("Gemm", ["x", "w", "b"], ["y"], attr_f("alpha", 1.0) + " " + attr_i("transB", 0)),
             node("Softmax", ["y"], ["z"], attr_i("axis", -1)), vo("z")],
    "conv": [vi("x", 1, [1, 1, 5, 5]), init("w", 1, [2, 1, 3, 3], f32(*[0.1] * 18)),
             node("Conv", ["x", "w"], ["y"], attr_ints("pads", [1, 1, 1, 1])),
             node("MaxPool", ["y"], ["z"], attr_ints("kernel_shape", [2, 2]) + " " + attr_ints("strides", [2, 2])),
             vo("z")],
    "reduce_cast": [vi("x", 6, [3, 4]), node("Cast", ["x"], ["f"], attr_i("to", 1)),
                    node("ReduceSum", ["f"], ["s"], attr_i("keepdims", 0)), vo("s")],
    "shape_gather": [vi("x", 1, [2, 3, 4]), node("Shape", ["x"], ["s"]), init("i", 7, [], i64(1)),
                     node("Gather", ["s", "i"], ["g"]), node("Unsqueeze", ["g", "ax"], ["u"]),
                     init("ax", 7, [1], i64(0)), node("ConstantOfShape", ["u"], ["c"]), vo("c")],
    "concat_slice": [vi("a", 1, [2, 2]), vi("b", 1, [2, 2]), node("Concat", ["a", "b"], ["c"], attr_i("axis", 0)),
                     init("st", 7, [1], i64(1)), init("en", 7, [1], i64(3)),
                     node("Slice", ["c", "st", "en"], ["d"]), vo("d")],
    "where_cmp": [vi("x", 1, [4]), vi("y", 1, [4]), node("Greater", ["x", "y"], ["m"]),
                  node("Where", ["m", "x", "y"], ["z"]), vo("z")],
    "int_div": [vi("x", 6, [4]), vi("y", 6, [4]), node("Div", ["x", "y"], ["z"]), vo("z")],
    "if_branch": [vi("c", 9, []), vi("x", 1, [2]),
                  node("If", ["c"], ["y"],
                       'attrs { key: "then_branch" value { graph { %s %s } } } '
                       'attrs { key: "else_branch" value { graph { %s %s } } }' % (
                           node("Neg", ["x"], ["t"]), vo("t"), node("Abs", ["x"], ["e"]), vo("e"))),
                  vo("y")],
    "cycle": [vi("x", 1, [2]), node("Add", ["x", "b"], ["a"]), node("Neg", ["a"], ["b"]), vo("b")],
    "dangling": [vi("x", 1, [2]), node("Add", ["x", "nope"], ["a"]), vo("a")],
    "range": [init("s", 7, [], i64(0)), init("l", 7, [], i64(10)), init("d", 7, [], i64(3)),
              node("Range", ["s", "l", "d"], ["r"]), vo("r")],
    "layernorm": [vi("x", 1, [2, 4]), init("g", 1, [4], f32(1, 1, 1, 1)), init("b", 1, [4], f32(0, 0, 0, 0)),
                  node("LayerNormalization", ["x", "g", "b"], ["y"]), vo("y")],
    "expand_tile": [vi("x", 1, [1, 3]), init("s", 7, [2], i64(2, 3)), node("Expand", ["x", "s"], ["e"]),
                    init("r", 7, [2], i64(2, 1)), node("Tile", ["e", "r"], ["t"]), vo("t")],
}


def encode(msg_type, text):
    return subprocess.run(["protoc", "-I", PROTO, "--encode=tensord.v1." + msg_type, "tensord.proto"],
                          input=text.encode(), capture_output=True, check=True).stdout


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fuzz", "corpus_wire")
    os.makedirs(out, exist_ok=True)
    seeds = []
    for name, parts in GRAPHS.items():
        g = "graph { name: \"%s\" %s }" % (name, " ".join(parts))
        seeds.append(b"\x00" + encode("ExecuteRequest", g + ' device: "cpu:0" inline_max_bytes: 1024'))
        seeds.append(b"\x01" + encode("LoadModelRequest", g))
    for dtype, shape in [(1, [2, 3]), (7, [4]), (9, []), (10, [3, 0]), (2, [1 << 20]), (16, [5])]:
        import math
        size = {1: 4, 7: 8, 9: 1, 10: 2, 2: 1, 16: 2}[dtype] * math.prod(shape)
        dims = " ".join("shape: %d" % d for d in shape)
        seeds.append(b"\x02" + encode("UploadHeader", "dtype: %d %s total_bytes: %d" % (dtype, dims, size)))
    seeds.append(b"\x02" + encode("UploadHeader", 'dtype: 1 shape: 2 total_bytes: 8 device: "gpu:9"'))
    for s in seeds:
        with open(os.path.join(out, "seed-" + hashlib.sha1(s).hexdigest()[:16]), "wb") as f:
            f.write(s)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
