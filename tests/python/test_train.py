"""Training (issue 34): td.optim against the ONNX training-domain formulas, parameters and state
kept on the device between steps, and models trained on scikit-learn's digits."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tensord as td

# Tests that make their own embedded client run once, under python_embedded.
embedded_only = pytest.mark.skipif(os.environ.get("TENSORD_PY_MODE") == "remote",
                                   reason="embedded client of its own: runs under python_embedded")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


# ---- the formulas of ai.onnx.preview.training's Momentum, Adam and Adagrad, in NumPy
def ref_momentum(x, g, v, r, t, alpha, beta, mode, norm):
    g = norm * x + g
    beta_adj = beta if t > 0 else 1.0
    v = alpha * v + beta_adj * g
    x = x - r * v if mode == "standard" else x - r * (g + alpha * v)
    return x, v


def ref_adam(x, g, v, h, r, t, alpha, beta, eps, norm, norm_post):
    g = norm * x + g
    v = alpha * v + (1 - alpha) * g
    h = beta * h + (1 - beta) * g * g
    hs = np.sqrt(h) + eps
    ra = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    x = (x - ra * v / hs) * (1 - norm_post)
    return x, v, h


def ref_adagrad(x, g, h, r, t, decay, eps, norm):
    rr = r / (1 + t * decay)
    g = norm * x + g
    h = h + g * g
    return x - rr * g / (np.sqrt(h) + eps), h


def _steps(client, opt_factory, ref_step, n_state, steps=4):
    """Both ways of stepping: element-wise ops (exact in float64) and the ONNX op (its float32
    attributes: close)."""
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((3, 4)).astype(np.float64)
    grads = [rng.standard_normal((3, 4)) for _ in range(steps)]
    for onnx_op, tol in ((False, 1e-12), (True, 1e-6)):
        p = [td.asarray(x0, client=client), td.asarray(x0[0], client=client)]
        opt = opt_factory(p, onnx_op)
        x, state = x0.copy(), [np.zeros_like(x0)] * n_state
        for k, g in enumerate(grads):
            p = opt.step(p, [td.asarray(g, client=client), td.asarray(g[0], client=client)])
            x, *state = ref_step(x, g, *state, k)
            np.testing.assert_allclose(p[0].numpy(), x, rtol=tol, atol=tol)
            np.testing.assert_allclose(p[1].numpy(), x[0], rtol=tol, atol=tol)


def test_momentum_matches_onnx_formula(client):
    for mode in ("standard", "nesterov"):
        _steps(client, lambda p, o: td.optim.Momentum(p, lr=0.1, alpha=0.9, beta=0.5, mode=mode,
                                                      norm_coefficient=0.01, onnx_op=o),
               lambda x, g, v, k: ref_momentum(x, g, v, 0.1, k, 0.9, 0.5, mode, 0.01), 1)


def test_adam_matches_onnx_formula(client):
    # tensord's Adam passes T = 1, 2, ... (PyTorch's bias correction from the first step)
    _steps(client, lambda p, o: td.optim.Adam(p, lr=0.05, norm_coefficient=0.01,
                                              norm_coefficient_post=0.001, onnx_op=o),
           lambda x, g, v, h, k: ref_adam(x, g, v, h, 0.05, k + 1, 0.9, 0.999, 1e-6, 0.01, 0.001),
           2)


def test_adagrad_matches_onnx_formula(client):
    _steps(client, lambda p, o: td.optim.Adagrad(p, lr=0.1, decay_factor=0.1, norm_coefficient=0.01,
                                              onnx_op=o),
           lambda x, g, h, k: ref_adagrad(x, g, h, 0.1, k, 0.1, 1e-6, 0.01), 1)


def test_sgd_matches_torch(client):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    w = td.asarray(w0, client=client)
    xt = td.asarray(x, client=client)
    opt = td.optim.Momentum(w, lr=0.1, alpha=0.9, beta=1.0)
    f = td.value_and_grad(lambda w_: td.mean(td.tanh(xt @ w_) ** 2))
    for _ in range(5):
        topt.zero_grad()
        tl = (torch.tanh(torch.tensor(x) @ tw) ** 2).mean()
        tl.backward()
        topt.step()
        loss, g = f(w)
        w = opt.step(w, g, also=loss)
        assert abs(float(loss) - tl.item()) < 1e-5
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_learning_rate_schedule_as_plain_values(client):
    p = td.asarray(np.ones(3, np.float32), client=client)
    opt = td.optim.SGD(p, lr=1.0)
    g = td.asarray(np.ones(3, np.float32), client=client)
    p = opt.step(p, g)
    opt.lr = 0.5
    p = opt.step(p, g)
    np.testing.assert_allclose(p.numpy(), [-0.5] * 3)


@pytest.mark.parametrize("onnx_op", [False, True])
def test_parameters_stay_on_the_device_between_steps(client, onnx_op):
    """A step is one graph on the device (embedded and through a broker): no download and one
    execute per step, whatever the number of parameters (the optimiser state, the step count and
    the learning rate are device tensors)."""
    c = client
    rng = np.random.default_rng(0)
    put = lambda a: td.asarray(a, client=c)  # noqa: E731
    params = [put(rng.standard_normal((16, 8)).astype(np.float32)),
              put(np.zeros(8, np.float32))]
    x = put(rng.standard_normal((32, 16)).astype(np.float32))
    y = put(rng.integers(0, 8, 32).astype(np.int64))
    opt = td.optim.Adam(params, lr=1e-2, onnx_op=onnx_op)
    vg = td.value_and_grad(
        lambda p: td.op("SoftmaxCrossEntropyLoss", td.op("Gemm", x, p[0], p[1]), y))
    loss, g = vg(params)
    params = opt.step(params, g, also=loss)
    first = float(loss)
    before = c.stats()
    for _ in range(10):
        loss, g = vg(params)
        params = opt.step(params, g, also=loss)
    after = c.stats()
    assert after["downloads"] == before["downloads"], (before, after)
    assert after["executes"] - before["executes"] == 10, (before, after)
    assert float(loss) < first


def _train(model, steps=None, onnx_op=False):
    sys.path.insert(0, EXAMPLES)
    try:
        import train_digits
    finally:
        sys.path.pop(0)
    return train_digits.train(model, "cpu:0", steps=steps, client=td.Client.local(),
                              onnx_op=onnx_op)


@embedded_only
@pytest.mark.parametrize("model", ["mlp", "cnn", "mlp-onnx-adam"])
def test_digits_reach_97_percent(model):
    pytest.importorskip("sklearn")
    acc, seconds, loss, losses = _train(model.split("-")[0], onnx_op=model.endswith("adam"))
    print(f"{model}: test accuracy {acc:.4f} in {seconds:.1f} s, loss {losses}")
    assert acc >= 0.97, f"{model}: test accuracy {acc:.4f} < 0.97 (losses {losses})"


@embedded_only
@pytest.mark.parametrize("through", ["embedded", "broker"])
def test_cnn_reaches_97_percent_on_opencl(through):
    """The CNN on opencl:0 (PoCL here), embedded and through a real broker, in a process of its
    own with OpenCL enabled (the tiers may disable it); examples/python/train_digits.py exits
    non-zero below 97%."""
    pytest.importorskip("sklearn")
    cli = os.environ.get("TENSORD_CLI")
    if through == "broker" and (not cli or not os.path.exists(cli)):
        pytest.skip("TENSORD_CLI does not name the tensord binary: no broker to train through")
    env = dict(os.environ)
    env.pop("TENSORD_OPENCL", None)
    env.pop("TENSORD_ADDRESS", None)
    probe = subprocess.run([sys.executable, "-c", "import tensord as td; print("
                            "[str(d) for d in td.Client.local().devices()])"],
                           env=env, capture_output=True, text=True, timeout=120)
    if "opencl:0" not in probe.stdout:
        if os.environ.get("CI") == "true":
            pytest.fail("CI without an opencl:0 device: " + probe.stdout + probe.stderr)
        pytest.skip("no opencl:0 device: " + probe.stdout.strip())
    from conftest import Broker
    b = Broker(cli, env=env) if through == "broker" else None
    try:
        if b:
            b_env = dict(env, TENSORD_ADDRESS=b.address)
        r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "train_digits.py"), "--model",
                            "cnn", "--device", "opencl:0"], env=b_env if b else env,
                           capture_output=True, text=True, timeout=300)
    finally:
        if b:
            b.stop()
    print(r.stdout[-400:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_digits_through_a_broker_match_embedded_training(broker):
    """The same training, through a real broker and embedded: the same losses step by step
    (same seed, same batches; tolerance for the two processes' kernel choices) and an MLP that
    reaches 97% either way."""
    pytest.importorskip("sklearn")
    sys.path.insert(0, EXAMPLES)
    try:
        import train_digits
    finally:
        sys.path.pop(0)
    remote = train_digits.train("mlp", "cpu:0", client=td.Client(broker.address))
    local = train_digits.train("mlp", "cpu:0", client=td.Client.local())
    print(f"through a broker: accuracy {remote[0]:.4f} in {remote[1]:.1f} s; embedded "
          f"{local[0]:.4f} in {local[1]:.1f} s")
    assert remote[0] >= 0.97, remote[3]
    np.testing.assert_allclose(remote[3], local[3], rtol=1e-3, atol=1e-4)


# ---- the training-domain ops themselves (graph ops with a cpu kernel; other devices fall back)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_training_domain_ops_match_the_onnx_formulas(client, dtype):
    rng = np.random.default_rng(11)
    shapes = [(3, 4), (5,)]
    xs, gs, vs = ([rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3))
    hs = [np.abs(rng.standard_normal(s)).astype(dtype) for s in shapes]
    put = lambda a: td.asarray(a, client=client)  # noqa: E731
    r = put(np.asarray(0.1, dtype))
    tol = dict(rtol=1e-5 if dtype == "float32" else 1e-6, atol=1e-6)
    # attributes are float32 in ONNX: the references use the same rounded values
    f = lambda v: float(np.float32(v))  # noqa: E731
    for t in (0, 3):
        tt = put(np.asarray(t, np.int64))
        out = td.op("ai.onnx.preview.training.Adam", r, tt, *map(put, xs + gs + vs + hs),
                    num_outputs=6, alpha=0.8, beta=0.9, epsilon=1e-5, norm_coefficient=0.01,
                    norm_coefficient_post=0.001)
        for i in range(2):
            ex, ev, eh = ref_adam(xs[i], gs[i], vs[i], hs[i], 0.1, t, f(0.8), f(0.9), f(1e-5),
                                  f(0.01), f(0.001))
            for got, want in ((out[i], ex), (out[2 + i], ev), (out[4 + i], eh)):
                np.testing.assert_allclose(got.numpy(), want, **tol)
        for mode in ("standard", "nesterov"):
            out = td.op("ai.onnx.preview.training.Momentum", r, tt, *map(put, xs + gs + vs),
                        num_outputs=4, alpha=0.7, beta=0.5, mode=mode, norm_coefficient=0.01)
            for i in range(2):
                ex, ev = ref_momentum(xs[i], gs[i], vs[i], 0.1, t, f(0.7), f(0.5), mode, f(0.01))
                np.testing.assert_allclose(out[i].numpy(), ex, **tol)
                np.testing.assert_allclose(out[2 + i].numpy(), ev, **tol)
        out = td.op("ai.onnx.preview.training.Adagrad", r, tt, *map(put, xs + gs + hs),
                    num_outputs=4, decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)
        for i in range(2):
            ex, eh = ref_adagrad(xs[i], gs[i], hs[i], 0.1, t, f(0.1), f(1e-5), f(0.01))
            np.testing.assert_allclose(out[i].numpy(), ex, **tol)
            np.testing.assert_allclose(out[2 + i].numpy(), eh, **tol)


def test_training_domain_op_arity_errors_name_the_op(client):
    x = td.asarray(np.ones(3, np.float32), client=client)
    r = td.asarray(np.asarray(0.1, np.float32), client=client)
    t = td.asarray(np.asarray(1, np.int64), client=client)
    with pytest.raises(td.TensordError, match="Adam"):
        td.op("ai.onnx.preview.training.Adam", r, t, x, x, x, num_outputs=3)


# ---- checkpoints: parameters and optimiser state to a .npz file, and back
@pytest.mark.parametrize("onnx_op", [False, True])
def test_resumed_training_follows_the_same_trajectory(client, tmp_path, onnx_op):
    """Embedded and through a broker: 3 steps, save, fresh parameters and optimiser loaded from
    the file, 3 more steps == 6 steps without stopping."""
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    b0 = np.zeros(3, np.float32)
    x = td.asarray(rng.standard_normal((8, 4)).astype(np.float32), client=client)
    vg = td.value_and_grad(lambda p: td.mean(td.tanh(x @ p["w"] + p["b"]) ** 2))

    def fresh():
        return {"w": td.asarray(w0, client=client), "b": td.asarray(b0, client=client)}

    def steps(p, opt, n):
        for _ in range(n):
            loss, g = vg(p)
            p = opt.step(p, g, also=loss)
        return p

    p = fresh()
    straight = steps(p, td.optim.Adam(p, lr=0.05, onnx_op=onnx_op), 6)

    p = fresh()
    opt = td.optim.Adam(p, lr=0.05, onnx_op=onnx_op)
    p = steps(p, opt, 3)
    path = str(tmp_path / "ckpt.npz")
    td.optim.save_checkpoint(path, p, opt)
    q = fresh()  # other values, the same structure
    opt2 = td.optim.Adam(q, lr=0.5, onnx_op=onnx_op)
    q = td.optim.load_checkpoint(path, q, opt2)
    assert opt2.steps == 3 and opt2.lr == 0.05
    np.testing.assert_array_equal(q["w"].numpy(), p["w"].numpy())
    resumed = steps(q, opt2, 3)
    for k in ("w", "b"):
        np.testing.assert_allclose(resumed[k].numpy(), straight[k].numpy(), rtol=1e-6, atol=1e-7)


def test_a_checkpoint_for_other_parameters_is_refused_by_name(client, tmp_path):
    p = [td.asarray(np.ones((2, 3), np.float32), client=client)]
    opt = td.optim.Momentum(p, lr=0.1)
    path = str(tmp_path / "c.npz")
    td.optim.save_checkpoint(path, p, opt)
    with pytest.raises(ValueError, match=r"param.0 has shape \(2, 3\)"):
        td.optim.load_checkpoint(path, [td.asarray(np.ones((3, 2), np.float32), client=client)])
    with pytest.raises(ValueError, match="1 parameters, 2 given"):
        td.optim.load_checkpoint(path, p + p)
    with pytest.raises(ValueError, match="Momentum state, this is Adam"):
        td.optim.load_checkpoint(path, p, td.optim.Adam(p))
