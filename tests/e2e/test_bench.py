"""`tensord bench` end to end, as processes.

Usage: test_bench.py TENSORD_EXE CASE
  core         JSON fields and their consistency, the TensorBoard event file (own reader, both
               CRCs), --data PASS / corrupted FAIL with the exact fail_ratio, NaN FAIL, the
               exported zoo MobileNetV2 passes onnx.checker, peers reported (run or "not
               available"), bad input (one line, non-zero exit, fast)
  remote       the same benchmark through a real `tensord serve` gives the same outputs
  torchvision  torchvision's MobileNetV2 exported by torch.onnx.export (opset 13) with torch's
               output as test_data_set_0: PASS
  verdict      the oracles: --no-check, --oracle fast|reference|float64, the float64 oracle on
               a graph with catastrophic cancellation in float32 (its float32 reference run
               fails against the truth, its float64 run passes; Celu, float32 only, kept in
               float32 and named in the verdict), the slow oracles on a
               batch's first example, the criterion relative to the output's scale, onnx-test
               --rtol/--atol
Exits 77 (skip) with a reason when python3-onnx (or, for torchvision, torch) is missing.
"""
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

EXE = None


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TENSORD_") or k == "TENSORD_OPENCL"}
    e.update(extra)
    return e


def bench(*args, env=None, timeout=120):
    return subprocess.run([EXE, "bench", *map(str, args)], capture_output=True, text=True,
                          env=env or clean_env(), timeout=timeout)


def bench_json(*args, **kw):
    r = bench(*args, "--json", **kw)
    assert r.returncode in (0, 1), f"{args}: exit {r.returncode}: {r.stderr}"
    assert r.stdout.count("\n") == 1, f"{args}: not one JSON line: {r.stdout!r}"
    return r, json.loads(r.stdout)


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


# ---- a TensorBoard event file reader: TFRecord framing + Event/Summary protobuf ----

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def proto_fields(buf):
    """Yields (field number, wire type, value) of a serialized protobuf message."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        yield field, wt, v


def _varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def read_events(path):
    """[(wall_time, step, file_version, [(tag, value)])], checking both CRCs of each record."""
    data = open(path, "rb").read()
    events, i = [], 0
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert len_crc == masked_crc(header), f"length CRC mismatch at offset {i}"
        payload = data[i + 12:i + 12 + length]
        (data_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        assert data_crc == masked_crc(payload), f"data CRC mismatch at offset {i}"
        i += 16 + length
        wall, step, version, values = None, 0, "", []
        for field, wt, v in proto_fields(payload):
            if field == 1 and wt == 1:
                (wall,) = struct.unpack("<d", v)
            elif field == 2 and wt == 0:
                step = v
            elif field == 3 and wt == 2:
                version = v.decode()
            elif field == 5 and wt == 2:  # Summary
                for sf, swt, sv in proto_fields(v):
                    assert sf == 1 and swt == 2
                    tag, value = None, None
                    for vf, vwt, vv in proto_fields(sv):
                        if vf == 1:
                            tag = vv.decode()
                        elif vf == 2 and vwt == 5:
                            (value,) = struct.unpack("<f", vv)
                    values.append((tag, value))
        events.append((wall, step, version, values))
    assert i == len(data), "trailing bytes in the event file"
    return events


# ---- tiny ONNX models made with python onnx ----

def affine_model(path):
    """Y = X W + b, X float32 [N, 3] -> Y [N, 4]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 7
    b = np.array([0.5, -1, 2, 0.25], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]),
         helper.make_node("Add", ["XW", "B"], ["Y"])],
        "affine", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return lambda x: x @ w + b


