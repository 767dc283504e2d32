"""`tensord run` as a subprocess: a small ONNX model built with onnx.helper, inputs as .npy and
TensorProto .pb files, outputs checked against NumPy; bad input gives exit status 2 and names
what was wrong."""
import os
import re
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


def run(exe, *args, env=None):
    e = dict(os.environ)
    for k in ("TENSORD_DEVICES", "TENSORD_DEVICE", "TENSORD_ADDRESS"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=e, timeout=120)


def expect_status(r, code, *needles):
    assert r.returncode == code, f"exit {r.returncode}, wanted {code}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    for n in needles:
        assert n in r.stderr, f"{n!r} not in stderr: {r.stderr!r}"


def build_model(path, w):
    # Y = Relu(X @ W + B); X has a symbolic batch dimension, W is an initializer.
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"], name="matmul"),
            helper.make_node("Add", ["XW", "B"], ["XWB"], name="add"),
            helper.make_node("Relu", ["XWB"], ["Y"], name="relu"),
        ],
        "mlp",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def save_pb(path, array, name=""):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def main(exe):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    want = np.maximum(x @ w + b, 0)

    with tempfile.TemporaryDirectory() as tmp:
        j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
        model = j("mlp.onnx")
        build_model(model, w)
        np.save(j("x.npy"), x)
        np.save(j("b.npy"), b)
        save_pb(j("x.pb"), x, "X")
        save_pb(j("b.pb"), b, "B")

        # Positional .npy inputs, outputs written as .npy.
        r = run(exe, "run", model, j("x.npy"), j("b.npy"), "--output", j("out1"))
        expect_status(r, 0)
        got = np.load(j("out1", "Y.npy"))
        assert got.dtype == np.float32 and got.shape == (2, 4), (got.dtype, got.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

        # Named TensorProto inputs, on an explicit device.
        r = run(exe, "run", model, "--input", f"B={j('b.pb')}", "--input", f"X={j('x.pb')}",
                "--output", j("out2"), "--device", "cpu:0")
        expect_status(r, 0)
        np.testing.assert_allclose(np.load(j("out2", "Y.npy")), want, rtol=1e-5, atol=1e-6)

        # Mixed: one named, the other positional; another batch size for the symbolic dim.
        x5 = rng.standard_normal((5, 3)).astype(np.float32)
        np.save(j("x5.npy"), x5)
        r = run(exe, "run", model, "--input", f"B={j('b.pb')}", j("x5.npy"), "-o", j("out3"))
        expect_status(r, 0)
        np.testing.assert_allclose(np.load(j("out3", "Y.npy")), np.maximum(x5 @ w + b, 0),
                                   rtol=1e-5, atol=1e-6)

        # Without --output: a summary per output.
        r = run(exe, "run", model, j("x.npy"), j("b.npy"))
        expect_status(r, 0)
        assert "Y: float32[2, 4]" in r.stdout and "min" in r.stdout and "mean" in r.stdout, r.stdout
        shown_max = float(re.search(r"max (\S+)", r.stdout).group(1))
        assert abs(shown_max - want.max()) <= 1e-4 * max(1.0, abs(want.max())), (want.max(), r.stdout)

        # A device without a Relu kernel (test-only option on cpu:1): the Relu runs on cpu:0
        # with a warning naming it; --strict-device makes it an error naming the op.
        lacks_relu = {"TENSORD_CPU_DEVICES": "2", "TENSORD_TEST_CPU_UNSUPPORTED_OPS": "Relu"}
        r = run(exe, "run", model, j("x.npy"), j("b.npy"), "-d", "cpu:1", "-o", j("out_fb"),
                env=lacks_relu)
        expect_status(r, 0, "run on cpu:0, not cpu:1 (Relu)")
        np.testing.assert_allclose(np.load(j("out_fb", "Y.npy")), want, rtol=1e-5, atol=1e-6)
        r = run(exe, "run", model, j("x.npy"), j("b.npy"), "-d", "cpu:1", "--strict-device",
                env=lacks_relu)
        assert r.returncode != 0, r
        assert "strict device: cpu:1 does not support 1 node(s): Relu ('relu')" in r.stderr, r.stderr

        # Missing input: named in the message.
        r = run(exe, "run", model, j("x.npy"))
        expect_status(r, 2, "missing input", "'B'")

        # Wrong shape and wrong dtype: the input and the file are named.
        np.save(j("x_bad.npy"), rng.standard_normal((2, 5)).astype(np.float32))
        r = run(exe, "run", model, j("x_bad.npy"), j("b.npy"))
        expect_status(r, 2, "'X'", "x_bad.npy", "[2, 5]")
        np.save(j("x_f64.npy"), x.astype(np.float64))
        r = run(exe, "run", model, j("x_f64.npy"), j("b.npy"))
        expect_status(r, 2, "'X'", "x_f64.npy", "float64")

        # Unreadable or garbage input files.
        r = run(exe, "run", model, j("nope.npy"), j("b.npy"))
        expect_status(r, 2, "nope.npy")
        with open(j("garbage.pb"), "wb") as f:
            f.write(b"\xff\xff\xff\xff not a tensor")
        r = run(exe, "run", model, j("garbage.pb"), j("b.npy"))
        expect_status(r, 2, "garbage.pb")

        # Unknown input name, a duplicate, too many files, a malformed --input.
        r = run(exe, "run", model, "--input", f"Z={j('x.npy')}", j("b.npy"))
        expect_status(r, 2, "'Z'")
        r = run(exe, "run", model, "--input", f"B={j('b.npy')}", "--input", f"B={j('b.pb')}",
                j("x.npy"))
        expect_status(r, 2, "'B'", "twice")
        r = run(exe, "run", model, j("x.npy"), j("b.npy"), j("b.npy"))
        expect_status(r, 2, "too many")
        r = run(exe, "run", model, "--input", "B", j("x.npy"))
        expect_status(r, 2, "name=FILE")

        # Corrupt models: truncated, and not a model at all; the file is named.
        with open(model, "rb") as f:
            data = f.read()
        with open(j("truncated.onnx"), "wb") as f:
            f.write(data[: len(data) // 2])
        r = run(exe, "run", j("truncated.onnx"), j("x.npy"), j("b.npy"))
        expect_status(r, 2, "truncated.onnx")
        with open(j("text.onnx"), "w") as f:
            f.write("this is not an ONNX model\n")
        r = run(exe, "run", j("text.onnx"), j("x.npy"), j("b.npy"))
        expect_status(r, 2, "text.onnx")
        r = run(exe, "run", j("missing.onnx"), j("x.npy"), j("b.npy"))
        expect_status(r, 2, "missing.onnx")

        # A model with an op nobody implements: refused at load, by name.
        bad = helper.make_model(
            helper.make_graph([helper.make_node("NoSuchOp", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])]),
            opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(bad, j("unsupported.onnx"))
        np.save(j("x2.npy"), np.ones(2, np.float32))
        r = run(exe, "run", j("unsupported.onnx"), j("x2.npy"))
        expect_status(r, 2, "NoSuchOp")

        # Issue 15, attack 10: external data through a symlink inside the model folder that
        # points outside it (here /etc/passwd) is refused by name; the file's bytes never
        # reach the model. A symlink that stays inside the folder is fine.
        ext_dir = j("ext")
        os.mkdir(ext_dir)
        w_ext = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
        w_ext.ClearField("raw_data")
        w_ext.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", "48")):
            e = w_ext.external_data.add()
            e.key, e.value = k, v
        g = helper.make_graph(
            [helper.make_node("MatMul", ["X", "W"], ["Y"], name="matmul")], "ext",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [w_ext])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, os.path.join(ext_dir, "model.onnx"))
        np.save(j("x13.npy"), np.ones((1, 3), np.float32))
        assert os.path.getsize("/etc/passwd") >= 48
        os.symlink("/etc/passwd", os.path.join(ext_dir, "weights.bin"))
        r = run(exe, "run", os.path.join(ext_dir, "model.onnx"), j("x13.npy"))
        expect_status(r, 2, "weights.bin", "outside the model folder")
        assert "root" not in r.stdout and "root" not in r.stderr, r.stdout + r.stderr
        os.remove(os.path.join(ext_dir, "weights.bin"))
        np.arange(12, dtype=np.float32).tofile(os.path.join(ext_dir, "real.bin"))
        os.symlink("real.bin", os.path.join(ext_dir, "weights.bin"))
        out_dir = j("ext_out")
        r = run(exe, "run", os.path.join(ext_dir, "model.onnx"), j("x13.npy"), "--output", out_dir)
        assert r.returncode == 0, r.stderr
        y = np.load(os.path.join(out_dir, "Y.npy"))
        np.testing.assert_allclose(y, np.ones((1, 3), np.float32) @ np.arange(12, dtype=np.float32).reshape(3, 4))

        # Unknown device: bad usage, the available devices are listed.
        r = run(exe, "run", model, j("x.npy"), j("b.npy"), "--device", "nosuch:7")
        expect_status(r, 2, "nosuch:7", "cpu:0")
    print("run ok")


if __name__ == "__main__":
    main(sys.argv[1])
