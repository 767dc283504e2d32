"""The array API's ``fft`` extension over ONNX's DFT op (one axis at a time; a complex array's
two real parts are stacked into DFT's trailing dim of 2). fft/ifft and their n-dimensional forms,
the real-input forms (rfft, irfft, rfftn, irfftn: the full transform, then the half spectrum, and
the Hermitian spectrum rebuilt for the inverse), hfft/ihfft, fftfreq/rfftfreq, fftshift/ifftshift.
``norm`` is "backward" (default: the inverse scaled by 1/n), "ortho" or "forward"."""
import math

import numpy as np

from . import _core as _c
from . import _api as _a
from ._errors import InvalidArgument

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")


def _as_complex(x, name):
    x = _c.asarray(x)
    if x.dtype.kind == "c":
        return x
    if x.dtype.kind != "f":
        raise InvalidArgument(f"fft.{name}: needs a floating or complex array, got {x.dtype}")
    return _c._complex(x, _c.zeros_like(x))


def _resize(x, axis, n):
    """x cut or zero-padded to n along axis."""
    m = x.shape[axis]
    if n == m:
        return x
    if n < m:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, n)
        return x[tuple(idx)]
    shape = list(x.shape)
    shape[axis] = n - m
    pad = _c.zeros(tuple(shape), dtype=x.dtype, device=x.device, client=x._client)
    return _c.concat([x, pad], axis=axis)


def _scale(norm, n, inverse):
    if norm not in _NORMS:
        raise InvalidArgument(f"fft: norm must be one of {_NORMS}, got {norm!r}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n) if n else 1.0
    if (norm == "forward") != inverse:
        return 1.0 / n if n else 1.0
    return 1.0


def _dft1(x, axis, n, norm, inverse, name):
    """The complex DFT of complex x along one axis (n points)."""
    if x.ndim == 0:
        raise InvalidArgument(f"fft.{name}: needs an array of rank >= 1")
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise InvalidArgument(f"fft.{name}: axis {axis} is out of range for shape {x.shape}")
    n = x.shape[axis] if n is None else int(n)
    if n < 1:
        raise InvalidArgument(f"fft.{name}: n must be >= 1, got {n}")
    x = _resize(x, axis, n)
    # The inverse without its 1/n is conj(DFT(conj(x))): the scale is ours (norm).
    im = _c._imag_part(x)
    parts = _c.stack([_c._real_part(x), _a.negative(im) if inverse else im], axis=-1)  # (..., 2)
    y = _c._op("DFT", [parts], {"axis": axis, "inverse": 0})
    re, im = y[..., 0], (_a.negative(y[..., 1]) if inverse else y[..., 1])
    s = _scale(norm, n, inverse)
    if s != 1.0:
        re, im = _c.multiply(re, s), _c.multiply(im, s)
    return _c._complex(re, im)


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    return _dft1(_as_complex(x, "fft"), axis, n, norm, False, "fft")


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    return _dft1(_as_complex(x, "ifft"), axis, n, norm, True, "ifft")


def _axes_sizes(x, s, axes, name):
    if axes is None:
        axes = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if s is None:
        s = [x.shape[a] for a in axes]
    if len(s) != len(axes):
        raise InvalidArgument(f"fft.{name}: s {tuple(s)} and axes {tuple(axes)} differ in length")
    s = [x.shape[a] if v == -1 else v for a, v in zip(axes, s)]
    return list(s), axes


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    x = _as_complex(x, "fftn")
    s, axes = _axes_sizes(x, s, axes, "fftn")
    for n, a in zip(s, axes):
        x = _dft1(x, a, n, norm, False, "fftn")
    return x


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    x = _as_complex(x, "ifftn")
    s, axes = _axes_sizes(x, s, axes, "ifftn")
    for n, a in zip(s, axes):
        x = _dft1(x, a, n, norm, True, "ifftn")
    return x


def _half(x, axis, m):
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(0, m)
    return x[tuple(idx)]


def _real_input(x, name):
    x = _c.asarray(x)
    if x.dtype.kind != "f":
        raise InvalidArgument(f"fft.{name}: needs a real floating array, got {x.dtype}")
    return x


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    x = _real_input(x, "rfft")
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis] if n is None else int(n)
    y = _dft1(_as_complex(x, "rfft"), axis, n, norm, False, "rfft")
    return _half(y, axis, n // 2 + 1)


def _hermitian_full(x, axis, n):
    """The full n-point spectrum from its first n // 2 + 1 points (conjugate symmetric)."""
    m = n // 2 + 1
    x = _resize(x, axis, m)
    tail_len = n - m
    if tail_len <= 0:
        return x
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(1, 1 + tail_len)
    tail = _a.conj(_c.flip(x[tuple(idx)], axis=axis))
    return _c.concat([x, tail], axis=axis)


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    x = _as_complex(x, "irfft")
    axis = axis + x.ndim if axis < 0 else axis
    n = 2 * (x.shape[axis] - 1) if n is None else int(n)
    if n < 1:
        raise InvalidArgument(f"fft.irfft: n must be >= 1, got {n}")
    full = _hermitian_full(x, axis, n)
    return _c._real_part(_dft1(full, axis, n, norm, True, "irfft"))


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    x = _real_input(x, "rfftn")
    s, axes = _axes_sizes(x, s, axes, "rfftn")
    y = rfft(x, n=s[-1], axis=axes[-1], norm=norm)
    for n, a in zip(s[:-1], axes[:-1]):
        y = _dft1(y, a, n, norm, False, "rfftn")
    return y


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    x = _as_complex(x, "irfftn")
    if axes is None:
        axes = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if s is None:
        s = [x.shape[a] for a in axes[:-1]] + [2 * (x.shape[axes[-1]] - 1)]
    if len(s) != len(axes):
        raise InvalidArgument(f"fft.irfftn: s {tuple(s)} and axes {tuple(axes)} differ in length")
    for n, a in zip(s[:-1], axes[:-1]):
        x = _dft1(x, a, n, norm, True, "irfftn")
    return irfft(x, n=s[-1], axis=axes[-1], norm=norm)


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    x = _as_complex(x, "hfft")
    flip = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    if norm not in flip:
        raise InvalidArgument(f"fft.hfft: norm must be one of {_NORMS}, got {norm!r}")
    return irfft(_a.conj(x), n=n, axis=axis, norm=flip[norm])


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    flip = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    if norm not in flip:
        raise InvalidArgument(f"fft.ihfft: norm must be one of {_NORMS}, got {norm!r}")
    return _a.conj(rfft(x, n=n, axis=axis, norm=flip[norm]))


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    if int(n) < 1:
        raise InvalidArgument(f"fft.fftfreq: n must be >= 1, got {n}")
    n = int(n)
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return _c.asarray((k / (d * n)).astype(np.dtype(dtype or _default_real())), device=device)


def _default_real():
    return _a.__array_namespace_info__().default_dtypes()["real floating"]


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    if int(n) < 1:
        raise InvalidArgument(f"fft.rfftfreq: n must be >= 1, got {n}")
    n = int(n)
    k = np.arange(0, n // 2 + 1)
    return _c.asarray((k / (d * n)).astype(np.dtype(dtype or _default_real())), device=device)


def _shift(x, axes, sign):
    x = _c.asarray(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    shifts = tuple(sign * (x.shape[a] // 2) for a in axes)
    return _a.roll(x, shifts, axis=tuple(axes))


def fftshift(x, /, *, axes=None):
    return _shift(x, axes, 1)


def ifftshift(x, /, *, axes=None):
    return _shift(x, axes, -1)
