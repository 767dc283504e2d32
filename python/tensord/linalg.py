"""The array API's ``linalg`` extension (2024.12). ONNX ops cover matmul, matrix_transpose,
tensordot, vecdot, diagonal, trace, outer, cross, vector_norm, det (ONNX Det) and most of
matrix_norm. The decompositions are tensord-domain ops with LAPACK kernels on cpu:0 (other
devices fall back to cpu:0): ``tensord.Cholesky``, ``Eigh``, ``QR``, ``SVD``, ``Solve``, ``Inv``
and ``SLogDet`` (src/core/ops/linalg.cpp); eigvalsh, svdvals, matrix_rank, pinv, the 2/-2/nuc
matrix norms and negative matrix powers are derived from them here.

Numerical failures surface when the result is evaluated, as ``InvalidArgument`` (a
``ValueError``, as NumPy's ``LinAlgError`` is) whose message names the problem: "matrix 0 of the
batch is singular", "... is not positive definite"."""

import builtins
import math
from typing import NamedTuple

import numpy as np

from . import _core as _c
from . import _api as _a
from ._core import _op, _axis, _ints, _like, int64, bool_
from ._errors import InvalidArgument

__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot", "diagonal", "trace", "outer",
           "cross", "vector_norm", "matrix_norm", "det", "matrix_power", "cholesky", "eigh",
           "eigvalsh", "inv", "matrix_rank", "pinv", "qr", "slogdet", "solve", "svd", "svdvals",
           "EighResult", "QRResult", "SlogdetResult", "SVDResult"]


class EighResult(NamedTuple):
    """eigh's result: eigenvalues (ascending) and eigenvectors (columns)."""

    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    """qr's result: Q (orthonormal columns) and R (upper triangular)."""

    Q: object
    R: object


class SlogdetResult(NamedTuple):
    """slogdet's result: sign (0 when singular) and logabsdet."""

    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    """svd's result: U, S (descending singular values) and Vh."""

    U: object
    S: object
    Vh: object


