"""The array API's ``linalg`` extension, the part ONNX ops cover: matmul, matrix_transpose,
tensordot, vecdot, diagonal, trace, outer, cross, vector_norm, matrix_norm (Frobenius, 1, 2 is
not: it needs singular values), det (ONNX Det) and matrix_power (n >= 0). The decompositions
(cholesky, eigh, inv, qr, svd, solve, ...) need LAPACK-backed kernels and are not here yet."""

import builtins
import math

import numpy as np

from . import _core as _c
from . import _api as _a
from ._core import _op, _axis, _ints, _like, int64, bool_
from ._errors import InvalidArgument

__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot", "diagonal", "trace", "outer",
           "cross", "vector_norm", "matrix_norm", "det", "matrix_power"]


def matmul(x1, x2, /):
    return _c.matmul(x1, x2)


def matrix_transpose(x, /):
    return _a.matrix_transpose(x)


def tensordot(x1, x2, /, *, axes=2):
    return _a.tensordot(x1, x2, axes=axes)


def vecdot(x1, x2, /, *, axis=-1):
    return _a.vecdot(x1, x2, axis=axis)


def outer(x1, x2, /):
    a, b = _c._operands(x1, x2)
    if a.ndim != 1 or b.ndim != 1:
        raise InvalidArgument(f"outer: 1-d arrays only, not {a.ndim}-d and {b.ndim}-d")
    return _c.multiply(_c.reshape(a, (-1, 1)), _c.reshape(b, (1, -1)))


def diagonal(x, /, *, offset=0):
    """The diagonals of the last two axes (a Gather of the flattened matrices)."""
    x = _c.asarray(x)
    if x.ndim < 2:
        raise InvalidArgument("diagonal: needs at least 2 dims")
    m, n = x.shape[-2], x.shape[-1]
    rows = np.arange(builtins.max(0, -offset), m)
    cols = rows + offset
    keep = (cols >= 0) & (cols < n)
    flat_idx = (rows[keep] * n + cols[keep]).astype(np.int64)
    flat = _c.reshape(x, tuple(x.shape[:-2]) + (m * n,))
    return _op("Gather", [flat, _like(flat, flat_idx, np.int64)], {"axis": x.ndim - 2})


def trace(x, /, *, offset=0, dtype=None):
    return _c.sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def cross(x1, x2, /, *, axis=-1):
    a, b = _c._operands(x1, x2)
    shape = np.broadcast_shapes(a.shape, b.shape)
    a, b = _c.broadcast_to(a, shape), _c.broadcast_to(b, shape)
    ax = _axis(axis, len(shape))
    if shape[ax] != 3:
        raise InvalidArgument(f"cross: axis {axis} has size {shape[ax]}, not 3")
    ca = [_c.take(a, _like(a, np.int64(i), np.int64), axis=ax) for i in range(3)]
    cb = [_c.take(b, _like(b, np.int64(i), np.int64), axis=ax) for i in range(3)]
    parts = [_c.subtract(_c.multiply(ca[1], cb[2]), _c.multiply(ca[2], cb[1])),
             _c.subtract(_c.multiply(ca[2], cb[0]), _c.multiply(ca[0], cb[2])),
             _c.subtract(_c.multiply(ca[0], cb[1]), _c.multiply(ca[1], cb[0]))]
    return _c.stack(parts, axis=ax)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
    x = _c._to_float(_c.asarray(x))
    ax = _c.abs(x)
    if ord == math.inf:
        return _c.max(ax, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return _c.min(ax, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _c.sum(_c.astype(_c.not_equal(x, 0), x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _c.sum(ax, axis=axis, keepdims=keepdims)
    if ord == 2:
        return _c.sqrt(_c.sum(_c.multiply(ax, ax), axis=axis, keepdims=keepdims))
    p = float(ord)
    return _c.pow(_c.sum(_c.pow(ax, p), axis=axis, keepdims=keepdims), 1.0 / p)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
    """Frobenius, 1, -1, inf, -inf norms; 2, -2 and "nuc" need singular values (not yet)."""
    x = _c._to_float(_c.asarray(x))
    ax = _c.abs(x)
    if ord == "fro":
        return _c.sqrt(_c.sum(_c.multiply(ax, ax), axis=(-2, -1), keepdims=keepdims))
    if ord in (1, -1, math.inf, -math.inf):
        s = _c.sum(ax, axis=-2 if ord in (1, -1) else -1, keepdims=True)
        r = (_c.max if ord in (1, math.inf) else _c.min)(s, axis=(-2, -1), keepdims=True)
        return r if keepdims else _c.reshape(r, x.shape[:-2])
    raise InvalidArgument(f"matrix_norm: ord={ord!r} needs singular values, not implemented")


def det(x, /):
    x = _c._to_float(_c.asarray(x))
    return _op("Det", [x])


def matrix_power(x, n, /):
    x = _c.asarray(x)
    if n < 0:
        raise InvalidArgument("matrix_power: negative powers need an inverse (not implemented)")
    m = x.shape[-1]
    r = _c.broadcast_to(_c.eye(m, dtype=x.dtype, device=x.device, client=x._client), x.shape)
    base = x
    while n:
        if n & 1:
            r = _c.matmul(r, base)
        n >>= 1
        if n:
            base = _c.matmul(base, base)
    return r
