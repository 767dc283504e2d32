"""The rest of the Python array API namespace (2024.12) over _core's ONNX ops: data type
functions, constants, the inspection namespace, and the element-wise, searching, sorting, set,
manipulation and statistical functions _core lacks. Everything is recorded as ONNX ops into the
lazy graph unless its docstring says otherwise (``repeat`` with an array of counts reads them)."""

import builtins
import math
from dataclasses import dataclass

import numpy as np

from . import _core as _c
from ._core import (ndarray, asarray, astype, _op, _like, _ints, _axis, _axes, _operands,
                    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16,
                    float32, float64, _np_dtype, _CODE)
from ._errors import InvalidArgument

__all__ = [
    "e", "pi", "inf", "nan", "newaxis", "iinfo", "finfo", "iinfo_object", "finfo_object",
    "result_type", "can_cast", "isdtype", "atan2", "arctan2", "hypot", "copysign", "logaddexp",
    "signbit", "positive", "nextafter", "bitwise_left_shift", "bitwise_right_shift", "real", "imag", "conj",
    "sort", "argsort", "nonzero", "searchsorted", "count_nonzero", "unique_values",
    "unique_counts", "unique_inverse", "unique_all", "roll", "repeat", "unstack",
    "broadcast_shapes", "take_along_axis", "meshgrid", "matrix_transpose", "tensordot", "diff",
    "cumulative_sum", "cumulative_prod", "log1p", "expm1", "remainder", "mod", "pow", "power",
    "negative", "vecdot", "broadcast_arrays", "var", "std", "isin", "__array_namespace_info__",
    "__array_api_version__", "Info"]

__array_api_version__ = "2024.12"

e = math.e
pi = math.pi
inf = math.inf
nan = math.nan
newaxis = None


# ---------------------------------------------------------------- data type functions
@dataclass(frozen=True)
class iinfo_object:  # noqa: N801 - the standard's name
    bits: int
    max: int
    min: int
    dtype: np.dtype


@dataclass(frozen=True)
class finfo_object:  # noqa: N801
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


def _dtype_of(v):
    return v.dtype if isinstance(v, ndarray) else _np_dtype(v)


def iinfo(type, /):  # noqa: A002 - the standard's name
    """Limits of an integer dtype (or of an integer array's dtype)."""
    d = _dtype_of(type)
    if d.kind not in "iu":
        raise InvalidArgument(f"iinfo: {d} is not an integer dtype")
    i = np.iinfo(d)
    return iinfo_object(i.bits, int(i.max), int(i.min), d)


def finfo(type, /):  # noqa: A002
    """Limits of a floating-point dtype (or of a floating-point array's dtype)."""
    d = _dtype_of(type)
    if d.kind == "c":  # the limits of the real and imaginary parts
        d = np.dtype(_c._PART[d])
    if d.kind != "f":
        raise InvalidArgument(f"finfo: {d} is not a floating-point dtype")
    f = np.finfo(d)
    return finfo_object(f.bits, float(f.eps), float(f.max), float(f.min),
                        float(f.smallest_normal), d)


def result_type(*arrays_and_dtypes):
    """The dtype the standard's promotion rules give (Python scalars adopt the arrays' kind)."""
    dts = [a.dtype if isinstance(a, ndarray) else a for a in arrays_and_dtypes
           if not isinstance(a, (bool, int, float, complex))]
    scalars = [a for a in arrays_and_dtypes if isinstance(a, (bool, int, float, complex))]
    if not dts:
        raise InvalidArgument("result_type: needs at least one array or dtype")
    dts = [_np_dtype(d) for d in dts]
    for a, b in zip(dts, dts[1:]):
        if (a == bool_) != (b == bool_) or (a.kind in "fc") != (b.kind in "fc"):
            raise InvalidArgument(f"result_type: no promotion between {a} and {b}")
    r = np.result_type(*dts)
    if r not in _CODE and r not in _c._PART:
        raise InvalidArgument(f"result_type: no promotion between {dts}")
    for s in scalars:
        if isinstance(s, bool):
            ok = True
        elif isinstance(s, int):
            ok = r != bool_
        elif isinstance(s, float):
            ok = r.kind in "fc"
        else:  # complex: a real floating dtype becomes the complex one of its precision
            ok = r.kind in "fc"
            if r.kind == "f":
                r = _c._COMPLEX_OF[r]
        if not ok:
            raise InvalidArgument(f"result_type: a Python {type(s).__name__} does not promote "
                                  f"with {r}")
    return r


def can_cast(from_, to, /):
    """Whether ``from_`` (a dtype or an array) casts to ``to`` under the standard's rules."""
    f, t = _dtype_of(from_), _np_dtype(to)
    if (f == bool_) != (t == bool_) and f != t:
        return False
    if f.kind in "fc" and t.kind not in "fc" or f.kind == "c" and t.kind != "c":
        return False
    return bool(np.can_cast(f, t, "safe"))


_KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
          "real floating": "f", "complex floating": "c", "numeric": "iufc"}


