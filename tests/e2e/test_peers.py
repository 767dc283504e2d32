"""The benchmark peers (bench/peers/) run real models and give the right outputs.

usage: test_peers.py onnxruntime|torch [TENSORD]

onnxruntime: bench/peers/onnxruntime.js on a small two-input, two-output ONNX model built with
  onnx.helper: its JSON line, its .npy outputs against NumPy, the protocol's bad-input cases,
  and available:false when onnxruntime-node is not installed. Skips (77) when
  bench/node_modules has no onnxruntime-node (scripts/setup.sh installs it).
torch: bench/peers/torch.py with imdb_lstm on (a) a graph named as tensord's zoo names its
  weights (loaded by name; output checked against a NumPy LSTM) and (b) a torch.onnx.export of
  the PyTorch model (loaded by position; output checked against PyTorch eager), (c) with
  TENSORD given, the zoo's own imdb_lstm written by `tensord bench imdb_lstm --export`, the
  available:false reasons and bad input. Skips (77) without PyTorch.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
SKIP = 77
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def run(cmd, env=None, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def one_json_line(p, what):
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    check(len(lines) == 1, f"{what}: expected one stdout line, got {p.stdout!r} / {p.stderr!r}")
    return json.loads(lines[-1]) if lines else {}


def expect_usage_error(cmd, needle, what):
    p = run(cmd)
    err = p.stderr.strip().splitlines()
    check(p.returncode == 2, f"{what}: exit {p.returncode}, expected 2 ({p.stderr.strip()!r})")
    check(err and needle in err[-1], f"{what}: stderr {p.stderr.strip()!r} lacks {needle!r}")
    check(p.stdout.strip() == "", f"{what}: printed {p.stdout!r} on stdout")


def save_model(model, path):
    import onnx
    onnx.checker.check_model(model)
    onnx.save(model, path)


# ---- onnxruntime ----

def tiny_model(path):
    """z = Relu(x @ W + b) (float32 [2,3] -> [2,4]); k = ids + 1 (int64 [2,2])."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["pre"]),
         helper.make_node("Relu", ["pre"], ["z"]),
         helper.make_node("Add", ["ids", "one"], ["k"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [2, 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(1, np.int64), "one")])
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w, b


def test_onnxruntime(tmp):
    node = shutil.which("node")
    if not node:
        print("SKIP: node is not installed (scripts/setup.sh installs nodejs)")
        return SKIP
    if not os.path.isdir(os.path.join(ROOT, "bench", "node_modules", "onnxruntime-node")):
        print("SKIP: bench/node_modules has no onnxruntime-node "
              "(cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm ci)")
        return SKIP
    peer = [node, os.path.join(PEERS, "onnxruntime.js")]
    model = os.path.join(tmp, "tiny.onnx")
    w, b = tiny_model(model)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    ids = np.array([[1, -5], [1 << 40, 7]], np.int64)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "ids.npy"), ids)
    out = os.path.join(tmp, "out")
    args = ["--model", model, "--input", f"x={tmp}/x.npy", "--input", f"ids={tmp}/ids.npy",
            "--examples", "6", "--batch-size", "2", "--warmup", "2", "--threads", "1",
            "--outputs", out]
    p = run(peer + args)
    check(p.returncode == 0, f"onnxruntime peer exit {p.returncode}: {p.stderr.strip()}")
    r = one_json_line(p, "onnxruntime peer")
    check(r.get("peer") == "onnxruntime" and r.get("available") is True, f"bad header {r}")
    check(isinstance(r.get("version"), str) and r["version"][:1].isdigit(), f"version {r}")
    check(r.get("threads") == 1 and r.get("examples") == 6 and r.get("batch_size") == 2,
          f"threads/examples/batch_size {r}")
    for k in ("compile_s", "execution_s", "per_example_s"):
        check(isinstance(r.get(k), (int, float)) and r[k] > 0, f"{k} {r.get(k)}")
    if r.get("execution_s"):
        check(abs(r["per_example_s"] - r["execution_s"] / 6) < 1e-9 * max(1, r["execution_s"]),
              f"per_example_s {r['per_example_s']} != execution_s / examples")
    outs = r.get("outputs", {})
    check(sorted(outs) == ["k", "z"], f"outputs {outs}")
    if sorted(outs) == ["k", "z"]:
        z, k = np.load(outs["z"]), np.load(outs["k"])
        check(outs["z"] == os.path.join(out, "z.npy"), f"output path {outs['z']}")
        check(z.dtype == np.float32 and z.shape == (2, 4), f"z {z.dtype} {z.shape}")
        check(np.allclose(z, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6), f"z {z}")
        check(k.dtype == np.int64 and np.array_equal(k, ids + 1), f"k {k}")

    # Bad usage and input: one line, exit 2.
    expect_usage_error(peer + ["--model", os.path.join(tmp, "nope.onnx")], "cannot read model",
                       "missing model")
    with open(os.path.join(tmp, "bad.onnx"), "wb") as f:
        f.write(b"\x08\x07 this is not a model")
    expect_usage_error(peer + ["--model", os.path.join(tmp, "bad.onnx")], "cannot load model",
                       "corrupt model")
    expect_usage_error(peer + args[:6] + ["--examples", "5", "--batch-size", "2"],
                       "not divisible", "examples not divisible by batch")
    expect_usage_error(peer + ["--model", model, "--frobnicate"], "unknown argument",
                       "unknown flag")
    expect_usage_error(peer + ["--model", model, "--input", f"x={tmp}/x.npy"],
                       "no --input given for the model's input 'ids'", "missing input")
    expect_usage_error(peer + args[:6] + ["--input", f"y={tmp}/x.npy"], "no input named 'y'",
                       "unknown input name")
    expect_usage_error(peer + ["--model", model, "--input", f"x={model}", "--input",
                               f"ids={tmp}/ids.npy"], "not a readable .npy", "input not .npy")
    np.save(os.path.join(tmp, "x_wrong.npy"), np.zeros((5, 5), np.float32))
    expect_usage_error(peer + ["--model", model, "--input", f"x={tmp}/x_wrong.npy", "--input",
                               f"ids={tmp}/ids.npy"], "cannot run model", "wrong input shape")

    # Without onnxruntime-node: available:false with the reason, exit 0.
    lone = os.path.join(tmp, "lone", "bench", "peers")
    os.makedirs(lone)
    for f in ("onnxruntime.js", "npy.js"):
        shutil.copy(os.path.join(PEERS, f), lone)
    env = dict(os.environ, NODE_PATH="", HOME=tmp)
    p = run([node, os.path.join(lone, "onnxruntime.js"), "--model", model], env=env)
    r = one_json_line(p, "peer without node_modules")
    check(p.returncode == 0 and r.get("available") is False and
          ("npm ci" in r.get("reason", "") or "npm install" in r.get("reason", "")),
          f"without node_modules: exit {p.returncode}, {r}")
    return 0


