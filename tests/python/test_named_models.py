"""Named models (``tensord serve --models DIR``): ``tensord.open_model(name)`` and
``tensord.list_models()`` against a real broker loading a folder of real ONNX files
(tests/rpc/make_named_models.py), and on the embedded engine (``models_dir``)."""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import tensord as td
from conftest import Broker

MAKE = os.path.join(os.path.dirname(__file__), "..", "rpc", "make_named_models.py")


@pytest.fixture(scope="module")
def models_dir():
    pytest.importorskip("onnx", reason="python3-onnx writes the test models")
    d = tempfile.mkdtemp(prefix="tensord-py-named-")
    subprocess.run([sys.executable, MAKE, os.path.join(d, "models"), "--small"], check=True)
    yield os.path.join(d, "models")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def named_broker(models_dir):
    cli = os.environ.get("TENSORD_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("TENSORD_CLI does not name the tensord binary: no broker to test against")
    b = Broker(cli, args=("--models", models_dir))
    yield b
    b.stop()


def check_mlp(client, models_dir):
    x = np.load(os.path.join(models_dir, "mlp", "x.npy"))
    want = np.load(os.path.join(models_dir, "mlp", "y.npy"))
    m = td.open_model("mlp", client=client)
    assert m.input_names == ["X"] and m.output_names == ["Y"]
    assert str(m.device) == "cpu:0"
    y = m.run({"X": x})["Y"]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)
    return m


def test_two_clients_open_the_same_named_model(named_broker, models_dir):
    a = td.Client(named_broker.address)
    b = td.Client(named_broker.address)
    check_mlp(a, models_dir)
    check_mlp(b, models_dir)
    # The default client's module-level functions too.
    previous = td.default_client()
    td.connect(named_broker.address)
    try:
        check_mlp(None, models_dir)
        names = [(m["name"], m["ready"]) for m in td.list_models()]
        assert names == [("add", True), ("broken", False), ("mlp", True)]
    finally:
        td._core._default = previous  # other tests keep their default client


def test_list_and_errors(named_broker):
    c = td.Client(named_broker.address)
    models = {m["name"]: m for m in c.list_models()}
    assert models["mlp"]["weight_bytes"] == (1024 * 256 + 256 * 4) * 4
    assert models["mlp"]["inputs"] == [("X", "float32", [-1, 1024])]
    assert models["add"]["device"] == "cpu:1"
    assert "not a valid ONNX model" in models["broken"]["reason"]
    with pytest.raises(td.NotFound, match="'resnet50'.*'add', 'broken', 'mlp'"):
        c.open_model("resnet50")
    with pytest.raises(td.FailedPrecondition, match="not a valid ONNX model"):
        c.open_model("broken")
    y = c.open_model("add").run([np.ones(4, np.float32)])["Y"]
    assert y.numpy().tolist() == [2, 3, 4, 5]


def test_embedded_models_dir(models_dir):
    c = td.Client.local(models_dir=models_dir)
    check_mlp(c, models_dir)
    assert [m["name"] for m in c.list_models()] == ["add", "broken", "mlp"]


def test_model_shapes_and_dtypes(named_broker):
    c = td.Client(named_broker.address)
    m = c.open_model("mlp")
    assert m.inputs == [td.TensorSpec("X", np.dtype("float32"), (None, 1024))]
    assert m.outputs == [td.TensorSpec("Y", np.dtype("float32"), (None, 4))]
    assert m.input_shapes == [(None, 1024)] and m.output_shapes == [(None, 4)]
    assert m.input_dtypes == [np.float32] and m.output_dtypes == [np.float32]
    a = c.open_model("add")
    assert a.input_shapes == [(4,)] and a.output_dtypes == [np.float32]


def test_run_async_future_and_await(named_broker, models_dir):
    import asyncio
    import concurrent.futures

    c = td.Client(named_broker.address)
    m = c.open_model("mlp")
    x = np.load(os.path.join(models_dir, "mlp", "x.npy"))
    want = np.load(os.path.join(models_dir, "mlp", "y.npy"))
    xs = x.copy()
    futs = [m.run_async({"X": xs}) for _ in range(4)]
    xs[:] = 0  # the inputs were taken when run_async returned
    for f in futs:
        assert isinstance(f, concurrent.futures.Future)
        np.testing.assert_allclose(f.result(timeout=60)["Y"].numpy(), want, rtol=1e-4, atol=1e-5)
    # A wrong input: the future's exception, not the call's.
    bad = m.run_async({"X": np.ones((2, 7), np.float32)})
    with pytest.raises(td.TensordError):
        bad.result(timeout=60)

    async def main():
        outs = await asyncio.gather(*[m.run_async([x]) for _ in range(3)])
        return [o["Y"].numpy() for o in outs]

    for y in asyncio.run(main()):
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