def _matrices(x, name, square=False):
    """x as a float32/float64 stack of matrices (integers become float64, float16 float32)."""
    x = _c.asarray(x)
    if x.dtype.kind == "c":
        raise InvalidArgument(f"{name}: complex matrices are not supported yet (tensord's LAPACK "
                              f"kernels are real; inv, solve and svdvals take complex input)")
    x = _c._to_float(x)
    if x.dtype not in (_c.float32, _c.float64):
        x = _c.astype(x, _c.float32)
    if x.ndim < 2:
        raise InvalidArgument(f"{name}: needs a stack of matrices (..., M, N), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise InvalidArgument(f"{name}: needs square matrices (..., M, M), got shape {x.shape}")
    return x


def _td(op_type, inputs, attrs=None, num_outputs=1):
    return _op("tensord." + op_type, inputs, attrs, num_outputs)


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
    """Frobenius, 1, -1, inf, -inf norms; 2, -2 and "nuc" from the singular values."""
    x = _c._to_float(_c.asarray(x))
    ax = _c.abs(x)
    if ord == "fro":
        return _c.sqrt(_c.sum(_c.multiply(ax, ax), axis=(-2, -1), keepdims=keepdims))
    if ord in (1, -1, math.inf, -math.inf):
        s = _c.sum(ax, axis=-2 if ord in (1, -1) else -1, keepdims=True)
        r = (_c.max if ord in (1, math.inf) else _c.min)(s, axis=(-2, -1), keepdims=True)
        return r if keepdims else _c.reshape(r, x.shape[:-2])
    if ord in (2, -2, "nuc"):
        s = svdvals(x)
        if s.shape[-1] == 0:  # an empty matrix: every norm is 0
            r = _c.zeros(x.shape[:-2], dtype=x.dtype, device=x.device, client=x._client)
        else:
            r = {2: _c.max, -2: _c.min, "nuc": _c.sum}[ord](s, axis=-1, keepdims=False)
        return _c.reshape(r, x.shape[:-2] + (1, 1)) if keepdims else r
    raise InvalidArgument(f"matrix_norm: ord={ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, "
                          "inf, -inf")


def det(x, /):
    x = _c._to_float(_c.asarray(x))
    return _op("Det", [x])


def matrix_power(x, n, /):
    x = _c.asarray(x)
    if n < 0:
        x, n = inv(x), -n
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


def cholesky(x, /, *, upper=False):
    """The Cholesky factor L (x = L L^T), or U (x = U^T U) with ``upper``; an error names the
    matrix of the stack that is not positive definite."""
    x = _matrices(x, "cholesky", square=True)
    return _td("Cholesky", [x], {"upper": int(bool(upper))})


def eigh(x, /):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices."""
    x = _matrices(x, "eigh", square=True)
    w, v = _td("Eigh", [x], {"compute_v": 1}, num_outputs=2)
    return EighResult(w, v)


def eigvalsh(x, /):
    """Eigenvalues (ascending) of symmetric matrices."""
    x = _matrices(x, "eigvalsh", square=True)
    return _td("Eigh", [x], {"compute_v": 0})


def _embed(x):
    """A complex stack X + iY as the real stack [[X, -Y], [Y, X]] (..., 2M, 2N): complex products
    and inverses are real ones of these."""
    re, im = _c._real_part(x), _c._imag_part(x)
    top = _c.concat([re, _a.negative(im)], axis=-1)
    bottom = _c.concat([im, re], axis=-1)
    return _c.concat([top, bottom], axis=-2)


def _is_complex(x):
    return isinstance(x, _c.ndarray) and x.dtype.kind == "c"


def inv(x, /):
    """Inverses of square matrices; an error names a singular one. Complex ones through the real
    embedding [[X, -Y], [Y, X]] (its inverse is [[P, -Q], [Q, P]] with inv = P + iQ)."""
    if _is_complex(x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise InvalidArgument(f"inv: needs square matrices (..., M, M), got shape {x.shape}")
        n = x.shape[-1]
        m = _td("Inv", [_embed(x)])
        return _c._complex(m[..., :n, :n], m[..., n:, :n])
    x = _matrices(x, "inv", square=True)
    return _td("Inv", [x])


def qr(x, /, *, mode="reduced"):
    """QR decomposition: mode "reduced" (Q (..., M, K), R (..., K, N), K = min(M, N)) or
    "complete" (Q (..., M, M), R (..., M, N))."""
    if mode not in ("reduced", "complete"):
        raise InvalidArgument(f"qr: mode must be 'reduced' or 'complete', not {mode!r}")
    x = _matrices(x, "qr")
    q, r = _td("QR", [x], {"mode": mode}, num_outputs=2)
    return QRResult(q, r)


def slogdet(x, /):
    """Sign and natural log of the absolute determinant ((0, -inf) for a singular matrix)."""
    x = _matrices(x, "slogdet", square=True)
    sign, logabs = _td("SLogDet", [x], num_outputs=2)
    return SlogdetResult(sign, logabs)


def solve(x1, x2, /):
    """x with x1 @ x = x2. x2 of shape (M,) is one vector for every matrix of x1; otherwise
    x2 is (..., M, K) and the stack dims of x1 and x2 broadcast. Complex systems: inv(x1) @ x2
    (through inv's real embedding)."""
    if _is_complex(x1) or _is_complex(x2) or isinstance(x1, complex) or isinstance(x2, complex):
        a, b = _c._operands(_c.asarray(x1), _c.asarray(x2))
        if a.dtype.kind != "c":
            a = _c.astype(a, b.dtype)
        if b.dtype.kind != "c":
            b = _c.astype(b, a.dtype)
        return _c.matmul(inv(a), b)
    a, b = _c._operands(_c._to_float(_c.asarray(x1)), _c._to_float(_c.asarray(x2)))
    a = _matrices(a, "solve", square=True)
    b = b if b.dtype == a.dtype else _c.astype(b, a.dtype)
    m = a.shape[-1]
    if b.ndim == 1:
        if b.shape[0] != m:
            raise InvalidArgument(f"solve: x1 {a.shape} and x2 {b.shape}: x2 must have {m} rows")
        stack = a.shape[:-2]
        bb = _c.broadcast_to(_c.reshape(b, (m, 1)), stack + (m, 1))
        return _c.reshape(_td("Solve", [a, bb]), stack + (m,))
    if b.ndim < 2 or b.shape[-2] != m:
        raise InvalidArgument(f"solve: x1 {a.shape} and x2 {b.shape}: x2 must be (M,) or "
                              f"(..., M, K) with M = {m}")
    try:
        stack = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise InvalidArgument(f"solve: the stack dims of x1 {a.shape} and x2 {b.shape} do not "
                              "broadcast") from None
    if a.shape[:-2] != stack:
        a = _c.broadcast_to(a, stack + a.shape[-2:])
    if b.shape[:-2] != stack:
        b = _c.broadcast_to(b, stack + b.shape[-2:])
    return _td("Solve", [a, b])


def svd(x, /, *, full_matrices=True):
    """U, S (descending), Vh with x = U diag(S) Vh; U (..., M, M) and Vh (..., N, N) with
    ``full_matrices``, else (..., M, K) and (..., K, N), K = min(M, N)."""
    x = _matrices(x, "svd")
    u, s, vh = _td("SVD", [x], {"full_matrices": int(bool(full_matrices)), "compute_uv": 1},
                   num_outputs=3)
    return SVDResult(u, s, vh)


def svdvals(x, /):
    """Singular values (descending), shape (..., K), K = min(M, N). Complex ones through the real
    embedding [[X, -Y], [Y, X]], whose singular values are each of X + iY's twice."""
    if _is_complex(x):
        if x.ndim < 2:
            raise InvalidArgument(f"svdvals: needs a stack of matrices (..., M, N), got shape "
                                  f"{x.shape}")
        s = _td("SVD", [_embed(x)], {"compute_uv": 0})
        return s[..., ::2]
    x = _matrices(x, "svdvals")
    return _td("SVD", [x], {"compute_uv": 0})


def _rtol(x, rtol, dt=None):
    """rtol as an array (of the real dtype `dt`, default x's) broadcastable against the stack's
    singular values (..., 1)."""
    dt = np.dtype(dt or x.dtype)
    if rtol is None:
        eps = float(np.finfo(dt).eps)
        return _like(x, builtins.max(x.shape[-2], x.shape[-1]) * eps, dt)
    r = rtol if isinstance(rtol, _c.ndarray) else _like(x, np.asarray(rtol), dt)
    if r.dtype != dt:
        r = _c.astype(r, dt)
    return _c.expand_dims(r, axis=-1) if r.ndim else r


def matrix_rank(x, /, *, rtol=None):
    """The number of singular values above rtol * the largest (rtol default max(M, N) * eps)."""
    cx = _is_complex(x)
    x = x if cx else _matrices(x, "matrix_rank")
    s = svdvals(x)  # real, for complex stacks too
    if s.shape[-1] == 0:
        return _c.zeros(x.shape[:-2], dtype=int64, device=x.device, client=x._client)
    tol = _c.multiply(_c.max(s, axis=-1, keepdims=True), _rtol(x, rtol, s.dtype))
    return _c.sum(_c.astype(_c.greater(s, tol), int64), axis=-1)


def pinv(x, /, *, rtol=None):
    """Moore-Penrose pseudo-inverse from the SVD; singular values at or below rtol * the largest
    count as zero (rtol default max(M, N) * eps). Complex stacks through the real embedding
    [[X, -Y], [Y, X]], whose pseudo-inverse is the embedding of X + iY's."""
    if _is_complex(x):
        if x.ndim < 2:
            raise InvalidArgument(f"pinv: needs a stack of matrices (..., M, N), got shape {x.shape}")
        m, n = x.shape[-2], x.shape[-1]
        part = _c._PART[x.dtype]
        if m == 0 or n == 0:
            return _c.zeros(x.shape[:-2] + (n, m), dtype=x.dtype, device=x.device,
                            client=x._client)
        if rtol is None:
            rtol = builtins.max(m, n) * float(np.finfo(part).eps)
        p = pinv(_embed(x), rtol=rtol)
        return _c._complex(p[..., :n, :m], p[..., n:, :m])
    x = _matrices(x, "pinv")
    m, n = x.shape[-2], x.shape[-1]
    if m == 0 or n == 0:
        return _c.zeros(x.shape[:-2] + (n, m), dtype=x.dtype, device=x.device, client=x._client)
    u, s, vh = svd(x, full_matrices=False)
    cutoff = _c.multiply(_c.max(s, axis=-1, keepdims=True), _rtol(x, rtol))
    big = _c.greater(s, cutoff)
    one = _like(s, 1, np.dtype(x.dtype))
    zero = _like(s, 0, np.dtype(x.dtype))
    sinv = _c.where(big, _c.divide(one, _c.where(big, s, one)), zero)
    # pinv = Vh^T diag(1/S) U^T
    vs = _c.multiply(matrix_transpose(vh), _c.expand_dims(sinv, axis=-2))
    return _c.matmul(vs, matrix_transpose(u))
