"""`tensord onnx-test` over models built here: grouped, depthwise and depthwise-with-multiplier
convolutions (1-D to 3-D) whose weights are graph inputs (so no compile-time check sees them
as constants), the same with weights as initializers (the oneDNN region path), and opset-6
models with legacy broadcasting (Add with broadcast=1 and axis; PRelu's per-channel slope)
behind a Conv, checked against NumPy. Convolutions the weights make impossible (a group that
does not divide the channels, weights that disagree with the group, group 0) and legacy forms
that cannot align must each fail with an error naming the problem, never crash the process.
Runs with and without oneDNN regions.

    test_graph_input_convs.py TENSORD
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # Debian package python3-onnx (scripts/setup.sh installs it)
    print("SKIP: python3-onnx is not installed (run scripts/setup.sh)")
    sys.exit(77)

RNG = np.random.default_rng(7)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_ref(x, w, b=None, group=1, strides=None, pads=None):
    """N-d grouped cross-correlation (ONNX Conv) in NumPy."""
    nd = x.ndim - 2
    strides = strides or [1] * nd
    pads = pads or [0] * (2 * nd)
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    k = w.shape[2:]
    out_sp = [(x.shape[2 + i] - k[i]) // strides[i] + 1 for i in range(nd)]
    y = np.zeros([n, m] + out_sp, np.float64)
    mg = m // group
    for g in range(group):
        xg = x[:, g * cg:(g + 1) * cg]
        for o in range(g * mg, (g + 1) * mg):
            for pos in np.ndindex(*out_sp):
                sl = tuple(slice(pos[i] * strides[i], pos[i] * strides[i] + k[i]) for i in range(nd))
                y[(slice(None), o) + pos] = np.tensordot(
                    xg[(slice(None), slice(None)) + sl], w[o], axes=nd + 1)
    if b is not None:
        y += b.reshape([1, m] + [1] * nd)
    return y.astype(np.float32)


def save(root, name, graph_nodes, inputs, outputs, opset=13, initializers=(), ir_version=7):
    """One test folder: model.onnx and test_data_set_0 with the graph inputs and outputs."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inputs]
    vo = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k, _ in outputs]
    inits = [numpy_helper.from_array(v, k) for k, v in initializers]
    g = helper.make_graph(graph_nodes, name, vi, vo, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, (k, v) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (k, v) in enumerate(outputs):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())


def conv_case(root, name, xs, ws, group, bias=False, strides=None, pads=None, opset=13,
              weights_as_initializer=False, valid=True):
    x, w = randn(*xs), randn(*ws)
    b = randn(ws[0]) if bias else None
    attrs = {"group": group}
    if strides:
        attrs["strides"] = strides
    if pads:
        attrs["pads"] = pads
    names = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node("Conv", names, ["y"], **attrs)
    y = conv_ref(x, w, b, group, strides, pads) if valid else np.zeros([1], np.float32)
    inputs = [("x", x)]
    inits = []
    if weights_as_initializer:
        inits = [("w", w)] + ([("b", b)] if bias else [])
    else:
        inputs += [("w", w)] + ([("b", b)] if bias else [])
    save(root, name, [node], inputs, [("y", y)], opset=opset, initializers=inits)


def legacy_case(root, name, slope_channels=None, bias_shape=None, axis=1, valid=True):
    """Opset 6: y = PRelu(Add(Conv(x, w), b, broadcast=1, axis), slope): the Add's and the
    PRelu's input ranks are known only through shape inference (Conv's output)."""
    x, w = randn(1, 3, 6, 6), randn(4, 3, 3, 3)
    b = randn(*(bias_shape or [4]))
    slope = (np.abs(randn(slope_channels or 4)) * 0.25).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Add", ["c", "b"], ["s"], name="bias_add", broadcast=1, axis=axis),
             helper.make_node("PRelu", ["s", "slope"], ["y"], name="prelu")]
    y = np.zeros([1], np.float32)
    if valid:
        s = conv_ref(x, w) + b.reshape([1, 4, 1, 1])
        y = np.where(s >= 0, s, s * slope.reshape([1, 4, 1, 1])).astype(np.float32)
    save(root, name, nodes, [("x", x), ("w", w), ("b", b)], [("y", y)], opset=6,
         initializers=[("slope", slope)], ir_version=3)


