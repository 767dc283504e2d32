"""Time per training step: tensord (td.value_and_grad + td.optim.Adam, parameters on the device)
beside PyTorch eager (autograd + torch.optim.Adam) on the same CPU, model, batch and threads.

usage: /usr/bin/python3 bench/train.py [--models cnn,transformer] [--steps N] [--warmup W]
           [--rounds R] [--threads T] [--device cpu:0] [--json]

Models (the same math written in both):
  cnn          the digits CNN of examples/python/train_digits.py: Conv 1->16 3x3, Relu, MaxPool,
               Conv 16->32 3x3, Relu, MaxPool, Gemm 128->10; batch 256 of 8x8 images
  transformer  a 2-layer pre-norm transformer encoder classifier: embedding (vocab 1000, d 128),
               4 heads, FFN 512 (Gelu), mean over 64 tokens, Gemm 128->10; batch 32

A step is forward, backward and the Adam update on one batch drawn from data already on the
device (tensord: a Gather of the batch on the device; PyTorch: an index of a tensor), and the
loss read back to the host (a float, as a training loop that logs it does). Each round times
`--steps` steps after `--warmup` untimed ones, in a process of its own (neither runtime's
threads linger in the other's); rounds alternate tensord and PyTorch and the median is
reported. PyTorch's matrix products use the system BLAS: install Debian's libopenblas0-openmp
(scripts/setup.sh does), since with the reference libblas3 they run at about 2 GFLOP/s. Threads: TENSORD_NUM_THREADS and torch.set_num_threads both set to T
(default: the machine's cores). Prints ms/step and the ratio tensord / PyTorch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

VOCAB, SEQ, DM, HEADS, FFN, CLASSES = 1000, 64, 128, 4, 512, 10


def init(model, seed=0):
    rng = np.random.default_rng(seed)

    def he(*shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    o = lambda *s: np.ones(s, np.float32)  # noqa: E731
    if model == "cnn":
        return {"c1": he(16, 1, 3, 3, fan_in=9), "cb1": z(16), "c2": he(32, 16, 3, 3, fan_in=144),
                "cb2": z(32), "w": he(128, 10, fan_in=128), "b": z(10)}
    p = {"emb": (rng.standard_normal((VOCAB, DM)) * 0.02).astype(np.float32)}
    for layer in range(2):
        k = f"l{layer}."
        p.update({k + "ln1w": o(DM), k + "ln1b": z(DM), k + "wqkv": he(DM, 3 * DM, fan_in=DM),
                  k + "bqkv": z(3 * DM), k + "wo": he(DM, DM, fan_in=DM), k + "bo": z(DM),
                  k + "ln2w": o(DM), k + "ln2b": z(DM), k + "w1": he(DM, FFN, fan_in=DM),
                  k + "b1": z(FFN), k + "w2": he(FFN, DM, fan_in=FFN), k + "b2": z(DM)})
    p.update({"lnw": o(DM), "lnb": z(DM), "w": he(DM, CLASSES, fan_in=DM), "b": z(CLASSES)})
    return p


def data(model, n, seed=1):
    rng = np.random.default_rng(seed)
    if model == "cnn":
        return (rng.random((n, 1, 8, 8), dtype=np.float32),
                rng.integers(0, CLASSES, n).astype(np.int64))
    return (rng.integers(0, VOCAB, (n, SEQ)).astype(np.int64),
            rng.integers(0, CLASSES, n).astype(np.int64))


BATCH = {"cnn": 256, "transformer": 32}


# ---------------------------------------------------------------- tensord
def td_logits(td, model, p, x):
    if model == "cnn":
        h = td.op("Relu", td.op("Conv", x, p["c1"], p["cb1"], pads=[1, 1, 1, 1]))
        h = td.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
        h = td.op("Relu", td.op("Conv", h, p["c2"], p["cb2"], pads=[1, 1, 1, 1]))
        h = td.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
        return td.op("Gemm", td.op("Flatten", h, axis=1), p["w"], p["b"])
    n = x.shape[0]
    dh = DM // HEADS
    h = td.op("Gather", p["emb"], x, axis=0)  # n, SEQ, DM
    for layer in range(2):
        k = f"l{layer}."
        a = td.op("LayerNormalization", h, p[k + "ln1w"], p[k + "ln1b"], axis=-1, epsilon=1e-5)
        qkv = td.op("Add", td.matmul(a, p[k + "wqkv"]), p[k + "bqkv"])  # n, SEQ, 3 DM
        qkv = td.permute_dims(td.reshape(qkv, (n, SEQ, 3, HEADS, dh)), (2, 0, 3, 1, 4))
        q, kk, v = qkv[0], qkv[1], qkv[2]  # n, HEADS, SEQ, dh
        s = td.multiply(td.matmul(q, td.permute_dims(kk, (0, 1, 3, 2))), 1.0 / np.sqrt(dh))
        att = td.matmul(td.op("Softmax", s, axis=-1), v)  # n, HEADS, SEQ, dh
        att = td.reshape(td.permute_dims(att, (0, 2, 1, 3)), (n, SEQ, DM))
        h = td.add(h, td.op("Add", td.matmul(att, p[k + "wo"]), p[k + "bo"]))
        a = td.op("LayerNormalization", h, p[k + "ln2w"], p[k + "ln2b"], axis=-1, epsilon=1e-5)
        f = td.op("Gelu", td.op("Add", td.matmul(a, p[k + "w1"]), p[k + "b1"]))
        h = td.add(h, td.op("Add", td.matmul(f, p[k + "w2"]), p[k + "b2"]))
    h = td.op("LayerNormalization", h, p["lnw"], p["lnb"], axis=-1, epsilon=1e-5)
    return td.op("Gemm", td.mean(h, axis=1), p["w"], p["b"])


def run_tensord(model, steps, warmup, device):
    import tensord as td
    client = td.Client.local()
    put = lambda a: td.asarray(a, device=device, client=client)  # noqa: E731
    params = {k: put(v) for k, v in init(model).items()}
    xs, ys = data(model, 4096 if model == "cnn" else 1024)
    x_all, y_all = put(xs), put(ys)
    opt = td.optim.Adam(params, lr=1e-3)
    vg = td.value_and_grad(
        lambda p, xb, yb: td.op("SoftmaxCrossEntropyLoss", td_logits(td, model, p, xb), yb))
    rng = np.random.default_rng(2)
    b = BATCH[model]

    def step(params):
        idx = put(rng.integers(0, len(xs), b).astype(np.int64))
        loss, grads = vg(params, td.op("Gather", x_all, idx, axis=0),
                         td.op("Gather", y_all, idx, axis=0))
        params = opt.step(params, grads, also=loss)
        return params, float(loss)

    for _ in range(warmup):
        params, loss = step(params)
    t0 = time.perf_counter()
    for _ in range(steps):
        params, loss = step(params)
    return (time.perf_counter() - t0) / steps, loss


# ---------------------------------------------------------------- PyTorch
def torch_logits(torch, model, p, x):
    F = torch.nn.functional
    if model == "cnn":
        h = F.max_pool2d(F.relu(F.conv2d(x, p["c1"], p["cb1"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["c2"], p["cb2"], padding=1)), 2)
        return torch.addmm(p["b"], h.flatten(1), p["w"])
    n = x.shape[0]
    dh = DM // HEADS
    h = F.embedding(x, p["emb"])
    for layer in range(2):
        k = f"l{layer}."
        a = F.layer_norm(h, (DM,), p[k + "ln1w"], p[k + "ln1b"], 1e-5)
        qkv = (a @ p[k + "wqkv"] + p[k + "bqkv"]).reshape(n, SEQ, 3, HEADS, dh)
        q, kk, v = qkv.permute(2, 0, 3, 1, 4)
        s = (q @ kk.transpose(-1, -2)) * (1.0 / np.sqrt(dh))
        att = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(n, SEQ, DM)
        h = h + (att @ p[k + "wo"] + p[k + "bo"])
        a = F.layer_norm(h, (DM,), p[k + "ln2w"], p[k + "ln2b"], 1e-5)
        h = h + (F.gelu(a @ p[k + "w1"] + p[k + "b1"]) @ p[k + "w2"] + p[k + "b2"])
    h = F.layer_norm(h, (DM,), p["lnw"], p["lnb"], 1e-5)
    return torch.addmm(p["b"], h.mean(1), p["w"])


def run_torch(model, steps, warmup):
    import torch
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init(model).items()}
    xs, ys = data(model, 4096 if model == "cnn" else 1024)
    x_all, y_all = torch.from_numpy(xs), torch.from_numpy(ys)
    opt = torch.optim.Adam(params.values(), lr=1e-3)
    rng = np.random.default_rng(2)
    b = BATCH[model]

    def step():
        idx = torch.from_numpy(rng.integers(0, len(xs), b).astype(np.int64))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(torch_logits(torch, model, params, x_all[idx]),
                                                 y_all[idx])
        loss.backward()
        opt.step()
        return float(loss)

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    return (time.perf_counter() - t0) / steps, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,transformer")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--side", choices=["tensord", "torch"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ["TENSORD_NUM_THREADS"] = str(a.threads)  # read when the engine starts
    if a.side:  # one round of one side, in this process: {"ms": ..., "loss": ...}
        model = a.models
        if a.side == "tensord":
            sec, loss = run_tensord(model, a.steps, a.warmup, a.device)
        else:
            import torch
            torch.set_num_threads(a.threads)
            sec, loss = run_torch(model, a.steps, a.warmup)
        print(json.dumps({"s": sec, "loss": loss}))
        return 0
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False

    def round_of(side, model):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--side", side,
                            "--models", model, "--steps", str(a.steps), "--warmup",
                            str(a.warmup), "--threads", str(a.threads), "--device", a.device],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench/train.py: the {side} round of {model} failed:\n{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])["s"]
    rows = []
    for model in [m for m in a.models.split(",") if m]:
        if model not in BATCH:
            ap.error(f"unknown model '{model}' (cnn, transformer)")
        ts, pt = [], []
        for _ in range(a.rounds):
            ts.append(round_of("tensord", model))
            if have_torch:
                pt.append(round_of("torch", model))
        row = {"model": model, "batch": BATCH[model], "tensord_ms": statistics.median(ts) * 1e3,
               "tensord_rounds_ms": [t * 1e3 for t in ts]}
        if pt:
            row.update({"torch_ms": statistics.median(pt) * 1e3,
                        "torch_rounds_ms": [t * 1e3 for t in pt],
                        "ratio": statistics.median(ts) / statistics.median(pt)})
        rows.append(row)
        if not a.json:
            line = f"{model:12s} batch {BATCH[model]:4d}  tensord {row['tensord_ms']:8.2f} ms/step"
            if pt:
                line += f"  PyTorch {row['torch_ms']:8.2f} ms/step  ratio {row['ratio']:.2f}x"
            print(line, flush=True)
    out = {"threads": a.threads, "device": a.device, "steps": a.steps, "rounds": a.rounds,
           "torch": __import__("torch").__version__ if have_torch else None, "rows": rows}
    if not a.json:
        print(f"(median of {a.rounds} interleaved rounds of {a.steps} steps, {a.threads} threads; "
              f"PyTorch {out['torch']} eager)")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
