"""Two models from different sources on two devices, chained: an ONNX file exported from
PyTorch on one device, a network written with tensord.nn on the other. The activations move
between the devices inside the engine, not through Python.

    TENSORD_CPU_DEVICES=2 PYTHONPATH=build/python python3 examples/python/two_models.py
"""
import os
import tempfile

import numpy as np
import torch

import tensord as td
import tensord.nn as nn


def export_encoder(path):
    torch.manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 32))
    enc.eval()
    torch.onnx.export(enc, torch.randn(1, 3, 16, 16), path, input_names=["image"],
                      output_names=["features"], dynamic_axes={"image": {0: "n"}}, opset_version=13)
    return enc


class Head:
    """A classifier head written with tensord.nn, its weights on `device`."""

    def __init__(self, device, rng):
        self.w1 = td.asarray(rng.standard_normal((64, 32)).astype(np.float32) * 0.1, device=device)
        self.b1 = td.zeros((64,), td.float32, device=device)
        self.g = td.ones((64,), td.float32, device=device)
        self.w2 = td.asarray(rng.standard_normal((10, 64)).astype(np.float32) * 0.1, device=device)

    def __call__(self, x):
        h = nn.gelu(nn.linear(x, self.w1, self.b1))
        h = nn.layer_norm(h, (64,), self.g)
        return nn.softmax(nn.linear(h, self.w2), axis=-1)


def main():
    devices = td.devices()
    first, second = devices[0], devices[-1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "encoder.onnx")
        enc = export_encoder(path)
        encoder = td.load(path, device=first)  # model 1: from PyTorch, via ONNX
    head = Head(second, np.random.default_rng(1))  # model 2: written with tensord.nn

    images = np.random.default_rng(2).standard_normal((4, 3, 16, 16)).astype(np.float32)
    x = td.asarray(images, device=first)
    before = td.default_client().stats()
    probs = head(encoder(x).to(second))  # chained: cpu:0 -> cpu:1 inside the engine
    result = probs.numpy()
    after = td.default_client().stats()
    print(f"encoder on {encoder.device}, head on {probs.device}")
    print("host transfers during the chain: uploads", after["uploads"] - before["uploads"],
          "downloads", after["downloads"] - before["downloads"],
          "(device copies", after["copies"] - before["copies"], ")")
    print("predictions:", result.argmax(axis=1))
    np.testing.assert_allclose(result.sum(axis=1), 1.0, rtol=1e-5)
    with torch.no_grad():
        f = enc(torch.from_numpy(images)).numpy()
    np.testing.assert_allclose(np.asarray(encoder(images)), f, rtol=1e-4, atol=1e-5)
    print("encoder matches PyTorch")


if __name__ == "__main__":
    main()
