"""Train an MLP or a small CNN on scikit-learn's digits (8x8 images, 1,797 samples) with tensord:
gradients from td.value_and_grad, updates from td.optim.Adam (ONNX training-domain semantics),
parameters and optimiser state kept on the device. Checks its own result: exits non-zero below
the accuracy asked for (default 0.97).

    python3 examples/python/train_digits.py --model cnn --device cpu:0
"""
import argparse
import sys
import time

import numpy as np

import tensord as td


def load_split(seed=0, test=450):
    """The digits, scaled to [0, 1], split by a fixed permutation: (x_train, y_train, x_test,
    y_test)."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm]
    return x[test:], y[test:], x[:test], y[:test]


def init_params(model, seed=0):
    rng = np.random.default_rng(seed)

    def he(*shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    if model == "mlp":
        return {"w1": he(64, 128, fan_in=64), "b1": np.zeros(128, np.float32),
                "w2": he(128, 10, fan_in=128), "b2": np.zeros(10, np.float32)}
    return {"c1": he(16, 1, 3, 3, fan_in=9), "cb1": np.zeros(16, np.float32),
            "c2": he(32, 16, 3, 3, fan_in=144), "cb2": np.zeros(32, np.float32),
            "w": he(128, 10, fan_in=128), "b": np.zeros(10, np.float32)}


def logits(model, p, x):
    if model == "mlp":
        h = td.op("Relu", td.op("Gemm", x, p["w1"], p["b1"]))
        return td.op("Gemm", h, p["w2"], p["b2"])
    n = x.shape[0]
    h = td.reshape(x, (n, 1, 8, 8))
    h = td.op("Relu", td.op("Conv", h, p["c1"], p["cb1"], pads=[1, 1, 1, 1]))
    h = td.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])  # 16 x 4 x 4
    h = td.op("Relu", td.op("Conv", h, p["c2"], p["cb2"], pads=[1, 1, 1, 1]))
    h = td.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])  # 32 x 2 x 2
    return td.op("Gemm", td.op("Flatten", h, axis=1), p["w"], p["b"])


def train(model="mlp", device="cpu:0", steps=None, lr=None, batch=256, client=None, seed=0,
          log=None, onnx_op=False):
    """Trains; returns (test accuracy, seconds, final loss, losses). ``onnx_op``: the Adam
    update as one ai.onnx.preview.training.Adam node (else element-wise ops)."""
    steps = steps or {"mlp": 300, "cnn": 150}[model]
    lr = lr or {"mlp": 1e-2, "cnn": 1e-2}[model]
    xtr, ytr, xte, yte = load_split(seed)
    client = client or td.default_client()
    put = lambda a: td.asarray(a, device=device, client=client)  # noqa: E731
    params = {k: put(v) for k, v in init_params(model, seed).items()}
    x_train, y_train = put(xtr), put(ytr)  # uploaded once; batches are gathered on the device
    opt = td.optim.Adam(params, lr=lr, onnx_op=onnx_op)

    def loss_fn(p, xb, yb):
        return td.op("SoftmaxCrossEntropyLoss", logits(model, p, xb), yb)

    vg = td.value_and_grad(loss_fn)
    rng = np.random.default_rng(seed)
    n = len(xtr)
    order, pos = rng.permutation(n), 0
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        if pos + batch > n:
            order, pos = rng.permutation(n), 0
        idx = put(order[pos:pos + batch].astype(np.int64))
        pos += batch
        xb = td.op("Gather", x_train, idx, axis=0)
        yb = td.op("Gather", y_train, idx, axis=0)
        loss, grads = vg(params, xb, yb)
        params = opt.step(params, grads, also=loss)  # one graph per step, on the device
        if step % 50 == 0 or step == steps - 1:
            losses.append(float(loss))  # the only read per logged step: 4 bytes
            if log:
                log(f"step {step}: loss {losses[-1]:.4f}")
    pred = np.argmax(logits(model, params, put(xte)).numpy(), axis=1)
    seconds = time.perf_counter() - t0
    return float(np.mean(pred == yte)), seconds, losses[-1], losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--min-accuracy", type=float, default=0.97)
    ap.add_argument("--onnx-op", action="store_true",
                    help="update with the ai.onnx.preview.training.Adam op")
    a = ap.parse_args()
    acc, sec, loss, _ = train(a.model, a.device, a.steps, log=print, onnx_op=a.onnx_op)
    print(f"{a.model} on {a.device}: test accuracy {acc:.4f}, final loss {loss:.4f}, "
          f"{sec:.1f} s")
    if acc < a.min_accuracy:
        print(f"FAIL: accuracy {acc:.4f} < {a.min_accuracy}")
        sys.exit(1)


if __name__ == "__main__":
    main()