def isdtype(dtype, kind):
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name ("integral", ...) or a tuple."""
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise InvalidArgument(f"isdtype: unknown kind {kind!r}; one of {list(_KINDS)}")
        return np.dtype(dtype).kind in _KINDS[kind]
    return np.dtype(dtype) == np.dtype(kind)


# ---------------------------------------------------------------- inspection
class Info:
    """What ``__array_namespace_info__()`` returns."""

    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": None}

    def default_device(self):
        return _c.default_client().default_device

    def default_dtypes(self, *, device=None):
        return {"real floating": float64, "complex floating": np.dtype("complex128"),
                "integral": int64, "indexing": int64}

    def devices(self):
        return _c.devices()

    def dtypes(self, *, device=None, kind=None):
        all_ = {"bool": bool_, "int8": int8, "int16": int16, "int32": int32, "int64": int64,
                "uint8": uint8, "uint16": uint16, "uint32": uint32, "uint64": uint64,
                "float32": float32, "float64": float64,
                "complex64": _c.complex64, "complex128": _c.complex128}
        if kind is None:
            return all_
        return {n: d for n, d in all_.items() if isdtype(d, kind)}


def __array_namespace_info__():
    return Info()


# ---------------------------------------------------------------- element-wise
def _arr(x, ref=None):
    if isinstance(x, ndarray):
        return x
    if ref is not None:
        return asarray(x, device=ref.device, client=ref._client)
    return asarray(x)


def _f(x):
    return _c._to_float(x)


def signbit(x, /):
    """True where the sign bit is set (-0.0 included; NaN's sign is not seen: False)."""
    x = _arr(x)
    if x.dtype.kind == "u" or x.dtype == bool_:
        return _c.full_like(x, False, bool_)
    if x.dtype.kind == "i":
        return _c.less(x, 0)
    neg_zero = _c.logical_and(_c.equal(x, 0), _c.less(_c.divide(_like(x, 1.0, x.dtype), x), 0))
    return _c.logical_or(_c.less(x, 0), neg_zero)


def copysign(x1, x2, /):
    x1, x2 = _operands(x1, x2, float_result=True)
    a = _c.abs(x1)
    return _c.where(signbit(x2), _c.negative(a), a)


def positive(x, /):
    return _arr(x)


def negative(x, /):
    x = _arr(x)
    if x.dtype.kind == "u":
        return _op("Sub", [_like(x, 0, x.dtype), x])
    if x.dtype == bool_:
        raise InvalidArgument("negative: not defined for bool")
    return _op("Neg", [x])


def pow(x1, x2, /):  # noqa: A001
    x1, x2 = _operands(x1, x2)
    d = x1.dtype
    if d.kind == "u" or d in (int8, int16):  # no Pow kernel: through int64 (wraps like C)
        # (no uint64 Pow kernel: int64 for uint64 too, the same bits modulo 2^64)
        return astype(_op("Pow", [astype(x1, int64), astype(x2, int64)]), d)
    if d == bool_:
        raise InvalidArgument("pow: not defined for bool")
    return _op("Pow", [x1, x2])


power = pow


def atan2(x1, x2, /):
    """The quadrant-aware arc tangent of x1/x2 (IEEE signed zeros and infinities)."""
    y, x = _operands(x1, x2, float_result=True)
    w = _c.where
    pi_ = _like(y, math.pi, y.dtype)
    half = _like(y, math.pi / 2, y.dtype)
    quarter = _like(y, math.pi / 4, y.dtype)
    sy = signbit(y)
    sx = signbit(x)
    base = _c.atan(_c.divide(y, x))
    r = w(sx, _c.add(base, copysign(pi_, y)), base)       # x < 0 (or -0): add ±pi
    r = w(_c.equal(x, 0), copysign(half, y), r)            # x = ±0, y != 0
    yz = _c.equal(y, 0)
    r = w(yz, w(sx, copysign(pi_, y), y), r)               # y = ±0
    yi, xi = _c.isinf(y), _c.isinf(x)
    fin_y = _c.logical_not(yi)
    r = w(_c.logical_and(fin_y, xi),
          w(sx, copysign(pi_, y), copysign(_like(y, 0.0, y.dtype), y)), r)
    both = _c.logical_and(yi, xi)
    r = w(both, copysign(w(sx, _c.multiply(quarter, 3), quarter), y), r)
    r = w(_c.logical_and(yi, _c.logical_not(xi)), copysign(half, y), r)
    nan_ = _c.logical_or(_c.isnan(x), _c.isnan(y))
    return w(nan_, _like(y, math.nan, y.dtype), r)


arctan2 = atan2


def hypot(x1, x2, /):
    """sqrt(x1² + x2²) without undue overflow; inf when either is infinite."""
    x, y = _operands(x1, x2, float_result=True)
    ax, ay = _c.abs(x), _c.abs(y)
    m, n = _c.maximum(ax, ay), _c.minimum(ax, ay)
    safe = _c.where(_c.equal(m, 0), _like(m, 1, m.dtype), m)
    q = _c.divide(n, safe)
    r = _c.multiply(m, _c.sqrt(_c.add(_c.multiply(q, q), 1)))
    r = _c.where(_c.equal(m, 0), m, r)
    r = _c.where(_c.logical_or(_c.isnan(x), _c.isnan(y)), _like(m, math.nan, m.dtype), r)
    return _c.where(_c.logical_or(_c.isinf(x), _c.isinf(y)), _like(m, math.inf, m.dtype), r)


def logaddexp(x1, x2, /):
    x, y = _operands(x1, x2, float_result=True)
    m = _c.maximum(x, y)
    d = _c.negative(_c.abs(_c.subtract(x, y)))
    r = _c.add(m, log1p(_c.exp(d)))
    r = _c.where(_c.logical_and(_c.isinf(m), _c.equal(x, y)), m, r)
    return _c.where(_c.logical_or(_c.isnan(x), _c.isnan(y)), _like(m, math.nan, m.dtype), r)


def log1p(x, /):
    """log(1 + x), accurate near 0 (x·log(u)/(u-1), u = 1 + x) and keeping -0."""
    x = _f(_arr(x))
    u = _c.add(x, 1)
    um1 = _c.subtract(u, 1)
    safe = _c.where(_c.equal(um1, 0), _like(x, 1, x.dtype), um1)
    r = _c.divide(_c.multiply(_c.log(u), x), safe)
    r = _c.where(_c.equal(um1, 0), x, r)
    return _c.where(_c.isinf(x), _c.log(u), r)


def expm1(x, /):
    """exp(x) - 1, accurate near 0 ((u-1)·x/log(u), u = exp(x)) and keeping -0."""
    x = _f(_arr(x))
    u = _c.exp(x)
    um1 = _c.subtract(u, 1)
    lu = _c.log(u)
    safe = _c.where(_c.equal(lu, 0), _like(x, 1, x.dtype), lu)
    r = _c.divide(_c.multiply(um1, x), safe)
    r = _c.where(_c.equal(u, 1), x, r)
    r = _c.where(_c.logical_or(_c.isinf(u), _c.equal(u, 0)), um1, r)
    # below -40, exp(x) - 1 rounds to -1 in both precisions (and a vectorised exp may return
    # the smallest normal instead of 0 there)
    r = _c.where(_c.less(x, _like(x, -40.0, x.dtype)), _like(x, -1.0, x.dtype), r)
    return _c.where(_c.isnan(x), x, r)


def remainder(x1, x2, /):
    """x1 - floor(x1 / x2)·x2 with NumPy's signs: fmod, then moved to x2's sign (so
    ``x % inf`` is x for x ≥ 0, and zeros take x2's sign)."""
    x, y = _operands(x1, x2)
    if x.dtype.kind != "f":
        return _op("Mod", [x, y], {"fmod": 0})
    r = _op("Mod", [x, y], {"fmod": 1})
    fix = _c.logical_and(_c.not_equal(r, 0), _c.not_equal(signbit(r), signbit(y)))
    r = _c.where(fix, _c.add(r, y), r)
    return _c.where(_c.equal(r, 0), copysign(_like(r, 0.0, r.dtype), y), r)


mod = remainder


def _shift_unsigned(d):
    return {1: uint8, 2: uint16, 4: uint32, 8: uint64}[d.itemsize]


def bitwise_left_shift(x1, x2, /):
    x, y = _operands(x1, x2)
    d = x.dtype
    if d.kind not in "iu":
        raise InvalidArgument(f"bitwise_left_shift: integer arrays only, not {d}")
    u = _shift_unsigned(d)
    r = _op("BitShift", [astype(x, u), astype(y, u)], {"direction": "LEFT"})
    r = _c.where(_c.greater_equal(y, d.itemsize * 8), _like(r, 0, u), r)
    return astype(r, d)


def bitwise_right_shift(x1, x2, /):
    x, y = _operands(x1, x2)
    d = x.dtype
    if d.kind not in "iu":
        raise InvalidArgument(f"bitwise_right_shift: integer arrays only, not {d}")
    u = _shift_unsigned(d)
    bits = d.itemsize * 8
    yc = _c.minimum(y, _like(y, bits - 1, d)) if d.kind == "i" else y
    big = _c.greater_equal(y, bits)

    def lsr(v):
        r = _op("BitShift", [astype(v, u), astype(yc, u)], {"direction": "RIGHT"})
        return _c.where(big, _like(r, 0, u), r) if d.kind == "u" else r

    if d.kind == "u":
        return astype(lsr(x), d)
    neg = _c.less(x, 0)
    pos = astype(lsr(x), d)
    negr = _c.bitwise_invert(astype(lsr(_c.bitwise_invert(x)), d))
    return _c.where(neg, negr, pos)


def nextafter(x1, x2, /):
    """The next representable value after x1 toward x2, by arithmetic (ONNX has no bitcast):
    the unit in the last place from x1's binary exponent, halved going down at a power of 2."""
    x, y = _operands(x1, x2, float_result=True)
    d = x.dtype
    mant, tiny = (52, -1074) if d == float64 else (23, -149)
    w = _c.where
    ax = _c.abs(x)
    safe = w(_c.equal(ax, 0), _like(x, 1, d), ax)
    e = _c.floor(_c.log2(safe))
    two = _like(x, 2.0, d)
    p = _c.pow(two, e)
    e = w(_c.greater(p, safe), _c.subtract(e, 1), e)
    e = w(_c.less_equal(_c.multiply(_c.pow(two, e), 2), safe), _c.add(e, 1), e)
    p = _c.pow(two, e)
    ulp_up = _c.pow(two, _c.maximum(_c.subtract(e, mant), _like(x, tiny, d)))
    ulp_down = w(_c.logical_and(_c.equal(safe, p), _c.greater(e, tiny + mant)),
                 _c.divide(ulp_up, 2), ulp_up)
    away = _c.equal(_c.greater(y, x), _c.greater(x, 0))
    sgn = w(_c.less(x, 0), _like(x, -1, d), _like(x, 1, d))
    r = w(away, _c.add(x, _c.multiply(sgn, ulp_up)), _c.subtract(x, _c.multiply(sgn, ulp_down)))
    smallest = _like(x, float(np.finfo(d).smallest_subnormal), d)
    r = w(_c.equal(x, 0), copysign(smallest, _c.subtract(y, x)), r)
    r = w(_c.isinf(x), w(_c.isinf(y) & _c.equal(x, y), x,
                         _c.multiply(sgn, _like(x, float(np.finfo(d).max), d))), r)
    r = w(_c.equal(x, y), y, r)
    return w(_c.logical_or(_c.isnan(x), _c.isnan(y)), _like(x, math.nan, d), r)


def real(x, /):
    return _arr(x)


def imag(x, /):
    x = _arr(x)
    return _c.zeros_like(x)


def conj(x, /):
    return _arr(x)


# ---------------------------------------------------------------- sorting and searching
def _sort_impl(x, axis, descending, stable):
    x = _arr(x)
    if x.ndim == 0:
        raise InvalidArgument("sort: a 0-d array has no axis to sort")
    ax = _axis(axis, x.ndim)
    n = x.shape[ax]
    if n == 0:
        return x, _c.zeros_like(x, dtype=int64)
    src = x
    if x.dtype == bool_:
        src = astype(x, uint8)
    vals, idx = _op("TopK", [src, _ints(x, [n])],
                    {"axis": ax, "largest": int(bool(descending)), "sorted": 1}, num_outputs=2)
    return astype(vals, x.dtype), idx


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """Sorted along ``axis`` (ONNX TopK with k = the axis length; ties keep their order)."""
    return _sort_impl(x, axis, descending, stable)[0]


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    return _sort_impl(x, axis, descending, stable)[1]


def nonzero(x, /):
    """The indices of the non-zero elements, one int64 array per axis."""
    x = _arr(x)
    if x.ndim == 0:
        raise InvalidArgument("nonzero: not defined for 0-d arrays")
    idx = _op("NonZero", [x])
    if x.ndim == 1:
        return (_c.reshape(idx, (-1,)),)
    parts = _op("Split", [idx, _ints(idx, [1] * x.ndim)], {"axis": 0}, num_outputs=x.ndim)
    return tuple(_c.reshape(p, (-1,)) for p in parts)


def count_nonzero(x, /, *, axis=None, keepdims=False):
    x = _arr(x)
    nz = astype(_c.not_equal(x, _like(x, 0, x.dtype)), int64)
    return _c.sum(nz, axis=axis, keepdims=keepdims)


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Insertion points of ``x2`` into the sorted 1-d ``x1`` (a compare of every pair)."""
    x1 = _arr(x1)
    x2 = _arr(x2, x1)
    if x1.ndim != 1:
        raise InvalidArgument(f"searchsorted: x1 must be 1-d, not {x1.ndim}-d")
    if side not in ("left", "right"):
        raise InvalidArgument(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if sorter is not None:
        x1 = _c.take(x1, sorter)
    a, v = _operands(x1, x2)
    col = _op("Unsqueeze", [v, _ints(v, [v.ndim])])
    cmp = _c.less(a, col) if side == "left" else _c.less_equal(a, col)
    if x2.ndim == 0 or True:
        pass
    return _c.sum(astype(cmp, int64), axis=-1)


# ---------------------------------------------------------------- sets
def _unique(x):
    x = _c.reshape(_arr(x), (-1,))
    y, first, inverse, counts = _op("Unique", [x], {"sorted": 1}, num_outputs=4)
    return x, y, first, inverse, counts


def unique_values(x, /):
    return _unique(x)[1]


def unique_counts(x, /):
    _, y, _, _, counts = _unique(x)
    return _UniqueCounts(y, counts)


def unique_inverse(x, /):
    xa = _arr(x)
    _, y, _, inv, _ = _unique(xa)
    return _UniqueInverse(y, _c.reshape(inv, xa.shape))


def unique_all(x, /):
    xa = _arr(x)
    _, y, first, inv, counts = _unique(xa)
    return _UniqueAll(y, first, _c.reshape(inv, xa.shape), counts)


from collections import namedtuple  # noqa: E402

_UniqueCounts = namedtuple("UniqueCountsResult", ["values", "counts"])
_UniqueInverse = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])
_UniqueAll = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])


def isin(x1, x2, /, *, invert=False):
    x1 = _arr(x1)
    x2 = _c.reshape(_arr(x2, x1), (-1,))
    a, b = _operands(x1, x2)
    col = _op("Unsqueeze", [a, _ints(a, [a.ndim])])
    r = _c.any(_c.equal(col, b), axis=-1)
    return _c.logical_not(r) if invert else r


# ---------------------------------------------------------------- manipulation
def roll(x, /, shift, *, axis=None):
    x = _arr(x)
    if axis is None:
        flat = _c.reshape(x, (-1,))
        return _c.reshape(roll(flat, shift, axis=0), x.shape)
    shifts = list(shift) if isinstance(shift, (tuple, list)) else [shift]
    axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        else:
            raise InvalidArgument(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    r = x
    for s, a in zip(shifts, axes):
        a = _axis(a, x.ndim)
        n = x.shape[a]
        if n == 0:
            continue
        idx = (np.arange(n) - int(s)) % n
        r = _op("Gather", [r, _like(r, idx.astype(np.int64), np.int64)], {"axis": a})
    return r


def repeat(x, repeats, /, *, axis=None):
    """Each element repeated; an array of counts is read back to size the result."""
    x = _arr(x)
    if axis is None:
        x, axis = _c.reshape(x, (-1,)), 0
    a = _axis(axis, x.ndim)
    n = x.shape[a]
    reps = repeats.numpy() if isinstance(repeats, ndarray) else np.asarray(repeats)
    if reps.ndim == 0 or reps.shape == (1,):
        reps = np.full(n, int(reps.reshape(-1)[0]))
    if reps.shape != (n,):
        raise InvalidArgument(f"repeat: {reps.shape[0]} counts for an axis of {n}")
    if (reps < 0).any():
        raise InvalidArgument("repeat: negative count")
    idx = np.repeat(np.arange(n, dtype=np.int64), reps.astype(np.int64))
    return _op("Gather", [x, _like(x, idx, np.int64)], {"axis": a})


def unstack(x, /, *, axis=0):
    x = _arr(x)
    a = _axis(axis, x.ndim)
    return tuple(_c.take(x, _like(x, np.int64(i), np.int64), axis=a) for i in range(x.shape[a]))


def broadcast_shapes(*shapes):
    return tuple(np.broadcast_shapes(*shapes))


def broadcast_arrays(*arrays):
    """Each array broadcast to the common shape, keeping its own dtype."""
    arrays = [_arr(a) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [_c.broadcast_to(a, shape) if tuple(a.shape) != shape else a for a in arrays]


def take_along_axis(x, indices, /, *, axis=-1):
    x = _arr(x)
    indices = _arr(indices, x)
    if x.ndim != indices.ndim:
        raise InvalidArgument(f"take_along_axis: x is {x.ndim}-d, indices {indices.ndim}-d")
    a = _axis(axis, x.ndim)
    xs, is_ = list(x.shape), list(indices.shape)
    xs[a] = is_[a] = 1
    b = list(np.broadcast_shapes(tuple(xs), tuple(is_)))
    bx, bi = list(b), list(b)
    bx[a], bi[a] = x.shape[a], indices.shape[a]
    if tuple(bx) != tuple(x.shape):
        x = _c.broadcast_to(x, bx)
    if tuple(bi) != tuple(indices.shape):
        indices = _c.broadcast_to(indices, bi)
    idx = astype(indices, int64)
    idx = _c.where(_c.less(idx, 0), _c.add(idx, x.shape[a]), idx)
    return _op("GatherElements", [x, idx], {"axis": a})


def meshgrid(*arrays, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise InvalidArgument(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    arrays = [_arr(a) for a in arrays]
    n = len(arrays)
    sizes = [a.size for a in arrays]
    if indexing == "xy" and n > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        shape = [1] * n
        pos = i
        if indexing == "xy" and n > 1 and i < 2:
            pos = 1 - i
        shape[pos] = a.size
        out.append(_c.broadcast_to(_c.reshape(a, shape), sizes))
    return out


def matrix_transpose(x, /):
    x = _arr(x)
    if x.ndim < 2:
        raise InvalidArgument("matrix_transpose: needs at least 2 dims")
    return _c.swapaxes(x, -1, -2)


def tensordot(x1, x2, /, *, axes=2):
    a, b = _operands(x1, x2)
    if isinstance(axes, int):
        if axes < 0:
            raise InvalidArgument("tensordot: axes must be non-negative")
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = [list(v) if isinstance(v, (list, tuple)) else [v] for v in axes]
    ax_a = [_axis(i, a.ndim) for i in ax_a]
    ax_b = [_axis(i, b.ndim) for i in ax_b]
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise InvalidArgument(f"tensordot: axis sizes differ: {a.shape[i]} vs {b.shape[j]}")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a], dtype=np.int64))
    ma = _c.reshape(_c.permute_dims(a, free_a + ax_a), (-1, k)) if a.ndim else _c.reshape(a, (1, 1))
    mb = _c.reshape(_c.permute_dims(b, ax_b + free_b), (k, -1)) if b.ndim else _c.reshape(b, (1, 1))
    out_shape = [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b]
    if k == 0:
        return _c.zeros(out_shape, dtype=a.dtype, device=a.device, client=a._client)
    d = a.dtype
    if d in (bool_, int8, int16, uint8, uint16):  # no MatMul kernel: through 64 bits, wrapped
        w = int64 if d.kind == "i" else uint64
        prod = _op("MatMul", [astype(ma, w), astype(mb, w)])
        return _c.reshape(astype(prod, d), out_shape)
    return _c.reshape(_op("MatMul", [ma, mb]), out_shape)


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    x = _arr(x)
    a = _axis(axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = _c.concat([_arr(p, x) for p in parts], axis=a)
    for _ in range(n):
        m = x.shape[a]
        if m == 0:
            break
        hi = _c._getitem(x, (slice(None),) * a + (slice(1, None),))
        lo = _c._getitem(x, (slice(None),) * a + (slice(0, m - 1),))
        x = _c.not_equal(hi, lo) if x.dtype == bool_ else _c.subtract(hi, lo)
    return x


def _cum_prep(x, axis, dtype):
    x = _arr(x)
    if axis is None:
        if x.ndim > 1:
            raise InvalidArgument("cumulative_*: axis is required for arrays with more than 1 dim")
        axis = 0
    if x.ndim == 0:
        raise InvalidArgument("cumulative_*: not defined for 0-d arrays")
    a = _axis(axis, x.ndim)
    d = _np_dtype(dtype) if dtype is not None else _c._acc_dtype(x.dtype)
    return astype(x, d), a


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    x, a = _cum_prep(x, axis, dtype)
    r = _op("CumSum", [x, _like(x, np.int64(a))]) if x.shape[a] else x
    if include_initial:
        shape = list(x.shape)
        shape[a] = 1
        r = _c.concat([_c.zeros(shape, dtype=x.dtype, device=x.device, client=x._client), r],
                      axis=a)
    return r


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Products along ``axis`` by log2(n) shifted multiplies (ONNX has no CumProd)."""
    x, a = _cum_prep(x, axis, dtype)
    n = x.shape[a]
    r = x
    s = 1
    while s < n:
        shape = list(x.shape)
        shape[a] = s
        ones = _c.ones(shape, dtype=x.dtype, device=x.device, client=x._client)
        head = _c._getitem(r, (slice(None),) * a + (slice(0, n - s),))
        r = _c.multiply(r, _c.concat([ones, head], axis=a))
        s *= 2
    if include_initial:
        shape = list(x.shape)
        shape[a] = 1
        r = _c.concat([_c.ones(shape, dtype=x.dtype, device=x.device, client=x._client), r],
                      axis=a)
    return r


# ---------------------------------------------------------------- statistics, linear algebra
def var(x, /, *, axis=None, correction=0.0, keepdims=False, ddof=None):
    return _c.var(x, axis=axis, keepdims=keepdims, ddof=correction if ddof is None else ddof)


def std(x, /, *, axis=None, correction=0.0, keepdims=False, ddof=None):
    return _c.sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims, ddof=ddof))


