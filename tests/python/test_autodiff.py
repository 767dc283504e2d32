"""Gradient rules (issue 34) against PyTorch autograd on random inputs.

Every case computes y = op(inputs) in tensord and in torch, and the gradient of sum(y * r) (r a
random cotangent, so every output element's gradient matters) with respect to each float
input. Error measure: max |g_td - g_torch| / max |g_torch| per input, at most 1e-4 in float32
and 1e-10 in float64. Run on the `client` fixture's cpu:0 (embedded and through a broker), and
on opencl:0 in a process of its own (PoCL; the tiers run with TENSORD_OPENCL=0), as
`python3 test_autodiff.py opencl:0`.
"""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

import tensord as td
from tensord._core import _ints, _like

torch = pytest.importorskip("torch") if __name__ != "__main__" else __import__("torch")
F = torch.nn.functional


def _i(ref, *v):
    return _ints(ref, v)


def _conv_td(x, w, b=None, **attrs):
    return td.op("Conv", x, w, b, **attrs) if b is not None else td.op("Conv", x, w, **attrs)


# LSTM/GRU (unrolled by the gradient) against torch.lstm / torch.gru: ONNX stacks the gates
# i, o, f, c (LSTM) and z, r, h (GRU); torch i, f, g, o and r, z, n. torch's GRU is ONNX's
# linear_before_reset=1; the linear_before_reset=0 case is written out in torch ops.
def _blocks(w, order, n):
    h = w.shape[0] // n
    return torch.cat([w[k * h:(k + 1) * h] for k in order], 0)


def _torch_rnn(kind, x, W, R, B, h0, c0=None):
    n, order = (4, (0, 2, 3, 1)) if kind == "lstm" else (3, (1, 0, 2))
    D = W.shape[0]
    params = []
    for d in range(D):
        h = R.shape[2]
        params += [_blocks(W[d], order, n), _blocks(R[d], order, n),
                   _blocks(B[d, :n * h], order, n), _blocks(B[d, n * h:], order, n)]
    fn = torch.lstm if kind == "lstm" else torch.gru
    hx = (h0, c0) if kind == "lstm" else h0
    y = fn(x, hx, params, True, 1, 0.0, False, D == 2, False)[0]
    s, b = x.shape[0], x.shape[1]
    return y.reshape(s, b, D, -1).permute(0, 2, 1, 3)


def _torch_gru_lbr0(x, W, R, B, h0):
    h = h0[0]
    H = R.shape[2]
    ys = []
    for t in range(x.shape[0]):
        xw = x[t] @ W[0].T + B[0, :3 * H]
        rz = h @ R[0, :2 * H].T + B[0, 3 * H:5 * H]
        z = torch.sigmoid(xw[:, :H] + rz[:, :H])
        r = torch.sigmoid(xw[:, H:2 * H] + rz[:, H:])
        hh = torch.tanh(xw[:, 2 * H:] + (r * h) @ R[0, 2 * H:].T + B[0, 5 * H:])
        h = (1 - z) * hh + z * h
        ys.append(h)
    return torch.stack(ys, 0).unsqueeze(1)


