"""The zoo's models are the torchvision / PyTorch architectures they claim to be.

For each model, `zoo_dump` writes the zoo graph's weights (named as torchvision's state_dict
keys), its sample input and its output on tensord's cpu reference kernels. This script checks
that the weight names and shapes are exactly torchvision's (every conv kernel, BatchNorm and
Linear, nothing missing or extra), that the parameter count matches, then loads the weights
into the torch model and compares its output with tensord's.

usage: test_zoo_vs_torch.py ZOO_DUMP_EXE [MODEL...]   (mobilenet_v2 resnet50 imdb_lstm)
Exit 77 (skip) when PyTorch/torchvision are not installed.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torchvision
except ImportError as e:
    print(f"SKIP: PyTorch/torchvision not installed ({e})")
    sys.exit(77)


class ImdbLstm(torch.nn.Module):
    """Keras' imdb_lstm example in PyTorch: Embedding(20000, 128) -> LSTM(128) -> Dense(1)."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(20000, 128)
        self.lstm = torch.nn.LSTM(128, 128, batch_first=True)
        self.dense = torch.nn.Linear(128, 1)

    def forward(self, tokens):
        out, _ = self.lstm(self.embedding(tokens))
        return torch.sigmoid(self.dense(out[:, -1, :]))


def onnx_lstm_to_torch(weights):
    """ONNX LSTM W/R/B (gates i, o, f, c) -> torch's weight_ih/hh, bias_ih/hh (i, f, g, o)."""
    def reorder(m):
        i, o, f, c = np.split(m, 4, axis=0)
        return np.concatenate([i, f, c, o], axis=0)

    w, r, b = weights.pop("lstm.W")[0], weights.pop("lstm.R")[0], weights.pop("lstm.B")[0]
    wb, rb = np.split(b, 2)
    weights["lstm.weight_ih_l0"] = reorder(w)
    weights["lstm.weight_hh_l0"] = reorder(r)
    weights["lstm.bias_ih_l0"] = reorder(wb)
    weights["lstm.bias_hh_l0"] = reorder(rb)
    return weights


def torch_model(name):
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2()
    if name == "resnet50":
        return torchvision.models.resnet50()
    if name == "imdb_lstm":
        return ImdbLstm()
    raise SystemExit(f"unknown model {name}")


def check(exe, name):
    with tempfile.TemporaryDirectory() as tmp:
        batch = "3" if name == "imdb_lstm" else "1"  # reviews of different lengths
        out = subprocess.run([exe, name, tmp, "--batch", batch], check=True, capture_output=True,
                             text=True)
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        with open(os.path.join(tmp, "weights.txt")) as f:
            names = [line.strip() for line in f if line.strip()]
        weights = {n: np.load(os.path.join(tmp, n + ".npy")) for n in names}
        x = np.load(os.path.join(tmp, "input.npy"))
        y = np.load(os.path.join(tmp, "output.npy"))

    errors = []
    model = torch_model(name).eval()
    expected_params = sum(p.numel() for p in model.parameters())
    if summary["parameters"] != expected_params:
        errors.append(f"parameter count {summary['parameters']} != torch's {expected_params}")

    if name == "imdb_lstm":
        weights = onnx_lstm_to_torch(weights)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = sorted(set(state) - set(weights))
    extra = sorted(set(weights) - set(state))
    if missing:
        errors.append(f"{len(missing)} torch weights missing from the zoo graph: {missing[:8]}")
    if extra:
        errors.append(f"{len(extra)} zoo weights torch does not have: {extra[:8]}")
    for k in sorted(set(state) & set(weights)):
        if tuple(state[k].shape) != weights[k].shape:
            errors.append(f"{k}: zoo shape {weights[k].shape} != torch {tuple(state[k].shape)}")
    # The brief's structural check, in order: every conv kernel shape.
    torch_convs = [tuple(m.weight.shape) for m in model.modules()
                   if isinstance(m, torch.nn.Conv2d)]
    zoo_convs = [weights[k].shape for k in names if k in state and weights[k].ndim == 4]
    if sorted(torch_convs) != sorted(zoo_convs) or len(torch_convs) != len(zoo_convs):
        errors.append(f"conv kernels differ: {len(zoo_convs)} in the zoo, {len(torch_convs)} in torch")
    if errors:
        return errors

    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                           for k, v in weights.items()}, strict=False)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    scale = float(np.abs(ref).max())
    err = float(np.abs(ref - y).max())
    print(f"{name}: {summary['parameters']:,} parameters, {len(names)} weights match torch; "
          f"output {list(y.shape)} max |tensord - torch| = {err:.3g} (max |torch| {scale:.3g}), "
          f"tensord reference kernels {summary['run_ms']:.0f} ms")
    if y.shape != ref.shape or not np.allclose(y, ref, rtol=1e-3, atol=1e-4 * max(scale, 1.0)):
        errors.append(f"outputs differ: max abs error {err:.3g} at output scale {scale:.3g}")
    return errors


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    exe = sys.argv[1]
    models = sys.argv[2:] or ["imdb_lstm", "mobilenet_v2", "resnet50"]
    torch.manual_seed(0)
    failed = False
    for name in models:
        errors = check(exe, name)
        for e in errors:
            print(f"FAIL {name}: {e}")
        failed |= bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
