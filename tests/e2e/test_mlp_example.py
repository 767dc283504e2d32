"""The MLP example's result equals the same computation in NumPy."""
import subprocess
import sys
import tempfile

import numpy as np


def main(exe):
    with tempfile.TemporaryDirectory() as d:
        run = subprocess.run([exe, "--dump", d], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert "class probabilities" in run.stdout, run.stdout
        x, w1, b1, w2, b2, y = (np.load(f"{d}/{n}.npy") for n in ("x", "w1", "b1", "w2", "b2", "y"))
    assert x.shape == (8, 16) and y.shape == (8, 4) and y.dtype == np.float32
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    # A sanity check that the reference itself is not degenerate.
    assert np.allclose(y.sum(axis=1), 1.0, atol=1e-5) and y.std() > 1e-3
    print("mlp example matches numpy: max abs diff %.3g" % np.abs(y - ref).max())


if __name__ == "__main__":
    main(sys.argv[1])