# (name, input specs, tensord fn, torch fn). An input spec: (shape, kind) with kind "f" random
# normal, "p" positive, "w" positive and not differentiated (loss weights), "i:N" integer indices in [0, N), "lab:N[:ignore]" labels.
CASES = [
    ("Add", [((3, 4), "f"), ((4,), "f")], lambda a, b: a + b, lambda a, b: a + b),
    ("Add_bcast", [((2, 1, 4), "f"), ((3, 1), "f")], lambda a, b: a + b, lambda a, b: a + b),
    ("Sub", [((3, 4), "f"), ((3, 1), "f")], lambda a, b: a - b, lambda a, b: a - b),
    ("Mul", [((2, 3, 4), "f"), ((3, 4), "f")], lambda a, b: a * b, lambda a, b: a * b),
    ("Div", [((3, 4), "f"), ((1, 4), "p")], lambda a, b: a / b, lambda a, b: a / b),
    ("Pow", [((3, 4), "p"), ((4,), "f")], lambda a, b: td.op("Pow", a, b), torch.pow),
    ("Neg", [((3, 4), "f")], lambda a: -a, lambda a: -a),
    ("Exp", [((3, 4), "f")], td.exp, torch.exp),
    ("Log", [((3, 4), "p")], td.log, torch.log),
    ("Sqrt", [((3, 4), "p")], td.sqrt, torch.sqrt),
    ("Abs", [((3, 4), "f")], td.abs, torch.abs),
    ("Relu", [((3, 4), "f")], lambda a: td.op("Relu", a), torch.relu),
    ("Sigmoid", [((3, 4), "f")], lambda a: td.op("Sigmoid", a), torch.sigmoid),
    ("Tanh", [((3, 4), "f")], td.tanh, torch.tanh),
    ("MatMul", [((3, 4), "f"), ((4, 5), "f")], td.matmul, torch.matmul),
    ("MatMul_batch", [((2, 3, 4), "f"), ((4, 5), "f")], td.matmul, torch.matmul),
    ("MatMul_bb", [((2, 1, 3, 4), "f"), ((3, 4, 2), "f")], td.matmul, torch.matmul),
    ("MatMul_vec_mat", [((4,), "f"), ((4, 5), "f")], td.matmul, torch.matmul),
    ("MatMul_mat_vec", [((3, 4), "f"), ((4,), "f")], td.matmul, torch.matmul),
    ("Gemm", [((3, 4), "f"), ((4, 5), "f"), ((5,), "f")],
     lambda a, b, c: td.op("Gemm", a, b, c, alpha=0.5, beta=2.0),
     lambda a, b, c: 0.5 * a @ b + 2.0 * c),
    ("Gemm_trans", [((4, 3), "f"), ((5, 4), "f"), ((3, 5), "f")],
     lambda a, b, c: td.op("Gemm", a, b, c, transA=1, transB=1),
     lambda a, b, c: a.T @ b.T + c),
    ("Gemm_noC", [((3, 4), "f"), ((5, 4), "f")],
     lambda a, b: td.op("Gemm", a, b, transB=1), lambda a, b: a @ b.T),
    ("ReduceSum", [((3, 4, 5), "f")], lambda a: td.op("ReduceSum", a, _i(a, 1), keepdims=0),
     lambda a: a.sum(1)),
    ("ReduceSum_all", [((3, 4), "f")], lambda a: td.op("ReduceSum", a, keepdims=0),
     lambda a: a.sum()),
    ("ReduceMean", [((3, 4, 5), "f")], lambda a: td.op("ReduceMean", a, axes=[0, -1]),
     lambda a: a.mean((0, 2), keepdim=True)),
    ("Softmax", [((3, 5), "f")], lambda a: td.op("Softmax", a, axis=-1),
     lambda a: torch.softmax(a, -1)),
    ("LogSoftmax", [((3, 5, 2), "f")], lambda a: td.op("LogSoftmax", a, axis=1),
     lambda a: torch.log_softmax(a, 1)),
    ("Reshape", [((3, 4), "f")], lambda a: td.op("Reshape", a, _i(a, 2, 6)),
     lambda a: a.reshape(2, 6)),
    ("Transpose", [((2, 3, 4), "f")], lambda a: td.op("Transpose", a, perm=[2, 0, 1]),
     lambda a: a.permute(2, 0, 1)),
    ("Flatten", [((2, 3, 4), "f")], lambda a: td.op("Flatten", a, axis=2),
     lambda a: a.reshape(6, 4)),
    ("Concat", [((2, 3), "f"), ((2, 1), "f"), ((2, 2), "f")],
     lambda a, b, c: td.op("Concat", a, b, c, axis=1), lambda a, b, c: torch.cat([a, b, c], 1)),
    ("Slice", [((5, 6), "f")], lambda a: td.op("Slice", a, _i(a, 1, -4), _i(a, 4, 100)),
     lambda a: a[1:4, 2:]),
    ("Slice_steps", [((5, 6), "f")],
     lambda a: td.op("Slice", a, _i(a, 4, 0), _i(a, -100, 6), _i(a, 0, 1), _i(a, -2, 3)),
     lambda a: a.flip(0)[0::2, 0::3]),
    ("Gather", [((5, 3), "f"), ((4,), "i:5")], lambda a, i: td.op("Gather", a, i, axis=0),
     lambda a, i: a[i]),
    ("Gather_axis1", [((2, 5, 3), "f"), ((2, 2), "i:5")],
     lambda a, i: td.op("Gather", a, i, axis=1), lambda a, i: a[:, i]),
    ("Conv", [((2, 3, 7, 7), "f"), ((4, 3, 3, 3), "f"), ((4,), "f")],
     lambda x, w, b: _conv_td(x, w, b, pads=[1, 1, 1, 1]),
     lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    ("Conv_stride_dil", [((2, 2, 9, 8), "f"), ((3, 2, 3, 2), "f")],
     lambda x, w: _conv_td(x, w, strides=[2, 2], dilations=[2, 1], pads=[1, 0, 1, 0]),
     lambda x, w: F.conv2d(x, w, stride=2, dilation=(2, 1), padding=(1, 0))),
    ("Conv_group", [((1, 4, 6, 6), "f"), ((6, 2, 3, 3), "f")],
     lambda x, w: _conv_td(x, w, group=2, strides=[2, 2]),
     lambda x, w: F.conv2d(x, w, groups=2, stride=2)),
    ("MaxPool", [((2, 3, 6, 6), "f")], lambda x: td.op("MaxPool", x, kernel_shape=[2, 2],
                                                      strides=[2, 2]),
     lambda x: F.max_pool2d(x, 2)),
    ("MaxPool_overlap", [((1, 2, 7, 7), "f")],
     lambda x: td.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     lambda x: F.max_pool2d(x, 3, 2, 1)),
    ("AveragePool", [((2, 3, 6, 6), "f")],
     lambda x: td.op("AveragePool", x, kernel_shape=[2, 2], strides=[2, 2]),
     lambda x: F.avg_pool2d(x, 2)),
    ("AveragePool_pad", [((1, 2, 5, 5), "f")],
     lambda x: td.op("AveragePool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    ("AveragePool_incl", [((1, 2, 5, 5), "f")],
     lambda x: td.op("AveragePool", x, kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                     count_include_pad=1),
     lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=True)),
    ("GlobalAveragePool", [((2, 3, 4, 5), "f")], lambda x: td.op("GlobalAveragePool", x),
     lambda x: x.mean((2, 3), keepdim=True)),
    ("SoftmaxCrossEntropyLoss", [((6, 5), "f"), ((6,), "lab:5")],
     lambda x, t: td.op("SoftmaxCrossEntropyLoss", x, t), lambda x, t: F.cross_entropy(x, t)),
    ("SoftmaxCrossEntropyLoss_w_ignore", [((6, 5, 3), "f"), ((6, 3), "lab:5:2"), ((5,), "w")],
     lambda x, t, w: td.op("SoftmaxCrossEntropyLoss", x, t, w, ignore_index=2),
     lambda x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=2)),
    ("SoftmaxCrossEntropyLoss_sum", [((4, 3), "f"), ((4,), "lab:3")],
     lambda x, t: td.op("SoftmaxCrossEntropyLoss", x, t, reduction="sum"),
     lambda x, t: F.cross_entropy(x, t, reduction="sum")),
    ("NegativeLogLikelihoodLoss_none", [((4, 3), "f"), ((4,), "lab:3")],
     lambda x, t: td.op("NegativeLogLikelihoodLoss", x, t, reduction="none"),
     lambda x, t: F.nll_loss(x, t, reduction="none")),
    ("NegativeLogLikelihoodLoss_w", [((5, 4), "f"), ((5,), "lab:4"), ((4,), "w")],
     lambda x, t, w: td.op("NegativeLogLikelihoodLoss", x, t, w),
     lambda x, t, w: F.nll_loss(x, t, weight=w)),
    ("Reciprocal", [((3, 4), "p")], lambda a: td.op("Reciprocal", a), torch.reciprocal),
    ("LeakyRelu", [((3, 4), "f")], lambda a: td.op("LeakyRelu", a, alpha=0.25),
     lambda a: F.leaky_relu(a, 0.25)),
    ("Erf", [((3, 4), "f")], lambda a: td.op("Erf", a), torch.erf),
    ("Where", [((3, 4), "f"), ((4,), "f")], lambda a, b: td.op("Where", a > 0.0, a, b),
     lambda a, b: torch.where(a > 0, a, b)),
    ("Clip", [((3, 4), "f")],
     lambda a: td.op("Clip", a, _like(a, -0.5, a.dtype), _like(a, 0.5, a.dtype)),
     lambda a: torch.clamp(a, -0.5, 0.5)),
    ("Split", [((2, 5), "f")],
     lambda a: (lambda s: td.op("Concat", s[1], s[0] * 2.0, axis=1))(
         td.op("Split", a, _i(a, 2, 3), axis=1, num_outputs=2)),
     lambda a: (lambda s: torch.cat([s[1], s[0] * 2.0], 1))(torch.split(a, [2, 3], 1))),
    ("Pad", [((3, 4), "f")], lambda a: td.op("Pad", a, _i(a, 1, 0, 2, 1)),
     lambda a: F.pad(a, (0, 1, 1, 2))),
    ("LayerNormalization", [((4, 6), "f"), ((6,), "f"), ((6,), "f")],
     lambda x, w, b: td.op("LayerNormalization", x, w, b, epsilon=1e-5),
     lambda x, w, b: F.layer_norm(x, (6,), w, b, 1e-5)),
    ("LayerNormalization_axis1", [((2, 3, 4), "f"), ((3, 4), "f")],
     lambda x, w: td.op("LayerNormalization", x, w, axis=1, epsilon=1e-3),
     lambda x, w: F.layer_norm(x, (3, 4), w, None, 1e-3)),
    ("BatchNormalization_train", [((4, 3, 5, 5), "f"), ((3,), "f"), ((3,), "f"), ((3,), "w"),
                                  ((3,), "w")],
     lambda x, w, b, m, v: td.op("BatchNormalization", x, w, b, m, v, training_mode=1,
                                 num_outputs=3)[0],
     lambda x, w, b, m, v: F.batch_norm(x, m.clone(), v.clone(), w, b, training=True)),
    ("BatchNormalization_eval", [((4, 3, 5), "f"), ((3,), "f"), ((3,), "f"), ((3,), "w"),
                                 ((3,), "w")],
     lambda x, w, b, m, v: td.op("BatchNormalization", x, w, b, m, v),
     lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False)),
    ("Sin", [((3, 4), "f")], lambda a: td.op("Sin", a), torch.sin),
    ("Cos", [((3, 4), "f")], lambda a: td.op("Cos", a), torch.cos),
    ("Softplus", [((3, 4), "f")], lambda a: td.op("Softplus", a), F.softplus),
    ("Elu", [((3, 4), "f")], lambda a: td.op("Elu", a, alpha=0.5), lambda a: F.elu(a, 0.5)),
    ("Gelu", [((3, 4), "f")], lambda a: td.op("Gelu", a), F.gelu),
    ("Max", [((3, 4), "f"), ((4,), "f")], lambda a, b: td.op("Max", a, b), torch.maximum),
    ("Min", [((3, 4), "f"), ((3, 1), "f")], lambda a, b: td.op("Min", a, b), torch.minimum),
    ("Chain_MLP", [((8, 6), "f"), ((6, 5), "f"), ((5,), "f"), ((8,), "lab:5")],
     lambda x, w, b, t: td.op("SoftmaxCrossEntropyLoss",
                              td.op("Relu", td.matmul(td.tanh(x), w) + b), t),
     lambda x, w, b, t: F.cross_entropy(torch.relu(torch.tanh(x) @ w + b), t)),
    ("ConvTranspose", [((2, 3, 5, 5), "f"), ((3, 4, 3, 3), "f"), ((4,), "f")],
     lambda x, w, b: td.op("ConvTranspose", x, w, b),
     lambda x, w, b: F.conv_transpose2d(x, w, b)),
    ("ConvTranspose_strided", [((2, 4, 4, 5), "f"), ((4, 2, 3, 2), "f")],
     lambda x, w: td.op("ConvTranspose", x, w, strides=[2, 3], pads=[1, 0, 1, 1],
                        output_padding=[1, 2]),
     lambda x, w: F.conv_transpose2d(x, w, stride=(2, 3), padding=(1, 0), output_padding=(1, 2))
     [:, :, :, :-1]),
    ("ConvTranspose_group_dilated", [((1, 4, 5, 4), "f"), ((4, 3, 2, 2), "f"), ((6,), "f")],
     lambda x, w, b: td.op("ConvTranspose", x, w, b, group=2, dilations=[2, 1]),
     lambda x, w, b: F.conv_transpose2d(x, w, b, groups=2, dilation=(2, 1))),
    ("LSTM_bidirectional", [((5, 3, 4), "f"), ((2, 12, 4), "f"), ((2, 12, 3), "f"),
                            ((2, 24), "f"), ((2, 3, 3), "f"), ((2, 3, 3), "f")],
     lambda x, w, r, b, h, c: td.op("LSTM", x, w, r, b, None, h, c, hidden_size=3,
                                    direction="bidirectional", num_outputs=3)[0],
     lambda x, w, r, b, h, c: _torch_rnn("lstm", x, w, r, b, h, c)),
    ("LSTM_last_state", [((4, 2, 3), "f"), ((1, 8, 3), "f"), ((1, 8, 2), "f"), ((1, 16), "f")],
     lambda x, w, r, b: td.op("LSTM", x, w, r, b, hidden_size=2, num_outputs=3)[1],
     lambda x, w, r, b: _torch_rnn("lstm", x, w, r, b, torch.zeros(1, 2, 2, dtype=x.dtype),
                                   torch.zeros(1, 2, 2, dtype=x.dtype))[-1]),
    ("GRU_reverse_lbr1", [((5, 3, 4), "f"), ((1, 9, 4), "f"), ((1, 9, 3), "f"),
                          ((1, 18), "f"), ((1, 3, 3), "f")],
     lambda x, w, r, b, h: td.op("GRU", x, w, r, b, None, h, hidden_size=3, direction="reverse",
                                 linear_before_reset=1, num_outputs=2)[0],
     lambda x, w, r, b, h: _torch_rnn("gru", x.flip(0), w, r, b, h).flip(0)),
    ("GRU_lbr0", [((4, 2, 3), "f"), ((1, 6, 3), "f"), ((1, 6, 2), "f"), ((1, 12), "f"),
                  ((1, 2, 2), "f")],
     lambda x, w, r, b, h: td.op("GRU", x, w, r, b, None, h, hidden_size=2, num_outputs=2)[0],
     _torch_gru_lbr0),
]

