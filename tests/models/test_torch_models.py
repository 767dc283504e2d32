"""torchvision/PyTorch models exported with torch.onnx.export run on tensord and match PyTorch.

Generates each model (random weights, seeded), exports it to ONNX (opset 13), runs it with
`tensord run` on every present device, and compares with PyTorch's own output (rtol 1e-3).

usage: test_torch_models.py TENSORD_EXE [MODEL...]   (models: mobilenet_v2 resnet50 lstm)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import torch
    import torchvision
except ImportError as e:  # the setup script installs python3-torch and python3-torchvision
    print(f"SKIP: PyTorch/torchvision not installed ({e}); run scripts/setup.sh")
    sys.exit(77)


class LstmClassifier(torch.nn.Module):
    """Embedding -> LSTM -> Dense, as Keras' imdb_lstm example (sequence length 80)."""

    def __init__(self, vocab=2000, embed=64, hidden=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        self.lstm = torch.nn.LSTM(embed, hidden, batch_first=True)
        self.dense = torch.nn.Linear(hidden, 1)

    def forward(self, tokens):
        x = self.embed(tokens)
        out, _ = self.lstm(x)
        return torch.sigmoid(self.dense(out[:, -1, :]))


def build(name):
    torch.manual_seed(0)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(), torch.randn(1, 3, 224, 224)
    if name == "resnet50":
        return torchvision.models.resnet50(), torch.randn(1, 3, 224, 224)
    if name == "lstm":
        return LstmClassifier(), torch.randint(0, 2000, (2, 80), dtype=torch.int64)
    raise SystemExit(f"unknown model {name}")


def randomize_batchnorm(model):
    # Fresh BatchNorm layers have mean 0 / var 1, which hides folding mistakes: make them real.
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def devices(exe):
    out = subprocess.run([exe, "devices", "--json"], capture_output=True, text=True, check=True)
    return [d["name"] for d in json.loads(out.stdout)]


def check(exe, name, workdir):
    model, x = build(name)
    randomize_batchnorm(model)
    model.eval()
    with torch.no_grad():
        ref = model(x).numpy()
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(model, (x,), path, opset_version=13, input_names=["input"],
                      output_names=["output"], do_constant_folding=True)
    np.save(os.path.join(workdir, f"{name}_in.npy"), x.numpy())
    for dev in devices(exe):
        outdir = os.path.join(workdir, f"{name}_{dev.replace(':', '_')}")
        os.makedirs(outdir, exist_ok=True)
        t0 = time.time()
        run = subprocess.run([exe, "run", path, "--input", f"input={workdir}/{name}_in.npy",
                              "--output", outdir, "--device", dev],
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"{name} on {dev}: exit {run.returncode}\n{run.stderr}"
        got = np.load(os.path.join(outdir, "output.npy"))
        assert got.shape == ref.shape, (got.shape, ref.shape)
        scale = float(np.abs(ref).max())
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-5 * max(scale, 1.0),
                                   err_msg=f"{name} on {dev}")
        print(f"{name} on {dev}: matches PyTorch (max abs diff {np.abs(got - ref).max():.3g}, "
              f"output scale {scale:.3g}, {time.time() - t0:.1f} s)")


def main():
    exe = sys.argv[1]
    names = sys.argv[2:] or ["mobilenet_v2", "resnet50", "lstm"]
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            check(exe, name, d)


if __name__ == "__main__":
    main()