# ---- torch ----

def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def numpy_imdb_lstm(tokens, emb, w, r, bias, dw, db):
    """Gather -> ONNX LSTM (gates i, o, f, c; last hidden state) -> Gemm -> Sigmoid."""
    hidden = r.shape[-1]
    x = emb[tokens]  # [N, T, E]
    h = np.zeros((tokens.shape[0], hidden), np.float64)
    c = np.zeros_like(h)
    wb, rb = bias[: 4 * hidden], bias[4 * hidden:]
    for t in range(tokens.shape[1]):
        g = x[:, t] @ w.T + h @ r.T + wb + rb
        i, o, f, cc = np.split(g, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
        h = sigmoid(o) * np.tanh(c)
    return sigmoid(h @ dw.T + db)


def zoo_style_imdb_lstm(path):
    """imdb_lstm as tensord's zoo builds it (src/models/zoo.cpp), weights named likewise."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    H, E, V = 128, 128, 20000
    ws = {
        "embedding.weight": rng.standard_normal((V, E)).astype(np.float32),
        "lstm.W": (rng.standard_normal((1, 4 * H, E)) / np.sqrt(E)).astype(np.float32),
        "lstm.R": (rng.standard_normal((1, 4 * H, H)) / np.sqrt(H)).astype(np.float32),
        "lstm.B": (0.05 * rng.standard_normal((1, 8 * H))).astype(np.float32),
        "dense.weight": (rng.standard_normal((1, H)) / np.sqrt(H)).astype(np.float32),
        "dense.bias": np.array([0.1], np.float32),
        "lstm.squeeze_axes": np.array([0], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["embedding.weight", "input"], ["emb"], axis=0),
        helper.make_node("Transpose", ["emb"], ["seq"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["seq", "lstm.W", "lstm.R", "lstm.B"], ["", "y_h"],
                         hidden_size=H),
        helper.make_node("Squeeze", ["y_h", "lstm.squeeze_axes"], ["last"]),
        helper.make_node("Gemm", ["last", "dense.weight", "dense.bias"], ["logit"], transB=1),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "imdb_lstm",
        [helper.make_tensor_value_info("input", TensorProto.INT64, ["N", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(v, k) for k, v in ws.items()])
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return ws


def tokens(batch, seed):
    rng = np.random.default_rng(seed)
    t = rng.integers(1, 20000, size=(batch, 80), dtype=np.int64)
    t[0, :30] = 0  # left padding, as Keras' pad_sequences
    return t


def check_zoo_export(tmp, peer, common, tensord):
    """(c) The zoo's imdb_lstm as `tensord bench --export` writes it: the network is recognised,
    the weights load by name, and the output is the NumPy LSTM's on the file's weights."""
    from onnx import load, numpy_helper
    try:
        helptext = run([tensord, "bench", "--help"]).stdout
    except OSError as e:
        check(False, f"cannot run {tensord}: {e}")
        return
    if "--export" not in helptext:
        print(f"note: {tensord} has no `bench --export`; the zoo-export check did not run")
        return
    model = os.path.join(tmp, "zoo_imdb_lstm.onnx")
    p = run([tensord, "bench", "imdb_lstm", "--batch-size", "2", "--export", model])
    check(p.returncode == 0, f"tensord bench --export: exit {p.returncode} {p.stderr.strip()}")
    if p.returncode != 0:
        return
    ids = tokens(2, 4)
    np.save(os.path.join(tmp, "zoo_ids.npy"), ids)
    p = run(peer + ["--model", model, "--input", f"input={tmp}/zoo_ids.npy", "--outputs",
                    os.path.join(tmp, "out_zoo")] + common)
    r = one_json_line(p, "torch peer (zoo export)")
    check(p.returncode == 0 and r.get("network") == "imdb_lstm" and r.get("weights") == "by name",
          f"zoo export: {r} {p.stderr.strip()}")
    if r.get("outputs"):
        w = {t.name: numpy_helper.to_array(t).astype(np.float64)
             for t in load(model).graph.initializer}
        ref = numpy_imdb_lstm(ids, w["embedding.weight"], w["lstm.W"][0], w["lstm.R"][0],
                              w["lstm.B"][0], w["dense.weight"], w["dense.bias"])
        y = np.load(r["outputs"]["output"])
        check(np.allclose(y, ref, rtol=1e-4, atol=1e-5),
              f"zoo export: {y.ravel()} != {ref.ravel()}")


def test_torch(tmp, tensord):
    try:
        import torch
        import torchvision  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"SKIP: PyTorch/torchvision/onnx not installed ({e})")
        return SKIP
    peer = ["/usr/bin/python3", os.path.join(PEERS, "torch.py")]
    common = ["--examples", "4", "--batch-size", "2", "--warmup", "2", "--threads", "1"]

    # (a) zoo-style names, loaded by name, checked against NumPy.
    model = os.path.join(tmp, "imdb_zoo.onnx")
    ws = zoo_style_imdb_lstm(model)
    ids = tokens(2, 3)
    np.save(os.path.join(tmp, "ids.npy"), ids)
    out = os.path.join(tmp, "out_a")
    p = run(peer + ["--model", model, "--network", "imdb_lstm", "--input",
                    f"input={tmp}/ids.npy", "--outputs", out] + common)
    check(p.returncode == 0, f"torch peer exit {p.returncode}: {p.stderr.strip()}")
    r = one_json_line(p, "torch peer (zoo names)")
    check(r.get("peer") == "torch" and r.get("available") is True, f"bad header {r}")
    check(r.get("network") == "imdb_lstm" and r.get("weights") == "by name", f"weights {r}")
    check(r.get("threads") == 1 and r.get("examples") == 4 and r.get("batch_size") == 2, f"{r}")
    for k in ("compile_s", "execution_s", "per_example_s"):
        check(isinstance(r.get(k), (int, float)) and r[k] > 0, f"{k} {r.get(k)}")
    if r.get("execution_s"):
        check(abs(r["per_example_s"] - r["execution_s"] / 4) < 1e-9 * max(1, r["execution_s"]),
              "per_example_s != execution_s / examples")
    if r.get("outputs"):
        y = np.load(r["outputs"]["output"])
        ref = numpy_imdb_lstm(ids, ws["embedding.weight"].astype(np.float64),
                              ws["lstm.W"][0].astype(np.float64),
                              ws["lstm.R"][0].astype(np.float64),
                              ws["lstm.B"][0].astype(np.float64),
                              ws["dense.weight"].astype(np.float64), ws["dense.bias"])
        check(y.shape == (2, 1) and np.allclose(y, ref, rtol=1e-4, atol=1e-5),
              f"torch peer {y.ravel()} != NumPy LSTM {ref.ravel()}")
    else:
        check(False, f"no outputs in {r}")

    # The network is recognised from the weight names when --network is not given.
    p = run(peer + ["--model", model, "--input", f"input={tmp}/ids.npy"] + common)
    r = one_json_line(p, "torch peer, network inferred")
    check(p.returncode == 0 and r.get("network") == "imdb_lstm", f"inferred network: {r}")

    # (b) torch.onnx.export of the PyTorch model: loaded by position, checked against eager.
    import importlib.util  # the peer's own ImdbLstm
    spec = importlib.util.spec_from_file_location("torch_peer", os.path.join(PEERS, "torch.py"))
    torch_peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(torch_peer)
    torch.manual_seed(0)
    m = torch_peer.build_model(torch, "imdb_lstm").eval()
    exported = os.path.join(tmp, "imdb_torch.onnx")
    t = torch.from_numpy(ids)
    with warnings.catch_warnings():  # the exporter's notes on LSTM batch sizes
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (t,), exported, opset_version=13, input_names=["input"],
                          output_names=["output"])
    with torch.no_grad():
        eager = m(t).numpy()
    out = os.path.join(tmp, "out_b")
    p = run(peer + ["--model", exported, "--network", "imdb_lstm", "--input",
                    f"input={tmp}/ids.npy", "--outputs", out] + common)
    r = one_json_line(p, "torch peer (torch export)")
    check(p.returncode == 0 and r.get("weights") == "by position", f"torch export: {r}")
    if r.get("outputs"):
        y = np.load(r["outputs"]["output"])
        check(np.allclose(y, eager, rtol=1e-5, atol=1e-6), f"{y.ravel()} != eager {eager.ravel()}")

    if tensord:
        check_zoo_export(tmp, peer, common, tensord)

    # Random weights when the file's weights do not fit: said so, no outputs.
    tiny = os.path.join(tmp, "tiny.onnx")
    tiny_model(tiny)
    other = os.path.join(tmp, "other.onnx")  # takes "input" int64 [N, 80], has no weights
    from onnx import TensorProto, helper
    save_model(helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["input"], ["output"], to=TensorProto.FLOAT)], "other",
        [helper.make_tensor_value_info("input", TensorProto.INT64, ["N", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 80])]),
        opset_imports=[helper.make_opsetid("", 13)]), other)
    p = run(peer + ["--model", other, "--network", "imdb_lstm", "--input",
                    f"input={tmp}/ids.npy", "--outputs", os.path.join(tmp, "out_c")] + common)
    r = one_json_line(p, "torch peer, random weights")
    check(p.returncode == 0 and r.get("weights") == "random" and "note" in r
          and "outputs" not in r, f"random weights: {r}")

    # available:false reasons (exit 0).
    p = run(peer + ["--model", tiny, "--input", f"x={tmp}/ids.npy"] + common)
    r = one_json_line(p, "torch peer, unknown network")
    check(p.returncode == 0 and r.get("available") is False
          and "tiny.onnx is none of them" in r.get("reason", "")
          and "--vs onnxruntime" in r.get("reason", ""), f"no --network: {r}")
    p = run(peer + ["--model", tiny, "--network", "mobilenet"] + common)
    r = one_json_line(p, "torch peer, mobilenet v1")
    check(p.returncode == 0 and r.get("available") is False
          and "no torchvision equivalent" in r.get("reason", ""), f"mobilenet: {r}")

    # Bad usage and input: one line, exit 2.
    expect_usage_error(peer + ["--model", os.path.join(tmp, "nope.onnx"), "--network",
                               "imdb_lstm"], "cannot read model", "missing model")
    with open(os.path.join(tmp, "bad.onnx"), "wb") as f:
        f.write(b"\x08\x07 this is not a model")
    expect_usage_error(peer + ["--model", os.path.join(tmp, "bad.onnx")], "cannot load model",
                       "corrupt model")
    expect_usage_error(peer + ["--model", model, "--network", "alexnet"], "unknown --network",
                       "unknown network")
    expect_usage_error(peer + ["--model", model, "--examples", "3", "--batch-size", "2"],
                       "not divisible", "examples not divisible by batch")
    np.save(os.path.join(tmp, "f.npy"), ids.astype(np.float32))
    expect_usage_error(peer + ["--model", model, "--input", f"input={tmp}/f.npy"] + common,
                       "takes int64", "wrong input dtype")
    expect_usage_error(peer + ["--model", model, "--input", f"input={model}"] + common,
                       "cannot read", "input not .npy")
    return 0


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in ("onnxruntime", "torch"):
        raise SystemExit(__doc__)
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"SKIP: python3-onnx not installed ({e})")
        sys.exit(SKIP)
    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[1] == "onnxruntime":
            rc = test_onnxruntime(tmp)
        else:
            rc = test_torch(tmp, sys.argv[2] if len(sys.argv) == 3 else "")
    if rc == SKIP:
        sys.exit(SKIP)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{sys.argv[1]} peer: all checks passed")


if __name__ == "__main__":
    main()
