"""ONNX models (exported from PyTorch) and tensord.nn against PyTorch; two models on two
devices chained inside the engine."""
import numpy as np
import pytest

import tensord as td

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
F = torch.nn.functional


@pytest.fixture(scope="module")
def mlp_onnx(tmp_path_factory):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    net.eval()
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    torch.onnx.export(net, torch.randn(2, 8), str(path), input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "n"}}, opset_version=13)
    return net, path


def test_load_and_run(client, mlp_onnx):
    net, path = mlp_onnx
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    want = net(torch.from_numpy(x)).detach().numpy()
    for device in client.devices():
        m = td.load(path, device=device, client=client)
        assert m.input_names == ["input"] and m.output_names == ["logits"]
        y = m(x)
        assert isinstance(y, td.ndarray) and y.device == device and y.shape == (5, 4)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
        out = m.run({"input": td.asarray(x, device=device, client=client)})
        np.testing.assert_allclose(out["logits"].numpy(), want, rtol=1e-5, atol=1e-5)
    m = client.load(path.read_bytes())  # from bytes
    np.testing.assert_allclose(m(input=x).numpy(), want, rtol=1e-5, atol=1e-5)


def test_data_parallel(client, mlp_onnx):
    """m(x, devices=[...]): the batch split over the devices, gathered on the first."""
    net, path = mlp_onnx
    x = np.random.default_rng(1).standard_normal((7, 8)).astype(np.float32)
    want = net(torch.from_numpy(x)).detach().numpy()
    devs = [str(d) for d in client.devices() if str(d).startswith("cpu:")]
    m = td.load(path, device=devs[0], client=client)
    for devices in (devs, list(reversed(devs)) + devs):
        y = m(x, devices=devices)
        assert y.device == devices[0] and y.shape == (7, 4)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError) as e:
        m(x[:1], devices=devs + devs)
    assert "cannot be split" in str(e.value)


def test_model_errors(client, mlp_onnx, tmp_path):
    _, path = mlp_onnx
    m = td.load(path, client=client)
    with pytest.raises(ValueError):
        m.run({"wrong": np.zeros((1, 8), np.float32)})
    with pytest.raises(ValueError):
        m(np.zeros((1, 8), np.float32), np.zeros((1, 8), np.float32))
    with pytest.raises(td.TensordError) as e:
        td.load(tmp_path / "missing.onnx", client=client)
    assert "missing.onnx" in str(e.value)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(td.TensordError) as e:
        td.load(bad, client=client)
    assert "bad.onnx" in str(e.value)


def test_two_models_two_devices_chained(client, mlp_onnx):
    """An ONNX model from PyTorch on one device feeding a tensord.nn network on another: the
    activations move inside the engine, never through Python (transfer counters)."""
    devs = client.devices()
    if len(devs) < 2:
        pytest.skip("needs two devices (TENSORD_CPU_DEVICES=2)")
    net, path = mlp_onnx
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    m = td.load(path, device=devs[0], client=client)
    W = td.asarray(w, device=devs[1], client=client)
    B = td.asarray(b, device=devs[1], client=client)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    xs = td.asarray(x, device=devs[0], client=client)
    s0 = client.stats()
    h = m(xs)                                   # on devs[0]
    y = td.nn.softmax(td.nn.linear(td.nn.gelu(h.to(devs[1])), W, B))  # on devs[1]
    assert h.device == devs[0] and y.device == devs[1]
    got = y.numpy()
    s1 = client.stats()
    assert s1["uploads"] == s0["uploads"]           # nothing re-sent from the host
    assert s1["downloads"] - s0["downloads"] == 1   # only the final result is read
    assert s1["copies"] - s0["copies"] == 1         # devs[0] -> devs[1] inside the engine
    t = net(torch.from_numpy(x))
    want = F.softmax(F.linear(F.gelu(t), torch.from_numpy(w), torch.from_numpy(b)), -1)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)


def t2n(t):
    return t.detach().numpy()


def test_nn_against_torch(client):
    torch.manual_seed(0)
    A = lambda t: td.asarray(t2n(t), client=client)  # noqa: E731
    x = torch.randn(2, 3, 9, 9)
    w = torch.randn(4, 3, 3, 3)
    b = torch.randn(4)
    close = lambda got, want: np.testing.assert_allclose(got.numpy(), t2n(want), rtol=1e-4, atol=1e-5)  # noqa: E731
    close(td.nn.relu(A(x)), F.relu(x))
    close(td.nn.gelu(A(x)), F.gelu(x))
    close(td.nn.gelu(A(x), approximate="tanh"), F.gelu(x, approximate="tanh"))
    close(td.nn.softmax(A(x), axis=1), F.softmax(x, 1))
    close(td.nn.log_softmax(A(x)), F.log_softmax(x, -1))
    close(td.nn.silu(A(x)), F.silu(x))
    close(td.nn.leaky_relu(A(x), 0.1), F.leaky_relu(x, 0.1))
    close(td.nn.conv2d(A(x), A(w), A(b), stride=2, padding=1), F.conv2d(x, w, b, 2, 1))
    close(td.nn.conv2d(A(x), A(w[:, :1].repeat(1, 1, 1, 1)[:3]), None, groups=3, dilation=2),
          F.conv2d(x, w[:, :1][:3], None, 1, 0, 2, 3))
    close(td.nn.max_pool2d(A(x), 2), F.max_pool2d(x, 2))
    close(td.nn.max_pool2d(A(x), 3, stride=2, padding=1), F.max_pool2d(x, 3, 2, 1))
    close(td.nn.avg_pool2d(A(x), 3, stride=2), F.avg_pool2d(x, 3, 2))
    rm, rv, g, be = torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)
    close(td.nn.batch_norm(A(x), A(rm), A(rv), A(g), A(be)), F.batch_norm(x, rm, rv, g, be))
    close(td.nn.layer_norm(A(x), (9,), A(torch.ones(9) * 2), A(torch.zeros(9) + 1)),
          F.layer_norm(x, (9,), torch.ones(9) * 2, torch.zeros(9) + 1))
    close(td.nn.layer_norm(A(x), (9, 9)), F.layer_norm(x, (9, 9)))
    lin_w, lin_b = torch.randn(5, 9), torch.randn(5)
    close(td.nn.linear(A(x), A(lin_w), A(lin_b)), F.linear(x, lin_w, lin_b))