def sqrt_model(path):
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Sqrt", ["X"], ["Y"])], "sqrt",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def cancellation_model(path, big=1e4):
    """Y = (X + big) - big, then a Cast to FLOAT (a no-op the float64 rewrite must turn into
    DOUBLE) and a Constant value_float: in float32 the sum rounds X to a multiple of
    ulp(big) / 2 ~ 5e-4 (catastrophic cancellation), in float64 it is exact: the truth is X."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["Zero"], value_float=0.0),
         helper.make_node("Add", ["X", "Big"], ["S"]),
         helper.make_node("Sub", ["S", "Big"], ["D"]),
         helper.make_node("Cast", ["D"], ["C"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["C", "Zero"], ["Y"])],
        "cancellation", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 64])],
        [numpy_helper.from_array(np.array(big, dtype=np.float32), "Big")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def cancellation_celu_model(path):
    """Y = Celu((X + 1e4) - 1e4): Celu has float32 only (its ONNX schema), so the float64
    oracle keeps that node in float32, between casts, and says so."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "Big"], ["S"]),
         helper.make_node("Sub", ["S", "Big"], ["D"]),
         helper.make_node("Celu", ["D"], ["Y"], name="celu", alpha=1.0)],
        "cancellation_celu", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 64])],
        [numpy_helper.from_array(np.array(1e4, dtype=np.float32), "Big")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def write_data_set(folder, inputs, outputs):
    from onnx import numpy_helper
    os.makedirs(folder, exist_ok=True)
    for kind, arrays in (("input", inputs), ("output", outputs)):
        for k, a in enumerate(arrays):
            with open(os.path.join(folder, f"{kind}_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a).SerializeToString())


# ---- cases ----

def check_json_and_events(tmp):
    logdir = os.path.join(tmp, "logs")
    r, j = bench_json("imdb_lstm", "--examples", 8, "--batch-size", 2, "--warmup", 2,
                      "--logdir", logdir)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", f"no progress bar or noise when piped: {r.stderr!r}"
    for key in ("network", "device", "batch", "examples", "compile_s", "execution_s",
                "per_example_s", "peak_device_bytes", "correctness", "peers"):
        assert key in j, f"missing {key}: {j}"
    for key in ("pass", "max_error", "max_abs_error", "fail_ratio"):
        assert key in j["correctness"], j["correctness"]
    assert j["network"] == "imdb_lstm" and j["batch"] == 2 and j["examples"] == 8, j
    assert j["device"] == "cpu:0" and j["address"] is None, j
    assert j["compile_s"] > 0 and j["execution_s"] > 0, j
    assert abs(j["per_example_s"] - j["execution_s"] / 8) <= 1e-12 * max(1, j["execution_s"]), j
    assert j["peak_device_bytes"] > 0, j
    c = j["correctness"]
    assert c["pass"] is True and c["fail_ratio"] == 0 and c["max_error"] >= 0, c
    assert j["reference"] == "cpu-reference" and j["peers"] == {}, j

    events = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents.")]
    assert len(events) == 1, events
    assert j["event_file"] == os.path.join(logdir, events[0]), j["event_file"]
    records = read_events(os.path.join(logdir, events[0]))
    assert records[0][2] == "brain.Event:2", records[0]
    scalars = {}
    for wall, step, _, values in records[1:]:
        assert wall and abs(wall - time.time()) < 3600, wall
        assert step == 2, step  # the batch size
        for tag, value in values:
            scalars[tag] = value
    expect = {"imdb_lstm/compile_s": j["compile_s"], "imdb_lstm/execution_s": j["execution_s"],
              "imdb_lstm/per_example_ms": j["per_example_s"] * 1e3,
              "imdb_lstm/peak_device_bytes": j["peak_device_bytes"],
              "imdb_lstm/max_error": c["max_error"], "imdb_lstm/fail_ratio": c["fail_ratio"]}
    for tag, value in expect.items():
        assert tag in scalars, f"{tag} not in {sorted(scalars)}"
        assert scalars[tag] == np.float32(value), (tag, scalars[tag], value)

    # Human output: the first line names network, batch, device, model and threads.
    r = bench("imdb_lstm", "--examples", 4, "--batch-size", 2, "--warmup", 0)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Running 4 examples with imdb_lstm, batch size 2, on cpu:0 ("), lines
    assert "threads)" in lines[0], lines[0]
    assert any(l.startswith("compile ") and "ms per example" in l for l in lines), lines
    assert any(l.startswith("Correctness: PASS, max_error ") for l in lines), lines


def check_data_sets(tmp):
    model = os.path.join(tmp, "affine.onnx")
    f = affine_model(model)
    x = np.array([[1, 2, 3], [-1, 0.5, 4]], dtype=np.float32)
    y = f(x).astype(np.float32)
    good = os.path.join(tmp, "affine_good", "test_data_set_0")
    write_data_set(good, [x], [y])
    r, j = bench_json("--model", model, "--data", good, "--examples", 4, "--warmup", 0)
    assert r.returncode == 0, r.stderr
    assert j["batch"] == 2 and j["reference"] == "data", j  # the data set's batch
    assert j["correctness"]["pass"] is True, j["correctness"]
    # A folder holding test_data_set_0 works too, and a batch tiled from the data's.
    r, j = bench_json("--model", model, "--data", os.path.dirname(good), "--examples", 8,
                      "--batch-size", 4, "--warmup", 0)
    assert r.returncode == 0 and j["batch"] == 4 and j["correctness"]["pass"], (r.stderr, j)

    # A corrupted reference: 3 of 8 elements off by far more than the tolerance.
    bad_y = y.copy()
    bad_y[0, 1] += 1.0
    bad_y[1, 0] *= -3
    bad_y[1, 3] += 1e-2
    bad = os.path.join(tmp, "affine_bad")
    write_data_set(bad, [x], [bad_y])
    r, j = bench_json("--model", model, "--data", bad, "--examples", 2, "--warmup", 0)
    assert r.returncode == 1, f"FAIL must exit 1: {r.returncode} {r.stderr}"
    c = j["correctness"]
    assert c["pass"] is False and c["fail_ratio"] == 3 / 8, c
    assert abs(c["max_abs_error"] - np.abs(bad_y - y).max()) < 1e-6, c
    r = bench("--model", model, "--data", bad, "--examples", 2, "--warmup", 0)
    assert r.returncode == 1 and "Correctness: FAIL" in r.stdout and "fail_ratio 0.375" in r.stdout, r

    # NaN: Sqrt of negatives; NaN is FAIL and counts in fail_ratio (here 2 of 8 elements),
    # even where the expected output has the same NaN.
    sq = os.path.join(tmp, "sqrt.onnx")
    sqrt_model(sq)
    xs = np.array([[1, 4, -1, 9], [16, -4, 0, 25]], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        ys = np.sqrt(xs)
    nan_set = os.path.join(tmp, "sqrt_data")
    write_data_set(nan_set, [xs], [ys])
    r, j = bench_json("--model", sq, "--data", nan_set, "--examples", 2, "--warmup", 0)
    c = j["correctness"]
    assert r.returncode == 1 and c["pass"] is False, (r.stderr, c)
    assert c["fail_ratio"] == 2 / 8 and c["nonfinite"] == 2, c
    assert c["max_abs_error"] == 0, c  # the finite elements agree exactly
    # Without --data: the reference kernels give NaN too; still FAIL.
    r, j = bench_json("--model", sq, "--examples", 4, "--batch-size", 4, "--warmup", 0)
    assert r.returncode == 1 and not j["correctness"]["pass"], j
    assert j["correctness"]["nonfinite"] > 0, j


def check_export_and_peers(tmp):
    import onnx
    path = os.path.join(tmp, "mobilenet_v2.onnx")
    r = bench("mobilenet_v2", "--export", path)
    assert r.returncode == 0, r.stderr
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 17 and m.graph.input[0].name == "input", m.opset_import
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 224, 224], dims

    # Peers: each either ran (figures, ratio = tensord / peer, outputs checked with the same
    # formula) or says why it is not available; never faked.
    r, j = bench_json("imdb_lstm", "--examples", 4, "--batch-size", 2, "--warmup", 0,
                      "--vs", "onnxruntime,torch", timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(j["peers"]) == {"onnxruntime", "torch"}, j["peers"]
    for name, p in j["peers"].items():
        if p["available"]:
            assert p["per_example_s"] > 0 and p["version"], p
            assert abs(p["ratio"] - j["per_example_s"] / p["per_example_s"]) < 1e-9, p
            if p.get("correctness") is not None:
                assert p["correctness"]["pass"], (name, p)
            print(f"peer {name} {p['version']}: {p['per_example_s'] * 1e3:.3f} ms/example")
        else:
            assert p["reason"], p
            print(f"peer {name}: not available: {p['reason']}")
    r = bench("imdb_lstm", "--examples", 2, "--warmup", 0, "--vs", "onnxruntime", timeout=300)
    assert r.returncode == 0, r.stderr
    assert any(l.startswith("vs onnxruntime") for l in r.stdout.splitlines()), r.stdout


def check_bad_input(tmp):
    garbage = os.path.join(tmp, "garbage.onnx")
    with open(garbage, "wb") as f:
        f.write(b"\x08\x07this is not a model")
    cases = [
        (["resnet51"], 2, "unknown network 'resnet51'"),
        (["--model", os.path.join(tmp, "missing.onnx")], 2, "missing.onnx"),
        (["--model", garbage], 2, "garbage.onnx"),
        (["imdb_lstm", "--examples", 10, "--batch-size", 4], 2, "not divisible"),
        (["imdb_lstm", "--device", "cuda:7"], 2, "unknown device 'cuda:7'"),
        (["imdb_lstm", "--address", f"unix:{tmp}/nobody.sock"], 1, "nobody.sock"),
        (["imdb_lstm", "--vs", "tensorflow"], 2, "unknown peer 'tensorflow'"),
        (["imdb_lstm", "--examples", 0], 2, "--examples"),
        (["--all", "--examples", 12], 2, "batch size 8"),
        (["imdb_lstm", "--data", os.path.join(tmp, "nowhere")], 2, "nowhere"),
        (["imdb_lstm", "--devices", "cpu:0,cpu:0", "--batch-size", 1], 2,
         "smaller than the 2 devices"),
        ([], 2, "name a network"),
    ]
    for args, code, needle in cases:
        t0 = time.monotonic()
        r = bench(*args, timeout=30)
        took = time.monotonic() - t0
        lines = r.stderr.strip().splitlines()
        assert r.returncode == code, f"{args}: exit {r.returncode} (want {code}): {r.stderr}"
        assert len(lines) == 1 and lines[0].startswith("tensord: "), f"{args}: {r.stderr!r}"
        assert needle in lines[0], f"{args}: {needle!r} not in {lines[0]!r}"
        assert r.stdout == "", f"{args}: {r.stdout!r}"
        print(f"ok ({took:.1f} s) {args}: {lines[0]}")


def check_remote(tmp):
    sock = f"unix:{tmp}/broker.sock"
    proc = subprocess.Popen([EXE, "serve", "--listen", sock], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "broker not ready after 20 s"
        line = proc.stdout.readline().strip()
        assert line == f"tensord serving on {sock}", line
        outs = {}
        for name, extra in (("local", []), ("remote", ["--address", sock])):
            d = os.path.join(tmp, name)
            r, j = bench_json("imdb_lstm", "--examples", 4, "--batch-size", 2, "--warmup", 2,
                              "--outputs", d, *extra)
            assert r.returncode == 0, f"{name}: {r.stderr}"
            assert j["correctness"]["pass"], (name, j)
            assert j["address"] == (sock if extra else None), j
            outs[name] = np.load(os.path.join(d, "output.npy"))
        assert outs["local"].shape == (2, 1), outs["local"].shape
        np.testing.assert_array_equal(outs["local"], outs["remote"])
        # --devices: data parallel (Client::run_data_parallel) next to the first device alone,
        # embedded over two cpu devices and through the broker (cpu:0 twice: two parts).
        for extra, devices, env in (([], "cpu:0,cpu:1", clean_env(TENSORD_CPU_DEVICES="2")),
                                    (["--address", sock], "cpu:0,cpu:0", None)):
            r, j = bench_json("imdb_lstm", "--devices", devices, "--batch-size", 5,
                              "--examples", 10, *extra, env=env)
            assert r.returncode == 0, f"--devices {devices} {extra}: {r.stderr}"
            assert j["devices"] == devices.split(",") and j["batch"] == 5, j
            assert j["max_abs_diff"] <= 1e-5, j
            assert j["one_ms_per_example"] > 0 and j["parallel_ms_per_example"] > 0, j
        # TENSORD_ADDRESS works like --address.
        r, j = bench_json("imdb_lstm", "--examples", 2, "--warmup", 0,
                          env=clean_env(TENSORD_ADDRESS=sock))
        assert r.returncode == 0 and j["address"] == sock, (r.stderr, j)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_torchvision(tmp):
    try:
        import torch
        import torchvision
    except ImportError as e:
        skip(f"torch/torchvision not importable ({e})")
    torch.manual_seed(0)
    net = torchvision.models.mobilenet_v2(weights=None).eval()
    # Fresh torchvision weights give logits ~1e-9, which any output passes within atol 1e-6:
    # real BatchNorm statistics and a scaled classifier make the logits O(1).
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
        net.classifier[1].weight.normal_(0, 1 / np.sqrt(1280), generator=g)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        y = net(x).numpy()
    assert np.abs(y).mean() > 0.05, f"logits too small to judge: {np.abs(y).mean()}"
    path = os.path.join(tmp, "mobilenet_v2_torch.onnx")
    torch.onnx.export(net, x, path, opset_version=13, input_names=["input"],
                      output_names=["output"])
    data = os.path.join(tmp, "test_data_set_0")
    write_data_set(data, [x.numpy()], [y])
    r, j = bench_json("--model", path, "--data", data, "--examples", 2, "--warmup", 0,
                      timeout=300)
    assert r.returncode == 0, r.stderr
    assert j["correctness"]["pass"], j["correctness"]
    assert j["reference"] == "data" and j["correctness"]["elements"] == 1000, j
    print(f"torchvision mobilenet_v2: {j['correctness']}")
    # A slightly wrong expected output (one logit off by 1e-3) is caught.
    y_bad = y.copy()
    y_bad[0, 7] += 1e-3
    bad = os.path.join(tmp, "bad", "test_data_set_0")
    write_data_set(bad, [x.numpy()], [y_bad])
    r, j = bench_json("--model", path, "--data", bad, "--examples", 1, "--warmup", 0)
    assert r.returncode == 1 and j["correctness"]["fail_ratio"] == 1 / 1000, j["correctness"]


def check_verdicts(tmp):
    model = os.path.join(tmp, "cancel.onnx")
    cancellation_model(model)
    x = np.random.default_rng(7).standard_normal((2, 64)).astype(np.float32)
    truth = os.path.join(tmp, "cancel_data")
    write_data_set(truth, [x], [x])  # (x + 1e4) - 1e4 = x exactly
    x32 = (x + np.float32(1e4)) - np.float32(1e4)  # what float32 computes
    assert np.abs(x32 - x).max() > 1e-4, "the model does not cancel in float32"

    # Default on cpu:0: the cpu reference kernels; float32 against float32 agrees.
    r, j = bench_json("--model", model, "--examples", 2, "--batch-size", 2, "--warmup", 0)
    assert r.returncode == 0 and j["reference"] == "cpu-reference", (r.stderr, j)
    c = j["correctness"]
    assert c["pass"] and "max_error_of_scale" in c and j["checked_examples"] == 1, j
    assert j["check_s"] >= 0 and "oracle_correctness" not in j, j

    # The float32 reference run against the truth (--data): FAIL; the float64 run: PASS
    # (exactly), and then the device's own float32 output FAILs against it.
    r, j = bench_json("--model", model, "--data", truth, "--oracle", "reference",
                      "--examples", 2, "--warmup", 0)
    assert j["reference"] == "cpu-reference", j
    oc = j["oracle_correctness"]
    assert oc["pass"] is False and oc["fail_ratio"] > 0.2, oc
    assert oc["max_error_of_scale"] > 1e-5, oc
    assert j["correctness"]["pass"] is True and r.returncode == 0, j  # float32 == float32
    r, j = bench_json("--model", model, "--data", truth, "--oracle", "float64",
                      "--examples", 2, "--warmup", 0)
    assert j["reference"] == "float64" and "reference_note" not in j, j
    oc = j["oracle_correctness"]
    assert oc["pass"] is True and oc["max_abs_error"] == 0, oc
    assert r.returncode == 1 and j["correctness"]["pass"] is False, j
    assert abs(j["correctness"]["max_abs_error"] - np.abs(x32 - x).max()) < 1e-6, j
    # Without --data the float64 oracle alone makes the verdict, and says so in text.
    r = bench("--model", model, "--oracle", "float64", "--examples", 2, "--batch-size", 2,
              "--warmup", 0)
    assert r.returncode == 1 and "Correctness: FAIL" in r.stdout, r
    assert "against the graph in float64 on the cpu reference kernels" in r.stdout, r.stdout
    assert "the first 1 of 2 examples" in r.stdout, r.stdout

    # An op with no float64 kernel (Celu) stays float32 in the float64 oracle, named in the
    # verdict; the rest of the graph is still float64, so the oracle still passes the truth.
    celu = os.path.join(tmp, "cancel_celu.onnx")
    cancellation_celu_model(celu)
    xd = x.astype(np.float64)
    celu_truth = os.path.join(tmp, "celu_data")
    write_data_set(celu_truth, [x], [np.where(xd > 0, xd, np.expm1(xd)).astype(np.float32)])
    r, j = bench_json("--model", celu, "--data", celu_truth, "--oracle", "float64",
                      "--examples", 2, "--warmup", 0)
    assert j["reference"] == "float64", j
    assert j["reference_note"] == "float32 at 1 node with no float64 kernel: celu", j
    assert j["oracle_correctness"]["pass"] is True, j["oracle_correctness"]
    r, j = bench_json("--model", celu, "--data", celu_truth, "--oracle", "reference",
                      "--examples", 2, "--warmup", 0)
    assert j["oracle_correctness"]["pass"] is False, j["oracle_correctness"]
    r = bench("--model", celu, "--oracle", "float64", "--examples", 2, "--warmup", 0)
    assert "float32 at 1 node with no float64 kernel: celu" in r.stdout, r.stdout

    # The fast oracle: cpu:0's fast path.
    r, j = bench_json("--model", model, "--oracle", "fast", "--examples", 2, "--warmup", 0)
    assert r.returncode == 0 and j["reference"] == "cpu-fast", (r.stderr, j)
    assert j["correctness"]["pass"] and j["checked_examples"] == 1, j

    # --no-check: no verdict, exit 0 even for a model the float64 oracle fails, said so.
    r = bench("--model", model, "--no-check", "--examples", 2, "--warmup", 0)
    assert r.returncode == 0 and "Correctness: not checked (--no-check)" in r.stdout, r
    r, j = bench_json("--model", model, "--no-check", "--examples", 2, "--warmup", 0)
    assert r.returncode == 0 and j["reference"] == "none" and j["correctness"] is None, j
    assert j["checked_examples"] == 0, j

    # Bad usage: an unknown oracle, or both.
    r = bench("--model", model, "--oracle", "gpu")
    assert r.returncode == 2 and "unknown oracle 'gpu'" in r.stderr, r
    r = bench("--model", model, "--oracle", "fast", "--no-check")
    assert r.returncode == 2 and "--no-check" in r.stderr, r

    # A zoo network at batch 2: the reference kernels check its first example; --oracle
    # float64 runs the whole network in float64 and passes.
    r, j = bench_json("imdb_lstm", "--examples", 2, "--batch-size", 2, "--warmup", 0,
                      "--oracle", "float64")
    assert r.returncode == 0 and j["correctness"]["pass"], (r.stderr, j)
    assert j["checked_examples"] == 1 and j["reference"] == "float64", j

    # The criterion is relative to the output's scale: an element near zero may be off by
    # 1e-5 of the largest |ref|, not more.
    aff = os.path.join(tmp, "affine_scale.onnx")
    f = affine_model(aff)
    xa = np.array([[1, 2, 3], [-1, 0.5, 4]], dtype=np.float32)
    y = f(xa).astype(np.float32)
    scale = float(np.abs(y).max())
    near = np.unravel_index(np.argmin(np.abs(y)), y.shape)
    for off, ok in ((0.5e-5 * scale, True), (3e-5 * scale, False)):
        yy = y.copy()
        yy[near] += off
        d = os.path.join(tmp, f"affine_scale_{ok}")
        write_data_set(d, [xa], [yy])
        r, j = bench_json("--model", aff, "--data", d, "--examples", 2, "--warmup", 0)
        assert j["correctness"]["pass"] is ok, (off, abs(y[near]), j["correctness"])
        assert abs(j["correctness"]["max_error_of_scale"] - off / scale) < 1e-6, j

    # `tensord onnx-test --rtol/--atol`: an expected output 0.2% off fails ONNX's default
    # rtol 1e-3 and passes --rtol 3e-3 or a large --atol; a negative one is bad usage.
    case = os.path.join(tmp, "onnx_tests", "test_affine_off")
    os.makedirs(case)
    affine_model(os.path.join(case, "model.onnx"))
    write_data_set(os.path.join(case, "test_data_set_0"), [xa], [y * np.float32(1.002)])
    suite = os.path.dirname(case)

    def onnx_test(*args):
        return subprocess.run([EXE, "onnx-test", suite, *args], capture_output=True, text=True,
                              env=clean_env(), timeout=60)
    r = onnx_test()
    assert r.returncode == 1 and "0 passed, 1 failed" in r.stdout, r
    for args in (["--rtol", "3e-3"], ["--atol", "1"]):
        r = onnx_test(*args)
        assert r.returncode == 0 and "1 passed, 0 failed" in r.stdout, (args, r)
    r = onnx_test("--atol", "-1")
    assert r.returncode == 2 and "--atol" in r.stderr, r


def main():
    global EXE
    EXE, case = sys.argv[1], sys.argv[2]
    try:
        import onnx  # noqa: F401
    except ImportError:
        skip("python3-onnx is not installed")
    with tempfile.TemporaryDirectory(prefix="tensord-bench-test-") as tmp:
        if case == "core":
            check_bad_input(tmp)
            check_json_and_events(tmp)
            check_data_sets(tmp)
            check_export_and_peers(tmp)
        elif case == "remote":
            check_remote(tmp)
        elif case == "torchvision":
            check_torchvision(tmp)
        elif case == "verdict":
            check_verdicts(tmp)
        else:
            raise SystemExit(f"unknown case {case}")
    print("ok")


if __name__ == "__main__":
    main()
