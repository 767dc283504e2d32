"""Interoperability with NumPy and PyTorch.

- NumPy's ufuncs (NEP 13, ``__array_ufunc__``): ``np.exp(x)``, ``np.add(x, y)``,
  ``np.add.reduce(x)`` on tensord arrays run in tensord and return tensord arrays, for every ufunc
  the array API has (``np.arcsin`` is ``asin``, ``np.power`` is ``pow``, ...). Other ufuncs and
  methods (``out=``, ``where=``, ``accumulate``, ``at``, ``outer``) raise TypeError naming what is
  missing and how to get a NumPy array instead.
- NumPy's functions (NEP 18, ``__array_function__``): ``np.sum(x)``, ``np.concatenate([x, y])``,
  ``np.where(c, x, y)``... run in tensord when tensord has the function (same name, or the array
  API's name for it) and the arguments fit its signature; every other NumPy function runs in
  NumPy on host copies of the tensord arrays and returns NumPy values (as if they were
  ``np.asarray(x)``).
- PyTorch (``__torch_function__``): a torch function or operator given tensord arrays (``torch.add(t,
  x)``, ``t + x``) runs in torch on the arrays exchanged through DLPack (no copy for the embedded
  engine's cpu and cuda arrays) and returns torch tensors. A tensord function given a torch tensor
  takes it through DLPack too (``x + t`` is a tensord array).
"""
import numpy as np

# NumPy ufunc name -> tensord function name, for the ufuncs the array API has.
_UFUNCS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "true_divide": "divide", "floor_divide": "floor_divide", "remainder": "remainder",
    "power": "pow", "float_power": None, "absolute": "abs", "fabs": "abs", "negative": "negative",
    "positive": "positive", "sign": "sign", "exp": "exp", "expm1": "expm1", "log": "log",
    "log1p": "log1p", "log2": "log2", "log10": "log10", "sqrt": "sqrt", "square": "square",
    "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin",
    "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "sinh": "sinh", "cosh": "cosh",
    "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "floor": "floor",
    "ceil": "ceil", "trunc": "trunc", "rint": "round", "equal": "equal", "not_equal": "not_equal",
    "less": "less", "less_equal": "less_equal", "greater": "greater",
    "greater_equal": "greater_equal", "logical_and": "logical_and", "logical_or": "logical_or",
    "logical_xor": "logical_xor", "logical_not": "logical_not", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift",
    "maximum": "maximum", "minimum": "minimum", "isnan": "isnan", "isinf": "isinf",
    "isfinite": "isfinite", "matmul": "matmul", "hypot": "hypot", "copysign": "copysign",
    "logaddexp": "logaddexp", "signbit": "signbit", "conjugate": "conj", "nextafter": "nextafter",
}

# ufunc.reduce -> the tensord reduction.
_REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
               "logical_and": "all", "logical_or": "any"}

# NumPy function name -> tensord's, where the array API renamed it.
_FUNCTIONS = {"concatenate": "concat", "transpose": "permute_dims", "amax": "max",
              "amin": "min", "power": "pow", "absolute": "abs", "arcsin": "asin",
              "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "arcsinh": "asinh",
              "arccosh": "acosh", "arctanh": "atanh", "invert": "bitwise_invert",
              "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift",
              "conjugate": "conj"}


def _td():
    from . import _api  # the public namespace (import here: _core imports this module)
    import tensord
    return tensord, _api


def _tensord_fn(name):
    td, _ = _td()
    return getattr(td, name, None) if name else None


def _is_td(x):
    from ._core import ndarray
    return isinstance(x, ndarray)


def _host(x):
    """tensord arrays (also inside lists, tuples and dicts) as NumPy arrays."""
    if _is_td(x):
        return np.asarray(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return x


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = ufunc.__name__
    unsupported = [k for k in ("out", "where", "casting", "order", "subok", "signature")
                   if kwargs.get(k) is not None and not (k == "where" and kwargs[k] is True)]
    if kwargs.get("out") is not None:
        raise TypeError(f"numpy.{name}(..., out=...) cannot write into a tensord array (its "
                        f"values live in tensord); drop out= to get a new tensord array")
    if unsupported:
        raise TypeError(f"numpy.{name} on tensord arrays does not take {', '.join(unsupported)}; "
                        f"call tensord.{_UFUNCS.get(name) or name} or convert with np.asarray(x)")
    dtype = kwargs.pop("dtype", None)
    if method == "__call__":
        fn = _tensord_fn(_UFUNCS.get(name))
        if fn is None:
            raise TypeError(f"numpy.{name} has no tensord counterpart: convert with np.asarray(x) "
                            f"(a host copy) to compute it in NumPy")
        out = fn(*inputs)
    elif method == "reduce" and name in _REDUCTIONS:
        (x,) = inputs
        td, _ = _td()
        if not _is_td(x):
            x = td.asarray(x)
        axis = kwargs.get("axis", 0)
        out = _tensord_fn(_REDUCTIONS[name])(x, axis=axis, keepdims=bool(kwargs.get("keepdims")))
    else:
        raise TypeError(f"numpy.{name}.{method} is not supported on tensord arrays (only calls, and "
                        f"reduce for add, multiply, maximum, minimum, logical_and, logical_or); "
                        f"convert with np.asarray(x) (a host copy) to compute it in NumPy")
    if dtype is not None:
        td, _ = _td()
        out = td.astype(out, dtype)
    return out


def array_function(self, func, types, args, kwargs):
    name = func.__name__
    module = getattr(func, "__module__", "") or ""
    fn = None
    if module == "numpy":
        fn = _tensord_fn(_FUNCTIONS.get(name, name))
    elif module == "numpy.linalg":
        td, _ = _td()
        fn = getattr(td.linalg, name, None)
    if fn is not None and callable(fn):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            pass  # NumPy's signature, not the array API's: NumPy computes it below
    return func(*_host(args), **_host(kwargs))


def torch_function(cls, func, types, args=(), kwargs=None):
    import torch

    def to_torch(x):
        if _is_td(x):
            return torch.from_dlpack(x)
        if isinstance(x, (list, tuple)):
            return type(x)(to_torch(v) for v in x)
        if isinstance(x, dict):
            return {k: to_torch(v) for k, v in x.items()}
        return x

    return func(*to_torch(args), **to_torch(kwargs or {}))


def from_foreign(x, client=None):
    """A torch tensor (or another object with __dlpack__ that is not a NumPy array) as a tensord
    array, through DLPack; anything else unchanged."""
    if _is_td(x) or isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
        return x
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        td, _ = _td()
        if type(x).__module__.startswith("torch") and not x.is_contiguous():
            x = x.contiguous()
        if type(x).__module__.startswith("torch") and x.requires_grad:
            x = x.detach()
        return td.from_dlpack(x, client=client)
    return x
