"""NumPy code moved to a tensord device by one line: `xp = tensord` instead of `xp = numpy`.

    PYTHONPATH=build/python python3 examples/python/numpy_to_device.py [--device cpu:1]
"""
import argparse

import numpy as np

import tensord


def standardize_and_score(xp, data, weights, **where):
    x = xp.asarray(data, **where)
    w = xp.asarray(weights, **where)
    z = (x - x.mean(axis=0, keepdims=True)) / (x.std(axis=0, keepdims=True) + 1e-6)
    scores = xp.tanh(z @ w)
    return xp.where(scores > 0, scores, 0.1 * scores).sum(axis=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None, help="a tensord device, e.g. cpu:1")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1000, 64)).astype(np.float32)
    weights = rng.standard_normal((64, 8)).astype(np.float32)

    on_cpu = standardize_and_score(np, data, weights)
    # The one line: the same function with tensord as the array module, on a device.
    on_device = standardize_and_score(tensord, data, weights, device=args.device)

    print("device:", on_device.device)
    np.testing.assert_allclose(np.asarray(on_device), on_cpu, rtol=1e-3, atol=1e-3)
    print("matches NumPy:", np.asarray(on_device)[:4])