def vecdot(x1, x2, /, *, axis=-1):
    a, b = _operands(x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgument("vecdot: needs arrays of at least one dim")
    n = builtins.max(a.ndim, b.ndim)
    if not -n <= axis < 0:
        raise InvalidArgument(f"vecdot: axis {axis} must be negative and within {n} dims")
    if -axis > a.ndim or -axis > b.ndim or a.shape[axis] != b.shape[axis]:
        raise InvalidArgument(f"vecdot: shapes {a.shape} and {b.shape} differ along {axis}")
    np.broadcast_shapes(a.shape, b.shape)
    return _c.sum(_c.multiply(a, b), axis=axis, dtype=a.dtype)


# _core's operators and methods call these by their module-level names: the versions above
# (unsigned pow/negative, NumPy's float remainder, signed zeros in log1p/expm1) replace them.
for _n in ("pow", "power", "negative", "remainder", "mod", "log1p", "expm1"):
    setattr(_c, _n, globals()[_n])
del _n


# ---------------------------------------------------------------- complex64 / complex128
# The engine has no complex dtype: a complex array is one ndarray holding two real arrays of
# the part dtype (float32 for complex64, float64 for complex128), and every function below is
# real ops on the parts (a complex multiply: 4 real multiplies and 2 adds; matmul: 4 real
# matmuls). The functions above and in _core stay real-only; the table at the end routes a call
# with a complex operand to its complex version (or refuses it where the standard does not
# define the function for complex). docs/api.md has the costs.
import functools  # noqa: E402

from ._core import (complex64, complex128, _PART, _COMPLEX_OF, _complex,  # noqa: E402
                    _is_complex, _real_part as _re, _imag_part as _im)

_R = {}  # the real-only versions, by name (filled when the table is applied)


def _r(name):
    return _R.get(name) or getattr(_c, name)


def _cdtype(*vals):
    """The complex dtype of an operation over ``vals`` (arrays, NumPy values, Python scalars),
    by the standard's promotion (float32 + complex64 -> complex64, float64 + complex64 ->
    complex128, a Python complex adopts the array's precision)."""
    ds = []
    for v in vals:
        if isinstance(v, ndarray):
            ds.append(v.dtype)
        elif isinstance(v, np.ndarray) and v.ndim:
            ds.append(v.dtype)
        elif isinstance(v, (list, tuple)):
            ds.append(np.asarray(v).dtype)
        elif isinstance(v, np.generic):
            ds.append(v.item())
        else:
            ds.append(v)
    r = np.result_type(*ds)
    if r.kind != "c":
        r = _COMPLEX_OF.get(r, complex128)
    return r if r in _PART else complex128


def _cparts(v, dt, ref):
    """(real, imag) of ``v`` as real tensord arrays of ``dt``'s part dtype."""
    pd = _PART[dt]
    if isinstance(v, ndarray):
        if v._im is not None:
            return astype(_re(v), pd), astype(_im(v), pd)
        r = astype(v, pd)
        return r, _c.zeros_like(r)
    a = np.asarray(v, dtype=dt)
    return _c._cast_operand(a.real, pd, ref), _c._cast_operand(a.imag, pd, ref)


def _ref(*vals):
    for v in vals:
        if isinstance(v, ndarray):
            return v
    return asarray(vals[0])


def _two(x, y):
    dt = _cdtype(x, y)
    ref = _ref(x, y)
    return _cparts(x, dt, ref) + _cparts(y, dt, ref)


def _one(x):
    x = _arr(x)
    if x._im is None:
        x = astype(x, _cdtype(x))
    return _re(x), _im(x)


def _k(ref, v):
    """A real scalar constant of ``ref``'s dtype."""
    return _like(ref, v, ref.dtype)


def _w(c, a, b):
    return _r("where")(c, a, b)


# -- arithmetic
def _c_add(x, y):
    a, b, c, d = _two(x, y)
    return _complex(_c.add(a, c), _c.add(b, d))


def _c_subtract(x, y):
    a, b, c, d = _two(x, y)
    return _complex(_c.subtract(a, c), _c.subtract(b, d))


def _cmul(a, b, c, d):
    m = _c.multiply
    return _c.subtract(m(a, c), m(b, d)), _c.add(m(a, d), m(b, c))


def _c_multiply(x, y):
    return _complex(*_cmul(*_two(x, y)))


def _cdiv(a, b, c, d):
    """(a + bi) / (c + di) by Smith's algorithm (no overflow of c² + d²)."""
    m, dv, ad, sb = _c.multiply, _c.divide, _c.add, _c.subtract
    big_c = _c.greater_equal(_c.abs(c), _c.abs(d))
    # |c| >= |d|: r = d/c, den = c + d r
    c_s = _w(_c.equal(c, 0), _k(c, 1), c)
    r1 = dv(d, c_s)
    den1 = ad(c, m(d, r1))
    re1, im1 = dv(ad(a, m(b, r1)), den1), dv(sb(b, m(a, r1)), den1)
    d_s = _w(_c.equal(d, 0), _k(d, 1), d)
    r2 = dv(c, d_s)
    den2 = ad(m(c, r2), d)
    re2, im2 = dv(ad(m(a, r2), b), den2), dv(sb(m(b, r2), a), den2)
    re, im = _w(big_c, re1, re2), _w(big_c, im1, im2)
    # division by zero: C99's inf·(a + bi); NaN operands stay NaN
    zero = _c.logical_and(_c.equal(c, 0), _c.equal(d, 0))
    inf = _k(a, math.inf)
    re = _w(zero, m(copysign(inf, c), a), re)
    im = _w(zero, m(copysign(inf, c), b), im)
    return re, im


def _c_divide(x, y):
    return _complex(*_cdiv(*_two(x, y)))


def _c_equal(x, y):
    a, b, c, d = _two(x, y)
    return _c.logical_and(_c.equal(a, c), _c.equal(b, d))


def _c_not_equal(x, y):
    return _c.logical_not(_c_equal(x, y))


def _c_negative(x):
    a, b = _one(x)
    return _complex(_r("negative")(a), _r("negative")(b))


def _c_positive(x):
    return _arr(x)


def _c_conj(x):
    a, b = _one(x)
    return _complex(a, _r("negative")(b))


def _c_real(x):
    return _one(x)[0]


def _c_imag(x):
    return _one(x)[1]


def _c_abs(x):
    a, b = _one(x)
    return hypot(a, b)


def _c_isnan(x):
    a, b = _one(x)
    return _c.logical_or(_c.isnan(a), _c.isnan(b))


def _c_isinf(x):
    a, b = _one(x)
    return _c.logical_or(_c.isinf(a), _c.isinf(b))


def _c_isfinite(x):
    a, b = _one(x)
    return _c.logical_and(_c.isfinite(a), _c.isfinite(b))


def _c_round(x):
    a, b = _one(x)
    return _complex(_c.round(a), _c.round(b))


def _c_square(x):
    a, b = _one(x)
    return _complex(*_cmul(a, b, a, b))


def _c_reciprocal(x):
    a, b = _one(x)
    return _complex(*_cdiv(_c.ones_like(a), _c.zeros_like(a), a, b))


def _c_sign(x):
    a, b = _one(x)
    m = hypot(a, b)
    safe = _w(_c.equal(m, 0), _k(m, 1), m)
    re, im = _c.divide(a, safe), _c.divide(b, safe)
    zero = _c.equal(m, 0)  # sign(±0 ± 0j) = +0 + 0j
    re, im = _w(zero, _k(a, 0.0), re), _w(zero, _k(a, 0.0), im)
    nan = _c.logical_or(_c.isnan(a), _c.isnan(b))
    return _complex(_w(nan, _k(a, math.nan), re), _w(nan, _k(a, math.nan), im))


# -- exponentials and logarithms
def _cexp(a, b):
    e = _c.exp(a)
    bz = _c.equal(b, 0)
    # e·cos b, e·sin b, with b = ±0 exact (keeps the sign of zero, no inf·0)
    re = _w(bz, e, _c.multiply(e, _c.cos(b)))
    im = _w(bz, b, _c.multiply(e, _c.sin(b)))
    b_fin = _c.isfinite(b)
    ninf = _c.logical_and(_c.isinf(a), _c.less(a, 0))
    pinf = _c.logical_and(_c.isinf(a), _c.greater(a, 0))
    zero, nan, inf = _k(a, 0.0), _k(a, math.nan), _k(a, math.inf)
    # exp(-inf + yi): +0·cis(y) (for finite y), ±0 for non-finite y
    re = _w(ninf, _w(b_fin, _c.multiply(zero, _c.cos(b)), zero), re)
    im = _w(ninf, _w(b_fin, _c.multiply(zero, _c.sin(b)), zero), im)
    # exp(+inf + yi), y non-finite: ±inf + NaN j
    re = _w(_c.logical_and(pinf, _c.logical_not(b_fin)), inf, re)
    im = _w(_c.logical_and(pinf, _c.logical_not(b_fin)), nan, im)
    # exp(+inf + yi), finite y != 0: inf·cis(y)
    pf = _c.logical_and(pinf, _c.logical_and(b_fin, _c.logical_not(bz)))
    re = _w(pf, _c.multiply(inf, _c.cos(b)), re)
    im = _w(pf, _c.multiply(inf, _c.sin(b)), im)
    # exp(NaN + yi): NaN + NaN j unless y = 0 (NaN + 0j); exp(x + NaN j) NaN + NaN j
    an = _c.isnan(a)
    re = _w(an, nan, re)
    im = _w(_c.logical_and(an, _c.logical_not(bz)), nan, im)
    bad = _c.logical_and(_c.logical_not(b_fin), _c.isfinite(a))
    re = _w(bad, nan, re)
    im = _w(bad, nan, im)
    return re, im


def _c_exp(x):
    return _complex(*_cexp(*_one(x)))


def _c_expm1(x):
    a, b = _one(x)
    re, im = _cexp(a, b)
    # exp(a)·cos(b) - 1 = expm1(a)·cos(b) - 2 sin²(b/2), accurate near 0
    s = _c.sin(_c.divide(b, 2))
    zz = _c.logical_and(_c.equal(a, 0), _c.equal(b, 0))  # expm1(±0 + 0j) = 0 + 0j
    acc = _c.subtract(_c.multiply(expm1(a), _c.cos(b)), _c.multiply(_k(a, 2), _c.multiply(s, s)))
    fin = _c.logical_and(_c.isfinite(a), _c.isfinite(b))
    small = _c.logical_and(fin, _c.less(a, _k(a, 1.0)))
    re = _w(small, acc, _c.subtract(re, 1))
    re = _w(zz, _k(a, 0.0), re)
    return _complex(re, im)


def _clog(a, b):
    return _c.log(hypot(a, b)), atan2(b, a)


def _c_log(x):
    return _complex(*_clog(*_one(x)))


def _c_log1p(x):
    a, b = _one(x)
    return _complex(*_clog(_c.add(a, 1), b))


def _c_log2(x):
    re, im = _clog(*_one(x))
    return _complex(_c.divide(re, math.log(2)), _c.divide(im, math.log(2)))


def _c_log10(x):
    re, im = _clog(*_one(x))
    return _complex(_c.divide(re, math.log(10)), _c.divide(im, math.log(10)))


def _csqrt(a, b):
    m = hypot(a, b)
    t = _c.sqrt(_c.divide(_c.add(_c.abs(a), m), 2))
    safe = _w(_c.equal(t, 0), _k(t, 1), t)
    q = _c.divide(b, _c.multiply(safe, 2))
    pos = _c.logical_not(signbit(a))
    re = _w(pos, t, _c.abs(q))
    im = _w(pos, q, copysign(t, b))
    tz = _c.equal(t, 0)
    re = _w(tz, _k(a, 0.0), re)
    im = _w(tz, b, im)
    binf = _c.isinf(b)
    re = _w(binf, _k(a, math.inf), re)
    im = _w(binf, b, im)
    # sqrt(-inf + NaN j) = NaN ± inf j; sqrt(+inf + NaN j) = +inf + NaN j
    bn = _c.isnan(b)
    ainf = _c.isinf(a)
    re = _w(_c.logical_and(bn, ainf), _w(pos, _k(a, math.inf), _k(a, math.nan)), re)
    im = _w(_c.logical_and(bn, ainf), _w(pos, _k(a, math.nan), _k(a, math.inf)), im)
    return re, im


def _c_sqrt(x):
    return _complex(*_csqrt(*_one(x)))


def _c_pow(x, y):
    a, b, c, d = _two(x, y)
    la, lb = _clog(a, b)
    re, im = _cexp(*_cmul(c, d, la, lb))
    yz = _c.logical_and(_c.equal(c, 0), _c.equal(d, 0))
    re = _w(yz, _k(a, 1.0), re)
    im = _w(yz, _k(a, 0.0), im)
    return _complex(re, im)


# -- hyperbolic and trigonometric (sin z = -i sinh(iz), cos z = cosh(iz), tan z = -i tanh(iz))
def _csinh(a, b):
    bz = _c.equal(b, 0)
    re = _w(bz, _c.sinh(a), _c.multiply(_c.sinh(a), _c.cos(b)))
    im = _w(bz, b, _c.multiply(_c.cosh(a), _c.sin(b)))
    az = _c.equal(a, 0)
    nan = _k(a, math.nan)
    b_fin = _c.isfinite(b)
    # sinh(±0 + yi), y non-finite: ±0 + NaN j; sinh(±inf + yi), y non-finite: ±inf + NaN j
    re = _w(_c.logical_and(_c.logical_not(b_fin), _c.logical_or(az, _c.isinf(a))), a, re)
    im = _w(_c.logical_and(_c.logical_not(b_fin), _c.logical_not(_c.isnan(a))), nan, im)
    re = _w(_c.logical_and(_c.logical_not(b_fin), _c.isfinite(a) & _c.logical_not(az)), nan, re)
    an = _c.isnan(a)
    re = _w(an, nan, re)
    im = _w(_c.logical_and(an, _c.logical_not(bz)), nan, im)
    # sinh(x + 0j) keeps +0; sinh(±0 + y j) = ±0 + sin(y) j, exact
    im = _w(_c.logical_and(az, b_fin), _c.sin(b), im)
    re = _w(_c.logical_and(az, b_fin), _c.multiply(a, _c.cos(b)), re)
    return re, im


def _ccosh(a, b):
    bz = _c.equal(b, 0)
    az = _c.equal(a, 0)
    re = _w(bz, _c.cosh(a), _c.multiply(_c.cosh(a), _c.cos(b)))
    im = _w(bz, _c.multiply(b, _w(signbit(a), _k(a, -1), _k(a, 1))),
            _c.multiply(_c.sinh(a), _c.sin(b)))
    im = _w(_c.logical_and(az, _c.isfinite(b)), _c.multiply(a, _c.sin(b)), im)
    nan = _k(a, math.nan)
    b_fin = _c.isfinite(b)
    nb = _c.logical_not(b_fin)
    # cosh(±0 + yi), y non-finite: NaN ± 0j; cosh(±inf + yi), y non-finite: +inf + NaN j
    re = _w(_c.logical_and(nb, az), nan, re)
    im = _w(_c.logical_and(nb, az), _k(a, 0.0), im)
    ainf = _c.isinf(a)
    re = _w(_c.logical_and(nb, ainf), _k(a, math.inf), re)
    im = _w(_c.logical_and(nb, ainf), nan, im)
    fin_nz = _c.logical_and(_c.isfinite(a), _c.logical_not(az))
    re = _w(_c.logical_and(nb, fin_nz), nan, re)
    im = _w(_c.logical_and(nb, fin_nz), nan, im)
    an = _c.isnan(a)
    re = _w(an, nan, re)
    im = _w(_c.logical_and(an, _c.logical_not(bz)), nan, im)
    im = _w(_c.logical_and(an, bz), _k(a, 0.0), im)
    return re, im


def _ctanh(a, b):
    two_a, two_b = _c.multiply(a, 2), _c.multiply(b, 2)
    den = _c.add(_c.cosh(two_a), _c.cos(two_b))
    re = _c.divide(_c.sinh(two_a), den)
    im = _c.divide(_c.sin(two_b), den)
    big = _c.greater(_c.abs(a), _k(a, 20.0))
    one = copysign(_k(a, 1.0), a)
    b_fin = _c.isfinite(b)
    re = _w(big, one, re)
    im = _w(big, _w(b_fin, _c.multiply(_k(a, 0.0), _c.sin(two_b)), _k(a, 0.0)), im)
    bz = _c.equal(b, 0)
    re = _w(bz, _c.tanh(a), re)
    im = _w(bz, b, im)
    az = _c.equal(a, 0)
    nan = _k(a, math.nan)
    # tanh(x + yi), y non-finite: NaN + NaN j (x finite, ±0 + NaN j for x = ±0)
    fin = _c.isfinite(a)
    re = _w(_c.logical_and(_c.logical_not(b_fin), fin), _w(az, a, nan), re)
    im = _w(_c.logical_and(_c.logical_not(b_fin), fin), nan, im)
    an = _c.isnan(a)
    re = _w(an, nan, re)
    im = _w(_c.logical_and(an, _c.logical_not(bz)), nan, im)
    return re, im


def _c_sinh(x): return _complex(*_csinh(*_one(x)))
def _c_cosh(x): return _complex(*_ccosh(*_one(x)))
def _c_tanh(x): return _complex(*_ctanh(*_one(x)))


def _times_minus_i(f, a, b):
    """-i·f(i·z) for z = a + bi: i z = -b + ai, and -i (p + qi) = q - pi."""
    p, q = f(_r("negative")(b), a)
    return q, _r("negative")(p)


def _c_sin(x): return _complex(*_times_minus_i(_csinh, *_one(x)))
def _c_tan(x): return _complex(*_times_minus_i(_ctanh, *_one(x)))


def _c_cos(x):
    a, b = _one(x)
    return _complex(*_ccosh(_r("negative")(b), a))


def _casinh(a, b):
    """log(z + sqrt(z² + 1)) on the right half plane (odd: -asinh(-z) on the left); log(2z)
    for large |z| (z² would overflow)."""
    neg = signbit(a)
    sg = _w(neg, _k(a, -1.0), _k(a, 1.0))
    a1, b1 = _c.multiply(a, sg), _c.multiply(b, sg)
    z2r, z2i = _cmul(a1, b1, a1, b1)
    sr, si = _csqrt(_c.add(z2r, 1), z2i)
    re, im = _clog(_c.add(a1, sr), _c.add(b1, si))
    lim = 1e15 if a.dtype == float64 else 1e7
    big = _c.greater(hypot(a1, b1), _k(a, lim))
    lr, li = _clog(a1, b1)
    re = _w(big, _c.add(lr, math.log(2)), re)
    im = _w(big, li, im)
    re, im = _c.multiply(re, sg), _c.multiply(im, sg)
    im = _w(_c.equal(b, 0), b, im)  # asinh(x ± 0j) = asinh(x) ± 0j, NaN + 0j for x NaN
    return re, im


def _c_asinh(x): return _complex(*_casinh(*_one(x)))
def _c_asin(x): return _complex(*_times_minus_i(_casinh, *_one(x)))


def _c_acos(x):
    a, b = _one(x)
    p, q = _times_minus_i(_casinh, a, b)
    return _complex(_c.subtract(_k(a, math.pi / 2), p), _r("negative")(q))


def _c_acosh(x):
    """log(z + sqrt(z + 1)·sqrt(z - 1)); log(2z) for large |z|."""
    a, b = _one(x)
    s1 = _csqrt(_c.add(a, 1), b)
    s2 = _csqrt(_c.subtract(a, 1), b)
    pr, pi_ = _cmul(*s1, *s2)
    re, im = _clog(_c.add(a, pr), _c.add(b, pi_))
    lim = 1e15 if a.dtype == float64 else 1e7
    big = _c.greater(hypot(a, b), _k(a, lim))
    lr, li = _clog(a, b)
    re = _w(big, _c.add(lr, math.log(2)), re)
    im = _w(big, li, im)
    z_nan = _c.logical_and(_c.equal(a, 0), _c.isnan(b))  # acosh(±0 + NaN j) = NaN + πj/2
    re = _w(z_nan, _k(a, math.nan), re)
    im = _w(z_nan, _k(a, math.pi / 2), im)
    return _complex(re, im)


def _catanh(a, b):
    """(log(1 + z) - log(1 - z)) / 2."""
    r1, i1 = _clog(_c.add(a, 1), b)
    r2, i2 = _clog(_c.subtract(_k(a, 1.0), a), _r("negative")(b))
    re = _c.divide(_c.subtract(r1, r2), 2)
    im = _c.divide(_c.subtract(i1, i2), 2)
    bz = _c.equal(b, 0)
    im = _w(_c.logical_and(bz, _c.less(_c.abs(a), _k(a, 1.0))), b, im)
    az = _c.equal(a, 0)
    re = _w(az, a, re)  # atanh(±0 + yi) = ±0 + atan(y) j (NaN j for y NaN)
    # an infinite part: ±0 + ±πj/2 (NaN j for the other part NaN with an infinite real part)
    inf = _c.logical_or(_c.isinf(a), _c.isinf(b))
    re = _w(inf, copysign(_k(a, 0.0), a), re)
    im = _w(inf, _w(_c.isnan(b), b, copysign(_k(a, math.pi / 2), b)), im)
    return re, im


def _c_atanh(x): return _complex(*_catanh(*_one(x)))
def _c_atan(x): return _complex(*_times_minus_i(_catanh, *_one(x)))


# -- reductions and products
def _reduction_dtype(x, dtype):
    """The accumulation dtype of sum/prod: `dtype`, else x's (the standard's for real x)."""
    return _np_dtype(dtype) if dtype is not None else (x.dtype if x._im is not None
                                                         else _cdtype(x))


def _c_sum(x, axis=None, dtype=None, keepdims=False):
    x = _arr(x)
    dt = _reduction_dtype(x, dtype)
    if dt.kind != "c":
        return _r("sum")(astype(x, dt), axis=axis, keepdims=keepdims)
    x = astype(x, dt)
    s = _r("sum")
    return _complex(s(_re(x), axis=axis, keepdims=keepdims), s(_im(x), axis=axis,
                                                                  keepdims=keepdims))


def _c_mean(x, axis=None, keepdims=False):
    x = _arr(x)
    m = _r("mean")
    return _complex(m(_re(x), axis=axis, keepdims=keepdims), m(_im(x), axis=axis,
                                                                  keepdims=keepdims))


def _c_prod(x, axis=None, dtype=None, keepdims=False):
    """By polar form: the product of the moduli, the sum of the angles."""
    x = _arr(x)
    dt = _reduction_dtype(x, dtype)
    if dt.kind != "c":
        return _r("prod")(astype(x, dt), axis=axis, keepdims=keepdims)
    x = astype(x, dt)
    a, b = _re(x), _im(x)
    r = _r("prod")(hypot(a, b), axis=axis, keepdims=keepdims)
    t = _r("sum")(atan2(b, a), axis=axis, keepdims=keepdims)
    return _complex(_c.multiply(r, _c.cos(t)), _c.multiply(r, _c.sin(t)))


def _bilinear(name):
    def f(x, y, *args, **kw):
        a, b, c, d = _two(x, y)
        g = _r(name)
        return _complex(_c.subtract(g(a, c, *args, **kw), g(b, d, *args, **kw)),
                        _c.add(g(a, d, *args, **kw), g(b, c, *args, **kw)))
    return f


def _c_vecdot(x1, x2, /, *, axis=-1):
    return _bilinear("vecdot")(_c_conj(x1) if _is_complex(x1) else x1, x2, axis=axis)


def _c_cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    x = _arr(x)
    if dtype is not None:
        x = astype(x, _np_dtype(dtype))
    f = _r("cumulative_sum")
    return _complex(f(_re(x), axis=axis, include_initial=include_initial),
                    f(_im(x), axis=axis, include_initial=include_initial))


def _c_nonzero(x, /):
    return _r("nonzero")(astype(_arr(x), bool_))


def _c_count_nonzero(x, /, *, axis=None, keepdims=False):
    return _r("count_nonzero")(astype(_arr(x), bool_), axis=axis, keepdims=keepdims)


# -- the same op on both parts
def _lift(fn, data=(0,)):
    """``fn`` (a real function moving or selecting elements) applied to the real and the
    imaginary parts of its data arguments (positions ``data``, or every one: "all"; a list
    argument's arrays each) when one of them is complex."""
    def w(*args, **kw):
        pos = range(len(args)) if data == "all" else [i for i in data if i < len(args)]
        vals = []
        for i in pos:
            v = args[i]
            vals.extend(v if isinstance(v, (list, tuple)) else [v])
        if not builtins.any(_is_complex(v) for v in vals):
            return fn(*args, **kw)
        dt = _cdtype(*vals)
        ref = _ref(*(vals + [a for a in args if isinstance(a, ndarray)]))
        split = {}
        for i in pos:
            v = args[i]
            if isinstance(v, (list, tuple)):
                split[i] = [_cparts(e, dt, ref) for e in v]
            else:
                split[i] = _cparts(v, dt, ref)

        def part(k):
            out = list(args)
            for i in pos:
                s = split[i]
                out[i] = [p[k] for p in s] if isinstance(s, list) else s[k]
            return out

        return _combine(fn(*part(0), **kw), fn(*part(1), **kw))
    return functools.update_wrapper(w, fn)


def _combine(r, i):
    if isinstance(r, ndarray):
        return _complex(r, i)
    return type(r)(_combine(a, b) for a, b in zip(r, i))


def _refuse(name, fn):
    def w(*args, **kw):
        for v in list(args) + list(kw.values()):
            vs = v if isinstance(v, (list, tuple)) else [v]
            if builtins.any(_is_complex(e) for e in vs):
                raise InvalidArgument(f"{name}: not defined for complex arrays (the standard "
                                      "orders only real values)")
        return fn(*args, **kw)
    return functools.update_wrapper(w, fn)


def _dispatch(fn, cx):
    def w(*args, **kw):
        if builtins.any(_is_complex(a) for a in args) or builtins.any(
                _is_complex(v) or (isinstance(v, np.dtype) and v.kind == "c")
                for v in kw.values()):
            return cx(*args, **kw)
        return fn(*args, **kw)
    return functools.update_wrapper(w, fn)


_COMPLEX_VERSIONS = {
    "add": _c_add, "subtract": _c_subtract, "multiply": _c_multiply, "divide": _c_divide,
    "true_divide": _c_divide, "equal": _c_equal, "not_equal": _c_not_equal,
    "negative": _c_negative, "positive": _c_positive, "conj": _c_conj, "real": _c_real,
    "imag": _c_imag, "abs": _c_abs, "isnan": _c_isnan, "isinf": _c_isinf,
    "isfinite": _c_isfinite, "round": _c_round, "square": _c_square,
    "reciprocal": _c_reciprocal, "sign": _c_sign, "exp": _c_exp, "expm1": _c_expm1,
    "log": _c_log, "log1p": _c_log1p, "log2": _c_log2, "log10": _c_log10, "sqrt": _c_sqrt,
    "pow": _c_pow, "power": _c_pow, "sin": _c_sin, "cos": _c_cos, "tan": _c_tan,
    "sinh": _c_sinh, "cosh": _c_cosh, "tanh": _c_tanh, "asin": _c_asin, "arcsin": _c_asin,
    "acos": _c_acos, "arccos": _c_acos, "atan": _c_atan, "arctan": _c_atan,
    "asinh": _c_asinh, "arcsinh": _c_asinh, "acosh": _c_acosh, "arccosh": _c_acosh,
    "atanh": _c_atanh, "arctanh": _c_atanh, "sum": _c_sum, "prod": _c_prod, "mean": _c_mean,
    "matmul": _bilinear("matmul"), "dot": _bilinear("matmul"),
    "tensordot": _bilinear("tensordot"), "vecdot": _c_vecdot,
    "cumulative_sum": _c_cumulative_sum, "nonzero": _c_nonzero,
    "count_nonzero": _c_count_nonzero,
}
_LIFTED = {
    "reshape": (0,), "permute_dims": (0,), "transpose": (0,), "swapaxes": (0,),
    "moveaxis": (0,), "squeeze": (0,), "expand_dims": (0,), "broadcast_to": (0,),
    "concat": (0,), "concatenate": (0,), "stack": (0,), "flip": (0,), "tile": (0,),
    "take": (0,), "split": (0,), "_getitem": (0,), "tril": (0,), "triu": (0,),
    "where": (1, 2), "roll": (0,), "repeat": (0,), "unstack": (0,),
    "take_along_axis": (0,), "meshgrid": "all",
    "matrix_transpose": (0,), "diff": (0,), "cumulative_prod": (0,),
}
_REFUSED = ["maximum", "minimum", "less", "less_equal", "greater", "greater_equal", "floor",
            "ceil", "trunc", "floor_divide", "remainder", "mod", "clip", "max", "min", "amax",
            "amin", "argmax", "argmin", "sort", "argsort", "atan2", "arctan2", "hypot",
            "copysign", "signbit", "nextafter", "logaddexp", "searchsorted", "var", "std",
            "cumsum", "exp2", "erf", "sigmoid", "bitwise_and", "bitwise_or", "bitwise_xor",
            "bitwise_invert", "bitwise_left_shift", "bitwise_right_shift"]
_PATCHED = {}


def _install():
    g = globals()
    mods = [(_c.__dict__, False), (g, True)]  # each module's own version wrapped in place
    for name in list(_COMPLEX_VERSIONS) + list(_LIFTED) + _REFUSED:
        for ns, public in mods:
            orig = ns.get(name)
            if not callable(orig):
                continue
            _R[name] = orig  # _api's version, where it has one, is the public one
            if name in _COMPLEX_VERSIONS:
                new = _dispatch(orig, _COMPLEX_VERSIONS[name])
            elif name in _LIFTED:
                new = _lift(orig, _LIFTED[name])
            else:
                new = _refuse(name, orig)
            ns[name] = new
            if public or name not in g:
                _PATCHED[name] = new


_install()
