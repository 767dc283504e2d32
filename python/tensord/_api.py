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
        if (a == bool_) != (b == bool_) or (a.kind == "f") != (b.kind == "f"):
            raise InvalidArgument(f"result_type: no promotion between {a} and {b}")
    r = np.result_type(*dts)
    if r not in _CODE:
        raise InvalidArgument(f"result_type: no promotion between {dts}")
    for s in scalars:
        if isinstance(s, bool):
            ok = True
        elif isinstance(s, int):
            ok = r != bool_
        elif isinstance(s, float):
            ok = r.kind == "f"
        else:
            ok = False
        if not ok:
            raise InvalidArgument(f"result_type: a Python {type(s).__name__} does not promote "
                                  f"with {r}")
    return r


def can_cast(from_, to, /):
    """Whether ``from_`` (a dtype or an array) casts to ``to`` under the standard's rules."""
    f, t = _dtype_of(from_), _np_dtype(to)
    if (f == bool_) != (t == bool_) and f != t:
        return False
    if f.kind == "f" and t.kind != "f":
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
                "float32": float32, "float64": float64}
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
    if d.kind == "u":  # ONNX Pow on unsigned ints: through int64/uint64 (wraps like C)
        w = uint64 if d == uint64 else int64
        return astype(_op("Pow", [astype(x1, w), astype(x2, w)]), d)
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