TOL = {"float32": 1e-4, "float64": 1e-10}


def _inputs(specs, dtype, seed):
    rng = np.random.default_rng(seed)
    out = []
    for shape, kind in specs:
        if kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif kind in ("p", "w"):
            out.append(rng.uniform(0.5, 2.0, shape).astype(dtype))
        elif kind.startswith("i:"):
            out.append(rng.integers(0, int(kind[2:]), shape).astype(np.int64))
        else:  # lab:N[:ignore]: labels, with at least one ignored label if asked
            parts = kind.split(":")
            lab = rng.integers(0, int(parts[1]), shape).astype(np.int64)
            if len(parts) > 2:
                lab.flat[0] = int(parts[2])
            out.append(lab)
    return out


def check_case(case, dtype, device, client):
    name, specs, f_td, f_torch = case
    xs = _inputs(specs, dtype, seed=zlib.crc32(name.encode()) % 1000)
    floats = [i for i, (_, k) in enumerate(specs) if k in ("f", "p")]
    tx = [torch.tensor(x, requires_grad=i in floats) for i, x in enumerate(xs)]
    ty = f_torch(*tx)
    r = np.random.default_rng(7).standard_normal(tuple(ty.shape)).astype(dtype)
    (ty * torch.tensor(r)).sum().backward()
    dx = [td.asarray(x, device=device, client=client) for x in xs]
    rt = td.asarray(r, device=device, client=client)

    def loss(*ws):
        args = list(dx)
        for i, w in zip(floats, ws):
            args[i] = w
        return td.sum(f_td(*args) * rt)

    gs = td.grad(loss, argnums=tuple(range(len(floats))))(*[dx[i] for i in floats])
    errs = []
    for i, g in zip(floats, gs):
        ref = tx[i].grad.numpy()
        got = np.asarray(g.numpy())
        assert got.shape == ref.shape, (name, i, got.shape, ref.shape)
        errs.append(float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)))
    return max(errs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_matches_torch(client, case, dtype):
    err = check_case(case, dtype, "cpu:0", client)
    assert err <= TOL[dtype], f"{case[0]} {dtype}: max relative error {err:.3g}"


@pytest.mark.skipif(os.environ.get("TENSORD_PY_MODE") == "remote",
                    reason="no client of its own: runs once, under python_embedded")
def test_rules_on_opencl():
    """Every rule on opencl:0 (PoCL), in a process of its own with OpenCL enabled."""
    env = dict(os.environ)
    env.pop("TENSORD_OPENCL", None)
    env.pop("TENSORD_ADDRESS", None)
    r = subprocess.run([sys.executable, __file__, "opencl:0"], env=env, capture_output=True,
                       text=True, timeout=600)
    if "SKIP" in r.stdout:
        if os.environ.get("CI") == "true":
            pytest.fail("CI without an opencl:0 device: " + r.stdout)
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout + r.stderr


def test_op_without_rule_is_refused_by_name(client):
    x = td.asarray(np.ones((3,), np.float32), client=client)
    with pytest.raises(td.TensordError, match="no gradient rule for op 'Cosh'"):
        td.grad(lambda a: td.sum(td.op("Cosh", a)))(x)


def test_rnn_forms_the_gradient_does_not_take_are_refused_by_name(client):
    rng = np.random.default_rng(4)
    x = td.asarray(rng.standard_normal((3, 2, 4)).astype(np.float32), client=client)
    w = td.asarray(rng.standard_normal((1, 8, 4)).astype(np.float32), client=client)
    r = td.asarray(rng.standard_normal((1, 8, 2)).astype(np.float32), client=client)
    with pytest.raises(td.TensordError, match="LSTM '.*': clip is not supported"):
        td.grad(lambda a: td.sum(td.op("LSTM", a, w, r, hidden_size=2, clip=1.0,
                                       num_outputs=3)[0]))(x)


def test_dropout_gradient_uses_its_mask_or_its_seed(client):
    xv = np.random.default_rng(2).standard_normal((20, 30)).astype(np.float32)
    x = td.asarray(xv, client=client)
    ratio, train = _like(x, 0.25, np.float32), _like(x, True, np.bool_)

    def with_mask(a):
        y, m = td.op("Dropout", a, ratio, train, num_outputs=2, seed=7)
        return td.sum(y * y), m

    g, mask = td.grad(with_mask, has_aux=True)(x)
    m = mask.numpy().astype(np.float32)
    assert 0.5 < m.mean() < 0.95
    np.testing.assert_allclose(g.numpy(), 2 * xv * m / 0.75 ** 2, rtol=1e-5, atol=1e-6)
    # The mask not kept: recomputed from the seed (the same mask).
    g2 = td.grad(lambda a: td.sum(td.op("Dropout", a, ratio, train, seed=7) * 3.0))(x)
    np.testing.assert_allclose(g2.numpy(), 3 * m / 0.75, rtol=1e-6)
    # Inference mode: the identity.
    g3 = td.grad(lambda a: td.sum(td.op("Dropout", a, ratio) * 3.0))(x)
    np.testing.assert_allclose(g3.numpy(), np.full_like(xv, 3.0))
    # Neither a mask nor a seed: refused, saying why.
    with pytest.raises(td.TensordError, match="mask"):
        td.grad(lambda a: td.sum(td.op("Dropout", a, ratio, train)))(x)


def test_unrelated_argument_gets_zeros_and_value_and_grad(client):
    x = td.asarray(np.arange(3, dtype=np.float32), client=client)
    y = td.asarray(np.ones((2, 2), np.float32), client=client)
    (v, g) = td.value_and_grad(lambda a, b: td.sum(a * a), argnums=(0, 1))(x, y)
    assert float(v) == 5.0
    np.testing.assert_array_equal(g[0].numpy(), [0, 2, 4])
    np.testing.assert_array_equal(g[1].numpy(), np.zeros((2, 2)))


def test_pytree_parameters(client):
    p = {"w": td.asarray(np.full((2, 2), 2.0, np.float32), client=client),
         "b": [td.asarray(np.ones(2, np.float32), client=client)]}
    x = td.asarray(np.eye(2, dtype=np.float32), client=client)
    g = td.grad(lambda q: td.sum(x @ q["w"] + q["b"][0]))(p)
    np.testing.assert_array_equal(g["w"].numpy(), np.ones((2, 2)))
    np.testing.assert_array_equal(g["b"][0].numpy(), [2, 2])


if __name__ == "__main__":
    device = sys.argv[1]
    c = td.Client.local()
    if device not in [str(d) for d in c.devices()]:
        print("SKIP no", device, "device:", [str(d) for d in c.devices()])
        sys.exit(0)
    bad = 0
    for case in CASES:
        for dtype in ("float32", "float64"):
            try:
                err = check_case(case, dtype, device, c)
                ok = err <= TOL[dtype]
                print(f"{'ok ' if ok else 'BAD'} {case[0]} {dtype} {err:.3g}")
            except Exception as e:  # noqa: BLE001 - reported, counted
                ok = False
                print(f"ERR {case[0]} {dtype}: {e}")
            bad += not ok
    sys.exit(1 if bad else 0)