@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm_against_torch(client, batch_first):
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(6, 5, batch_first=batch_first)
    x = torch.randn(4, 3, 6)
    h0, c0 = torch.randn(1, 4 if batch_first else 3, 5), torch.randn(1, 4 if batch_first else 3, 5)
    want, (wh, wc) = lstm(x, (h0, c0))
    A = lambda t: td.asarray(t2n(t), client=client)  # noqa: E731
    got, (gh, gc) = td.nn.lstm(A(x), A(lstm.weight_ih_l0), A(lstm.weight_hh_l0),
                               A(lstm.bias_ih_l0), A(lstm.bias_hh_l0), hx=(A(h0), A(c0)),
                               batch_first=batch_first)
    np.testing.assert_allclose(got.numpy(), t2n(want), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gh.numpy(), t2n(wh), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gc.numpy(), t2n(wc), rtol=1e-4, atol=1e-5)


def _list_in_a_loop_model(trips_constant=True):
    """A Python list built in a loop, as exporters write one (torchvision's MViT: 38 such
    Loops): SequenceEmpty, a Loop whose body SequenceInserts a slice of x, one more insert
    after it, then SequenceAt at constant positions, SequenceLength and ConcatFromSequence."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    i64 = lambda name, v: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [1], [v]))
    body = helper.make_graph(
        [i64("one", 1), helper.make_node("Add", ["i", "one"], ["i1"]),
         i64("axis", 0),
         helper.make_node("Slice", ["x", "i", "i1", "axis"], ["row"]),
         helper.make_node("Mul", ["row", "two"], ["row2"]),
         helper.make_node("SequenceInsert", ["seq_in", "row2"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Constant", [], ["true"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
    ]
    if trips_constant:
        nodes.append(helper.make_node("Constant", [], ["trips"],
                                      value=helper.make_tensor("m", TensorProto.INT64, [], [3])))
    else:  # the trip count from the data: not known at import
        nodes += [helper.make_node("Shape", ["x"], ["shape"]),
                  helper.make_node("Gather", ["shape", "zero"], ["trips"]),
                  helper.make_node("Constant", [], ["zero"],
                                   value=helper.make_tensor("z", TensorProto.INT64, [], [0]))]
        nodes.insert(0, nodes.pop())  # "zero" first
    nodes += [
        helper.make_node("Loop", ["trips", "true", "empty"], ["rows"], body=body),
        helper.make_node("SequenceInsert", ["rows", "x"], ["all"]),
        i64("p1", 1), i64("pm1", -1),
        helper.make_node("Constant", [], ["p1s"], value=helper.make_tensor("p", TensorProto.INT64, [], [1])),
        helper.make_node("Constant", [], ["pm1s"], value=helper.make_tensor("q", TensorProto.INT64, [], [-1])),
        helper.make_node("SequenceAt", ["all", "p1s"], ["second"]),
        helper.make_node("SequenceAt", ["all", "pm1s"], ["last"]),
        helper.make_node("SequenceLength", ["all"], ["count"]),
        helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "list_in_a_loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("second", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("last", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("count", TensorProto.INT64, []),
         helper.make_tensor_value_info("stacked", TensorProto.FLOAT, [3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_list_built_in_a_loop_becomes_its_tensors(client):
    """Sequences whose contents are known at import (a Loop with a constant trip count, read at
    constant positions) are resolved into the tensors they hold: the model runs; one whose trip
    count comes from the data is still refused, naming sequences. (The body's Slice takes the
    scalar iteration number as its starts, as MViT's export does; ONNX Runtime accepts that.)"""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = client.load(_list_in_a_loop_model())
    out = m.run({"x": td.asarray(x, client=client)})
    np.testing.assert_array_equal(out["second"].numpy(), 2 * x[1:2])
    np.testing.assert_array_equal(out["last"].numpy(), x)
    assert int(out["count"].numpy()) == 4
    np.testing.assert_array_equal(out["stacked"].numpy(), 2 * x)
    with pytest.raises(td.Unimplemented, match="sequence"):
        client.load(_list_in_a_loop_model(trips_constant=False))