# name -> None (must pass) or the text its failure must contain.
def build(root):
    cases = {}

    def expect(name, refusal=None):
        cases[name] = refusal

    conv_case(root, "test_groups_input_weights", (1, 4, 7, 7), (6, 2, 3, 3), 2, bias=True)
    expect("test_groups_input_weights")
    conv_case(root, "test_depthwise_input_weights", (2, 4, 6, 6), (4, 1, 3, 3), 4, pads=[1, 1, 1, 1])
    expect("test_depthwise_input_weights")
    conv_case(root, "test_depthwise_multiplier_input_weights", (1, 4, 6, 6), (8, 1, 3, 3), 4, bias=True)
    expect("test_depthwise_multiplier_input_weights")
    conv_case(root, "test_depthwise_multiplier3_strided_input_weights", (1, 3, 9, 9), (9, 1, 3, 3), 3,
              strides=[2, 2])
    expect("test_depthwise_multiplier3_strided_input_weights")
    conv_case(root, "test_depthwise_multiplier_constant_weights", (1, 4, 6, 6), (8, 1, 3, 3), 4,
              bias=True, weights_as_initializer=True)
    expect("test_depthwise_multiplier_constant_weights")
    conv_case(root, "test_conv1d_groups_input_weights", (1, 4, 10), (4, 2, 3), 2)
    expect("test_conv1d_groups_input_weights")
    conv_case(root, "test_conv3d_groups_input_weights", (1, 4, 4, 5, 5), (8, 1, 3, 3, 3), 4, bias=True)
    expect("test_conv3d_groups_input_weights")
    conv_case(root, "test_groups_opset6_input_weights", (1, 4, 7, 7), (6, 2, 3, 3), 2, opset=6)
    expect("test_groups_opset6_input_weights")

    conv_case(root, "test_bad_group_not_dividing_channels", (1, 4, 6, 6), (6, 1, 3, 3), 3, valid=False)
    expect("test_bad_group_not_dividing_channels", "input has 4 channels, not divisible by group 3")
    conv_case(root, "test_bad_weight_channels_for_group", (1, 4, 6, 6), (4, 1, 3, 3), 2, valid=False)
    expect("test_bad_weight_channels_for_group", "input has 4 channels, weight expects 2")
    conv_case(root, "test_bad_out_channels_not_multiple_of_group", (1, 4, 6, 6), (5, 2, 3, 3), 2,
              valid=False)
    expect("test_bad_out_channels_not_multiple_of_group",
           "weight has 5 output channels, not divisible by group 2")
    conv_case(root, "test_bad_group_zero", (1, 4, 6, 6), (4, 4, 3, 3), 0, valid=False)
    expect("test_bad_group_zero", "group must be >= 1, got 0")
    conv_case(root, "test_bad_depthwise_multiplier_constant_weights", (1, 4, 6, 6), (8, 2, 3, 3), 4,
              weights_as_initializer=True, valid=False)
    expect("test_bad_depthwise_multiplier_constant_weights", "input has 4 channels, weight expects 8")

    legacy_case(root, "test_opset6_bias_axis_prelu_channels")
    expect("test_opset6_bias_axis_prelu_channels")
    legacy_case(root, "test_bad_opset6_bias_axis_misaligned", bias_shape=[4], axis=0, valid=False)
    expect("test_bad_opset6_bias_axis_misaligned",
           "opset-6 broadcasting with axis=0 cannot align B of shape [4] with A of shape [1, 4, 4, 4]: "
           "B's dim 0 (4) differs from A's dim 0 (1)")
    legacy_case(root, "test_bad_opset6_prelu_slope_channels", slope_channels=5, valid=False)
    expect("test_bad_opset6_prelu_slope_channels",
           "opset-6 PRelu applies a slope of shape [5] per channel, but X of shape [1, 4, 4, 4] has 4 channels")
    return cases


def run_suite(exe, root, env_extra):
    env = dict(os.environ)
    for k in ("TENSORD_DEVICES", "TENSORD_DEVICE", "TENSORD_ADDRESS"):
        env.pop(k, None)
    env.update(env_extra)
    r = subprocess.run([exe, "onnx-test", root, "--json"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode in (0, 1), (
        f"tensord onnx-test exited {r.returncode} with {env_extra} (a crash?)\n{r.stderr[-4000:]}")
    return {t["name"]: (t["status"], t["reason"]) for t in json.loads(r.stdout)["tests"]}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    exe = sys.argv[1]
    problems = []
    with tempfile.TemporaryDirectory(prefix="tensord_convs_") as root:
        cases = build(root)
        for env_extra in ({}, {"TENSORD_NO_ONEDNN_REGIONS": "1"}):
            results = run_suite(exe, root, env_extra)
            label = " ".join(f"{k}={v}" for k, v in env_extra.items()) or "default"
            for name, refusal in sorted(cases.items()):
                status, reason = results.get(name, ("missing", "not run"))
                if refusal is None and status != "passed":
                    problems.append(f"[{label}] {name}: {status}: {reason}")
                elif refusal is not None and (status != "failed" or refusal not in reason):
                    problems.append(f"[{label}] {name}: wanted a failure naming {refusal!r}, "
                                    f"got {status}: {reason}")
            print(f"[{label}] {sum(s == 'passed' for s, _ in results.values())} passed, "
                  f"{sum(s == 'failed' for s, _ in results.values())} failed (as expected: "
                  f"{sum(r is not None for r in cases.values())})")
    for p in problems:
        print(p)
    if problems:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
