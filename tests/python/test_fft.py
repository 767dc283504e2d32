"""tensord.fft (over ONNX DFT) against numpy.fft, embedded and on a broker."""
import numpy as np
import pytest

import tensord as td


@pytest.fixture
def data(rng):
    a = rng.standard_normal((3, 8)).astype(np.float32)
    c = (a + 1j * rng.standard_normal((3, 8))).astype(np.complex64)
    return a, c


CASES = [
    ("fft", lambda m, x: m.fft(x), "c"),
    ("ifft", lambda m, x: m.ifft(x), "c"),
    ("fft n=5 axis=0", lambda m, x: m.fft(x, n=5, axis=0), "c"),
    ("fft n=11", lambda m, x: m.fft(x, n=11), "c"),
    ("fftn ortho", lambda m, x: m.fftn(x, norm="ortho"), "c"),
    ("ifftn forward", lambda m, x: m.ifftn(x, norm="forward"), "c"),
    ("rfft", lambda m, x: m.rfft(x), "a"),
    ("irfft n=7", lambda m, x: m.irfft(x, n=7), "c"),
    ("rfftn", lambda m, x: m.rfftn(x), "a"),
    ("irfftn", lambda m, x: m.irfftn(x), "c"),
    ("hfft", lambda m, x: m.hfft(x), "c"),
    ("ihfft", lambda m, x: m.ihfft(x), "a"),
    ("fftshift", lambda m, x: m.fftshift(x), "a"),
    ("ifftshift axes=1", lambda m, x: m.ifftshift(x, axes=1), "a"),
]


@pytest.mark.parametrize("name,call,kind", CASES, ids=[c[0] for c in CASES])
def test_matches_numpy(client, data, name, call, kind):
    v = data[0] if kind == "a" else data[1]
    got = call(td.fft, td.asarray(v, client=client))
    want = call(np.fft, v)
    assert got.shape == want.shape, name
    assert (got.dtype.kind == "c") == (np.asarray(want).dtype.kind == "c"), (name, got.dtype)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_frequencies_and_errors(client):
    np.testing.assert_allclose(td.fft.fftfreq(7, d=0.5).numpy(), np.fft.fftfreq(7, d=0.5))
    np.testing.assert_allclose(td.fft.rfftfreq(8).numpy(), np.fft.rfftfreq(8))
    with pytest.raises(ValueError, match="norm"):
        td.fft.fft(td.asarray(np.ones(4, np.float32), client=client), norm="bogus")
    with pytest.raises(ValueError, match="n must be >= 1"):
        td.fft.fft(td.asarray(np.ones(4, np.float32), client=client), n=0)
