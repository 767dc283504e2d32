"""The NumPy-like array API over tensord._tensord.

Every function records an ONNX op into the lazy C++ Array graph; values are computed (one
graph per device, one round trip to a broker) only when they are looked at: ``numpy()``,
``__array__``, ``float()``, printing, DLPack. Errors in a call (shapes, dtypes, axes) are raised
by that call.
"""

import asyncio as _asyncio
import builtins
import collections as _collections
import concurrent.futures as _futures
import math
import operator
import os
import threading as _threading

import numpy as np

from . import _interop
from . import _tensord as _C
from ._errors import BY_CODE, InvalidArgument

_C._set_error_classes(dict(BY_CODE))

# ---------------------------------------------------------------- dtypes (NumPy's)
bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(n) for n in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (np.dtype(n) for n in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (np.dtype(n) for n in ("float16", "float32", "float64"))
# complex64/complex128: no engine dtype; an array is a pair of real arrays (real part, imaginary
# part) of the part dtype below, held in one ndarray (``_a``, ``_im``). See docs/api.md.
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")
_PART = {complex64: float32, complex128: float64}
_COMPLEX_OF = {float16: complex64, float32: complex64, float64: complex128}


class _BFloat16Type:
    """tensord's bfloat16 (NumPy has none): a dtype object for `x.dtype`, `astype` and creation
    functions, equal to the string "bfloat16". Arrays of it compute (promotion: with integers
    it stays bfloat16, with float16/float32 it becomes float32, with float64 float64), go to
    and from torch through DLPack, and refuse `.numpy()` (cast them first)."""
    name = "bfloat16"
    kind = "f"
    itemsize = 2

    def __eq__(self, other):
        return other is self or (isinstance(other, str) and other == "bfloat16")

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash("bfloat16")

    def __repr__(self):
        return "tensord.bfloat16"

    def __str__(self):
        return "bfloat16"


bfloat16 = _BFloat16Type()


def _promote_bf16(a, b):
    """The result dtype of bfloat16 with `b` (a dtype, or a Python scalar's type)."""
    if b is bfloat16 or b in (bool, int, float) or (isinstance(b, np.dtype) and b.kind in "iub"):
        return bfloat16
    if isinstance(b, np.dtype) and b.kind == "f":
        return float64 if b == float64 else float32
    raise InvalidArgument(f"no promotion between bfloat16 and {b}")


# ONNX TensorProto codes (tensord's DType numbering)
_CODE = {np.dtype(k): v for k, v in {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13}.items()}
_CODE[bfloat16] = 16


def _np_dtype(dtype):
    if dtype is None:
        return None
    if dtype is bfloat16 or (isinstance(dtype, str) and dtype == "bfloat16"):
        return bfloat16
    if getattr(dtype, "is_floating_point", None) is not None and str(dtype) == "torch.bfloat16":
        return bfloat16
    d = np.dtype(dtype)
    if d not in _CODE and d not in _PART:
        raise InvalidArgument(f"dtype {d} is not supported by tensord")
    return d


def _is_float(d):
    return d.kind == "f"


# ---------------------------------------------------------------- clients and devices
class Device(str):
    """A device name ("cpu:0"); compares equal to its name."""

    def __new__(cls, name, info=None):
        obj = super().__new__(cls, name)
        obj.info = info or {}
        return obj

    @property
    def name(self):
        return str(self)

    @property
    def kind(self):
        return self.info.get("kind", str(self).split(":")[0].split("/")[-1])

    @property
    def index(self):
        return self.info.get("index", int(str(self).rsplit(":", 1)[-1]) if ":" in self else 0)

    def __repr__(self):
        return f"Device({str(self)!r})"


class Client:
    """A connection to tensord: the embedded engine (``address`` empty and TENSORD_ADDRESS
    unset) or a broker (``"HOST:PORT"``, ``"unix:PATH"``)."""

    def __init__(self, address=None, *, _raw=None):
        self._c = _raw if _raw is not None else _C.Client(address or "")
        self.address = address or os.environ.get("TENSORD_ADDRESS", "")

    @classmethod
    def local(cls, devices="", default_device="", models_dir=""):
        """A private embedded engine (``devices`` filters like TENSORD_DEVICES). ``models_dir``:
        named models (``open_model``) from DIR/NAME/model.onnx (default: TENSORD_MODELS)."""
        c = cls(_raw=_C.Client.local(devices, default_device, models_dir))
        c.address = ""
        return c

    def devices(self):
        return [Device(d["name"], d) for d in self._c.devices()]

    @property
    def default_device(self):
        return Device(self._c.default_device())

    def stats(self):
        """Calls made so far: executes (graph flushes = round trips for computing), uploads,
        downloads, copies, runs."""
        return self._c.stats()

    def load(self, source, device=None):
        return load(source, device=device, client=self)

    def open_model(self, name):
        return open_model(name, client=self)

    def list_models(self):
        return list_models(client=self)

    def __repr__(self):
        return f"tensord.Client({self.address or 'embedded'!r})"


_default = None


def default_client():
    """The client functions use when no array or ``client=`` says otherwise: the last
    ``connect()``, else TENSORD_ADDRESS, else the embedded engine."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def connect(address=None, *, set_default=True):
    """Connects to a broker (``"HOST:PORT"``, ``"unix:PATH"``; None: TENSORD_ADDRESS, else the
    embedded engine) and makes it the default client."""
    global _default
    c = Client(address)
    if set_default:
        _default = c
    return c


def devices(client=None):
    """The devices of the (default) client."""
    return (client or default_client()).devices()


def _dev(device):
    return "" if device is None else str(device)


# ---------------------------------------------------------------- ndarray
class ndarray:
    """A lazy array on a tensord device. Create with ``tensord.asarray`` and friends."""

    __array_priority__ = 100
    # NumPy's ufuncs and functions, and torch's, on tensord arrays (tensord/_interop.py).
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _interop.array_ufunc(self, ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _interop.array_function(self, func, types, args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _interop.torch_function(cls, func, types, args, kwargs)

    __slots__ = ("_a", "_im", "_client", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("use tensord.asarray(), tensord.zeros(), ... to make arrays")

    # ---- metadata
    @property
    def dtype(self):
        name = self._a.dtype_name
        if self._im is not None:
            return complex64 if name == "float32" else complex128
        return np.dtype(name) if name != "bfloat16" else bfloat16

    @property
    def shape(self):
        return self._a.shape

    @property
    def ndim(self):
        return len(self._a.static_shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def device(self):
        return Device(self._a.device)

    @property
    def client(self):
        return self._client

    @property
    def T(self):
        return permute_dims(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return swapaxes(self, -1, -2)

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d array")
        return s[0]

    # ---- values
    def numpy(self):
        """The value as a new NumPy array (computes it)."""
        if self._im is not None:  # complex: the two parts combined into one NumPy array
            re, im = self._a.numpy(), self._im.numpy()
            out = np.empty(re.shape, self.dtype)
            out.real, out.imag = re, im
            return out
        return self._a.numpy()

    get = numpy  # CuPy's spelling

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("__array__: a tensord array is computed into new memory; "
                             "copy=False cannot be honoured")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        return self.numpy().item()

    def __float__(self):
        if self._im is not None:
            raise TypeError("float() of a complex array; use real() or abs() first")
        return float(self.numpy())

    def __int__(self):
        if self._im is not None:
            raise TypeError("int() of a complex array; use real() or abs() first")
        return int(self.numpy())

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError("only integer arrays can be used as an index")
        return int(self.numpy())

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is "
                             "ambiguous; use any() or all()")
        return bool(self.numpy())

    def __complex__(self):
        return complex(self.numpy())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        try:
            body = np.array2string(self.numpy(), separator=", ", prefix="tensord.ndarray(")
        except Exception as e:  # noqa: BLE001 - show the error instead of hiding the array
            body = f"<error: {e}>"
        return f"tensord.ndarray({body}, dtype={self.dtype}, device={str(self.device)!r})"

    __str__ = __repr__

    def eval(self):
        """Computes the value now (and raises its error, if any); returns self."""
        self._a.eval()
        if self._im is not None:
            self._im.eval()
        return self

    def to(self, device):
        """A copy on ``device`` (inside the engine, no trip through Python)."""
        if str(device) == self._a.device:
            return self
        if self._im is not None:
            return _cwrap(self._a.to(str(device)), self._im.to(str(device)), self._client)
        return _wrap(self._a.to(str(device)), self._client)

    def to_device(self, device, /, *, stream=None):
        """The array API's spelling of ``to``."""
        return self.to(device)

    def astype(self, dtype, copy=True, device=None):
        return astype(self, dtype, copy=copy, device=device)

    def __array_namespace__(self, *, api_version=None):
        """The array API namespace: the tensord module."""
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12",
                                                           "2024.12"):
            raise ValueError(f"api_version {api_version!r} is not supported (2024.12 is)")
        import tensord
        return tensord

    def __setitem__(self, key, value):
        """``x[key] = value``: records a new value for this array object (a ScatterND into a
        copy of the old one) and rebinds it. Copy on write: other arrays made from the old
        value, by indexing or any op, keep it (tensord has no views). The cost is one copy of
        the whole array per assignment, when the graph runs."""
        if self._im is not None:  # complex: each part assigned
            v = value if isinstance(value, ndarray) else asarray(
                value, dtype=self.dtype, device=self.device, client=self._client)
            v = astype(v, self.dtype)
            re, im = _real_part(self), _imag_part(self)
            re.__setitem__(key, _real_part(v))
            im.__setitem__(key, _imag_part(v))
            self._a, self._im = re._a, im._a
            return
        if isinstance(value, ndarray) and value._im is not None:
            raise InvalidArgument(f"x[...] = complex value: x is {self.dtype}; cast x to a "
                                  "complex dtype first")
        n = self.size
        pos = reshape(arange(n, dtype=int64, device=self.device, client=self._client),
                      self.shape)
        sel = _getitem(pos, key)
        if isinstance(value, ndarray):
            v = astype(value, self.dtype)
        else:
            v = _like(self, np.asarray(value, dtype=self.dtype), self.dtype)
        v = reshape(broadcast_to(v, sel.shape) if tuple(v.shape) != tuple(sel.shape) else v, (-1,))
        flat = _op("ScatterND", [reshape(self, (-1,)), reshape(sel, (-1, 1)), v])
        self._a = reshape(flat, self.shape)._a

    # ---- DLPack
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy is False and dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: dl_device {dl_device} needs a copy, and copy=False")
        if self._im is not None:
            # tensord holds a complex array as two real arrays: exported as one NumPy copy on
            # the CPU (interleaved complex64/complex128), never in place.
            if copy is False:
                raise BufferError("__dlpack__: a complex tensord array is two real arrays; it "
                                  "can only be exported as a copy (copy=False refused)")
            return self.numpy().__dlpack__()
        # dl_device (1, 0): a host copy is asked for (an OpenCL array is exported only so).
        to_host = dl_device is not None and tuple(dl_device) == (1, 0) and \
            self.__dlpack_device__() != (1, 0)
        if to_host and copy is False:
            raise BufferError(f"__dlpack__: the array is on {self._a.device}: dl_device (1, 0) "
                              f"needs a copy, and copy=False")
        return _C._array_dlpack(self._a, to_host)

    def __dlpack_device__(self):
        # (2, ordinal), kDLCUDA: an embedded engine's cuda tensor, lent in place; (4, ordinal),
        # kDLOpenCL: an OpenCL array (exported only as a host copy asked for with dl_device);
        # else (1, 0), kDLCPU: the embedded engine's cpu memory, or the copy read from a broker.
        if self._im is not None:  # complex: exported as a NumPy copy on the CPU
            return (1, 0)
        return tuple(_C._array_dlpack_device(self._a))

    # ---- operators
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return subtract(self, o)
    def __rsub__(self, o): return subtract(o, self)
    def __mul__(self, o): return multiply(self, o)
    def __rmul__(self, o): return multiply(o, self)
    def __truediv__(self, o): return divide(self, o)
    def __rtruediv__(self, o): return divide(o, self)
    def __floordiv__(self, o): return floor_divide(self, o)
    def __rfloordiv__(self, o): return floor_divide(o, self)
    def __mod__(self, o): return remainder(self, o)
    def __rmod__(self, o): return remainder(o, self)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __and__(self, o): return bitwise_and(self, o)
    def __rand__(self, o): return bitwise_and(o, self)
    def __or__(self, o): return bitwise_or(self, o)
    def __ror__(self, o): return bitwise_or(o, self)
    def __xor__(self, o): return bitwise_xor(self, o)
    def __rxor__(self, o): return bitwise_xor(o, self)
    def __lshift__(self, o): return _shift("bitwise_left_shift", self, o)
    def __rlshift__(self, o): return _shift("bitwise_left_shift", o, self)
    def __rshift__(self, o): return _shift("bitwise_right_shift", self, o)
    def __rrshift__(self, o): return _shift("bitwise_right_shift", o, self)
    def __neg__(self): return negative(self)
    def __pos__(self): return self
    def __abs__(self): return abs(self)
    def __invert__(self): return bitwise_invert(self)
    def __eq__(self, o): return equal(self, o)
    def __ne__(self, o): return not_equal(self, o)
    def __lt__(self, o): return less(self, o)
    def __le__(self, o): return less_equal(self, o)
    def __gt__(self, o): return greater(self, o)
    def __ge__(self, o): return greater_equal(self, o)
    __hash__ = None

    def __getitem__(self, key):
        return _getitem(self, key)

    # ---- methods mirroring the functions
    def reshape(self, *shape, **kw):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape, **kw)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return permute_dims(self, axes or None)

    def flatten(self): return reshape(self, (-1,))
    ravel = flatten
    def squeeze(self, axis=None): return squeeze(self, axis)
    def sum(self, axis=None, dtype=None, keepdims=False): return sum(self, axis=axis, dtype=dtype, keepdims=keepdims)
    def prod(self, axis=None, dtype=None, keepdims=False): return prod(self, axis=axis, dtype=dtype, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis=axis, keepdims=keepdims)
    def var(self, axis=None, keepdims=False, ddof=0): return var(self, axis=axis, keepdims=keepdims, ddof=ddof)
    def std(self, axis=None, keepdims=False, ddof=0): return std(self, axis=axis, keepdims=keepdims, ddof=ddof)
    def max(self, axis=None, keepdims=False): return max(self, axis=axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return min(self, axis=axis, keepdims=keepdims)
    def argmax(self, axis=None, keepdims=False): return argmax(self, axis=axis, keepdims=keepdims)
    def argmin(self, axis=None, keepdims=False): return argmin(self, axis=axis, keepdims=keepdims)
    def any(self, axis=None, keepdims=False): return any(self, axis=axis, keepdims=keepdims)
    def all(self, axis=None, keepdims=False): return all(self, axis=axis, keepdims=keepdims)
    def clip(self, min=None, max=None): return clip(self, min, max)
    def dot(self, o): return matmul(self, o)


def _shift(name, x, y):
    from . import _api
    return getattr(_api, name)(x, y)


def _wrap(a, client):
    obj = object.__new__(ndarray)
    obj._a = a
    obj._im = None
    obj._client = client
    return obj


def _cwrap(re, im, client):
    """A complex array from two raw real arrays of the same shape and float dtype."""
    obj = object.__new__(ndarray)
    obj._a = re
    obj._im = im
    obj._client = client
    return obj


def _complex(re, im):
    """A complex array from two real tensord arrays (float32 -> complex64, else complex128)."""
    if re.dtype != im.dtype:
        d = np.result_type(re.dtype, im.dtype)
        re, im = astype(re, d), astype(im, d)
    if re.dtype not in (float32, float64):
        d = float32 if re.dtype == float16 else float64
        re, im = astype(re, d), astype(im, d)
    if tuple(re.shape) != tuple(im.shape):
        shape = np.broadcast_shapes(re.shape, im.shape)
        re = re if tuple(re.shape) == shape else broadcast_to(re, shape)
        im = im if tuple(im.shape) == shape else broadcast_to(im, shape)
    return _cwrap(re._a, im._a, re._client)


def _is_complex(v):
    """Whether ``v`` is a complex tensord array, Python complex, or complex NumPy value."""
    if isinstance(v, ndarray):
        return v._im is not None
    if isinstance(v, complex):
        return True
    return isinstance(v, (np.ndarray, np.generic)) and v.dtype.kind == "c"


def _real_part(x):
    """The real part of a tensord array as a real array (the array itself when real)."""
    return _wrap(x._a, x._client) if x._im is not None else x


def _imag_part(x):
    """The imaginary part as a real array (zeros of x's dtype, float64 for non-float, when real)."""
    if x._im is not None:
        return _wrap(x._im, x._client)
    return zeros_like(x, dtype=x.dtype if x.dtype.kind == "f" else float64)


def _op(op_type, inputs, attrs=None, num_outputs=1, client=None):
    """Records ONNX op ``op_type`` (opset 17) over tensord arrays (None: an omitted optional
    input). Returns one array, or a list when ``num_outputs`` > 1."""
    cx = [i for i, x in enumerate(inputs) if x is not None and x._im is not None]
    if cx:  # the engine has no complex dtype: ops on complex arrays are written on their parts
        return _op_on_parts(op_type, inputs, cx, attrs, num_outputs, client)
    raw = [None if x is None else x._a for x in inputs]
    if client is None:
        client = next((x._client for x in inputs if x is not None), None) or default_client()
    outs = _C.op(op_type, raw, attrs or {}, num_outputs)
    res = [_wrap(o, client) for o in outs]
    return res[0] if num_outputs == 1 else res


# ONNX ops that are linear in their data inputs (these positions; "all": every input), so a
# complex array's parts go through them separately: element moves, adds, sums.
_PART_OPS = {
    "Gather": (0,), "GatherND": (0,), "GatherElements": (0,), "Slice": (0,), "Reshape": (0,),
    "Transpose": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Expand": (0,), "Tile": (0,),
    "Split": (0,), "Compress": (0,), "Trilu": (0,), "Flatten": (0,), "Identity": (0,),
    "Concat": "all", "Where": (1, 2), "ScatterND": (0, 2), "ScatterElements": (0, 2),
    "Add": "all", "Sub": "all", "Neg": (0,), "ReduceSum": (0,), "ReduceMean": (0,),
    "CumSum": (0,), "Pad": (0, 2),
}


def _op_on_parts(op_type, inputs, cx, attrs, num_outputs, client):
    spec = _PART_OPS.get(op_type)
    data = range(len(inputs)) if spec == "all" else (spec or ())
    other = [i for i in cx if i not in data]
    if spec is None or other:
        i = other[0] if other else cx[0]
        raise InvalidArgument(f"{op_type}: input {i} is complex ({inputs[i].dtype}); tensord "
                              f"computes complex arrays as two real arrays, and {op_type} has "
                              f"no complex version")
    part = float64 if builtins.any(inputs[i].dtype == complex128 for i in cx) else float32
    for i in data:
        x = inputs[i]
        if x is not None and x._im is None and x.dtype != part and x.dtype.kind in "f":
            part = float64 if x.dtype == float64 else part

    def parts(k):
        out = list(inputs)
        for i in data:
            x = inputs[i]
            if x is None:
                continue
            p = (_real_part(x) if k == 0 else _imag_part(x))
            out[i] = astype(p, part)
        return out

    re = _op(op_type, parts(0), attrs, num_outputs, client)
    im = _op(op_type, parts(1), attrs, num_outputs, client)
    if num_outputs == 1:
        return _complex(re, im)
    return [_complex(r, i) for r, i in zip(re, im)]


def op(op_type, *inputs, num_outputs=1, **attrs):
    """Any ONNX op by name: ``tensord.op("HardSwish", x)``, ``tensord.op("TopK", x, k,
    num_outputs=2, axis=-1)``. Non-array inputs are made arrays on the first array's device."""
    first = next((x for x in inputs if isinstance(x, ndarray)), None)
    arrs = [x if (x is None or isinstance(x, ndarray)) else _like(first, x) for x in inputs]
    return _op(op_type, arrs, attrs, num_outputs)


def _like(ref, value, dtype=None):
    """A small value as an embedded constant beside ``ref`` (same client and device)."""
    client = ref._client if ref is not None else default_client()
    device = ref._a.device if ref is not None else ""
    a = np.asarray(value, dtype=dtype)
    return _wrap(client._c.constant(a, device), client)


def _ints(ref, values):
    return _like(ref, np.asarray(list(values), dtype=np.int64).reshape(-1), np.int64)


# ---------------------------------------------------------------- creation
def asarray(obj, dtype=None, device=None, copy=None, client=None):
    """An array on ``device`` (None: the client's default) from NumPy data, Python scalars or
    lists, a tensord array (moved/cast as asked), or any DLPack producer (PyTorch tensors)."""
    dtype = _np_dtype(dtype)
    if isinstance(obj, ndarray):
        r = obj
        if copy:  # a new array object: x[...] = v rebinds only x (copy on write)
            r = _wrap(obj._a, obj._client)
            r._im = obj._im
        if dtype is not None and r.dtype != dtype:
            r = astype(r, dtype)
        if device is not None and str(device) != r._a.device:
            r = r.to(device)
        return r
    if not isinstance(obj, (np.ndarray, np.generic, list, tuple, int, float, bool)) and \
            hasattr(obj, "__dlpack__"):
        r = from_dlpack(obj, device=device, client=client)
        return r if dtype is None else astype(r, dtype)
    client = client or default_client()
    a = np.asarray(obj, dtype=dtype)
    if a.dtype.kind == "c":  # two real arrays
        if a.dtype not in _PART:
            raise InvalidArgument(f"asarray: dtype {a.dtype} is not supported by tensord "
                                  "(complex64 and complex128 are)")
        part = _PART[a.dtype]
        re = client._c.from_numpy(np.array(a.real, dtype=part, order="C"), _dev(device))
        im = client._c.from_numpy(np.array(a.imag, dtype=part, order="C"), _dev(device))
        return _cwrap(re, im, client)
    if a.dtype not in _CODE:
        if a.dtype.kind == "O":
            raise InvalidArgument("asarray: cannot convert a ragged or object sequence")
        raise InvalidArgument(f"asarray: dtype {a.dtype} is not supported by tensord")
    return _wrap(client._c.from_numpy(a, _dev(device)), client)


array = asarray


def _default_float(dtype):
    return float64 if dtype is None else _np_dtype(dtype)


def full(shape, fill_value, dtype=None, device=None, client=None):
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if builtins.any(s < 0 for s in shape):
        raise InvalidArgument(f"full: negative dimension in shape {shape}")
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
        if dtype == np.dtype("int64") or dtype.kind == "f":
            dtype = np.dtype(dtype)
    dtype = _np_dtype(dtype)
    client = client or default_client()
    if dtype.kind == "c" or isinstance(fill_value, complex):
        if dtype.kind != "c":
            raise InvalidArgument(f"full: a complex fill value {fill_value} for dtype {dtype}")
        v = complex(fill_value)
        part = _PART[dtype]
        return _complex(full(shape, v.real, part, device, client),
                        full(shape, v.imag, part, device, client))
    value = _wrap(client._c.constant(np.asarray(fill_value, dtype=dtype).reshape(()), _dev(device)),
                  client)
    # Made on the device (Expand of a scalar): nothing is uploaded.
    return _op("Expand", [value, _ints(value, shape)])


def zeros(shape, dtype=None, device=None, client=None):
    return full(shape, 0, _default_float(dtype), device, client)


def ones(shape, dtype=None, device=None, client=None):
    return full(shape, 1, _default_float(dtype), device, client)


def empty(shape, dtype=None, device=None, client=None):
    return zeros(shape, dtype, device, client)


def _like_args(x, dtype, device):
    return (dtype if dtype is not None else x.dtype,
            device if device is not None else x.device)


def full_like(x, fill_value, dtype=None, device=None):
    dtype, device = _like_args(x, dtype, device)
    return full(x.shape, fill_value, dtype, device, x._client)


def zeros_like(x, dtype=None, device=None):
    return full_like(x, 0, dtype, device)


def ones_like(x, dtype=None, device=None):
    return full_like(x, 1, dtype, device)


def empty_like(x, dtype=None, device=None):
    return full_like(x, 0, dtype, device)


def arange(start, stop=None, step=1, dtype=None, device=None, client=None):
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = np.result_type(start, stop, step)
        if dtype.kind in "iub":
            dtype = np.dtype("int64")
    dtype = _np_dtype(dtype)
    if dtype.kind == "c" or builtins.any(isinstance(v, complex) for v in (start, stop, step)):
        raise InvalidArgument("arange: complex values are not supported (the standard defines "
                              "arange for real numbers); use linspace")
    n = builtins.max(0, int(math.ceil((stop - start) / step)))
    if dtype.kind == "u" or dtype.itemsize < 4 or n == 0:
        return asarray(np.arange(start, stop, step, dtype=dtype), device=device, client=client)
    client = client or default_client()
    s = _wrap(client._c.constant(np.asarray(start, dtype=dtype), _dev(device)), client)
    return _op("Range", [s, _like(s, stop, dtype), _like(s, step, dtype)])


def linspace(start, stop, num, dtype=None, device=None, endpoint=True, client=None):
    return asarray(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype),
                   device=device, client=client)


def eye(n_rows, n_cols=None, k=0, dtype=None, device=None, client=None):
    return asarray(np.eye(n_rows, n_cols, k, dtype=_default_float(dtype)), device=device,
                   client=client)


def tril(x, k=0):
    return _op("Trilu", [x, _like(x, np.int64(k))], {"upper": 0})


def triu(x, k=0):
    return _op("Trilu", [x, _like(x, np.int64(k))], {"upper": 1})


def from_dlpack(x, /, *, device=None, copy=None, client=None):
    """An array sharing ``x``'s memory (a NumPy array, a PyTorch cpu tensor, any DLPack
    producer): zero copy on the embedded engine's cpu devices when the data is 64-byte aligned
    (PyTorch's always is), one copy otherwise (a broker, unaligned or strided data). The
    producer's memory must not be changed while tensord uses it."""
    if isinstance(x, ndarray):
        return x if device is None else x.to(device)
    client = client or default_client()
    if "complex" in str(getattr(x, "dtype", "")):  # no complex engine dtype: via NumPy
        return asarray(np.from_dlpack(x), device=device, client=client)
    try:
        cap = x.__dlpack__()
    except (BufferError, TypeError, RuntimeError):  # e.g. NumPy's bool arrays (DLPack 0.x)
        return asarray(np.asarray(x), device=device, client=client)
    r = _C._array_from_capsule(client._c, cap, _dev(device))
    if r is None and getattr(x, "__dlpack_device__", lambda: (1, 0))()[0] == 2:
        raise ValueError("from_dlpack: a strided CUDA tensor; make it contiguous first "
                         "(torch: x.contiguous())")
    if r is None:  # strided: one copy through NumPy
        return asarray(np.require(np.from_dlpack(x), requirements="C"), device=device, client=client)
    return _wrap(r, client)


def _host_pointer(x):
    """The address of ``x``'s bytes in this process (0 when they are elsewhere): for tests."""
    return _C._array_host_pointer(x._a)


# ---------------------------------------------------------------- dtype promotion
def _is_scalar(v):
    return isinstance(v, (int, float, bool, np.generic)) and not isinstance(v, ndarray)


def _operands(x, y, *, float_result=False):
    """Two operands as arrays of one dtype (NumPy 1.24 promotion: Python scalars and 0-d values
    adopt the array's dtype when they fit)."""
    # torch tensors: through DLPack, into the other operand's client
    cl = x._client if isinstance(x, ndarray) else y._client if isinstance(y, ndarray) else None
    x, y = _interop.from_foreign(x, cl), _interop.from_foreign(y, cl)
    xa, ya = isinstance(x, ndarray), isinstance(y, ndarray)
    if not xa and not ya:
        x = asarray(x)
        xa = True
    ref = x if xa else y
    if (xa and x.dtype is bfloat16) or (ya and y.dtype is bfloat16):
        if xa and ya:
            dt = _promote_bf16(bfloat16, y.dtype if x.dtype is bfloat16 else x.dtype)
        else:
            other = y if xa else x
            dt = _promote_bf16(bfloat16, other.dtype if isinstance(other, (np.ndarray, np.generic))
                               else type(other))
        return _cast_operand(x, dt, ref), _cast_operand(y, dt, ref)
    if xa and ya:
        dt = np.result_type(x.dtype, y.dtype)
    else:
        other = y if xa else x
        if isinstance(other, np.ndarray) and other.ndim > 0:
            dt = np.result_type(ref.dtype, other.dtype)
        elif isinstance(other, (list, tuple)):
            other = np.asarray(other)
            dt = np.result_type(ref.dtype, other.dtype)
        else:
            dt = np.result_type(ref.dtype, other)
    if float_result and dt.kind in "iub":
        dt = float64
    x = _cast_operand(x, dt, ref)
    y = _cast_operand(y, dt, ref)
    return x, y


def _cast_operand(v, dt, ref):
    if isinstance(v, ndarray):
        return v if v.dtype is dt or v.dtype == dt else astype(v, dt)
    if dt is bfloat16:  # a scalar: made in float32 on the array's device, then cast
        return astype(_cast_operand(v, float32, ref), bfloat16)
    a = np.asarray(v, dtype=dt)
    if a.size <= 1:
        return _like(ref, a, dt)
    return _wrap(ref._client._c.from_numpy(a, ref._a.device), ref._client)


def astype(x, dtype, /, *, copy=True, device=None):
    dtype = _np_dtype(dtype)
    if device is not None and str(device) != x._a.device:
        x = x.to(device)
    if x.dtype is dtype or (dtype is not bfloat16 and x.dtype is not bfloat16 and x.dtype == dtype):
        return x
    if x._im is not None:
        re, im = _real_part(x), _imag_part(x)
        if dtype.kind == "c":
            return _complex(astype(re, _PART[dtype]), astype(im, _PART[dtype]))
        if dtype == bool_:
            return logical_or(not_equal(re, 0), not_equal(im, 0))
        return astype(re, dtype)  # the imaginary part is discarded (as NumPy)
    if dtype.kind == "c":
        re = astype(x, _PART[dtype])
        return _complex(re, zeros_like(re))
    return _op("Cast", [x], {"to": _CODE[dtype]})


def _binary(op_type, x, y, **kw):
    x, y = _operands(x, y, **kw)
    return _op(op_type, [x, y])


def _to_float(x):
    x = asarray(x) if not isinstance(x, ndarray) else x
    return x if _is_float(x.dtype) or x._im is not None else astype(x, float64)


# ---------------------------------------------------------------- element-wise
def add(x, y): return _binary("Add", x, y)
def subtract(x, y): return _binary("Sub", x, y)
def multiply(x, y): return _binary("Mul", x, y)
def divide(x, y): return _binary("Div", x, y, float_result=True)
def maximum(x, y): return _binary("Max", x, y)
def minimum(x, y): return _binary("Min", x, y)
def equal(x, y): return _binary("Equal", x, y)
def not_equal(x, y): return logical_not(equal(x, y))
def less(x, y): return _binary("Less", x, y)
def less_equal(x, y): return _binary("LessOrEqual", x, y)
def greater(x, y): return _binary("Greater", x, y)
def greater_equal(x, y): return _binary("GreaterOrEqual", x, y)
true_divide = divide


def pow(x, y):  # noqa: A001 - the array API's name
    return _binary("Pow", x, y)


power = pow


def floor_divide(x, y):
    x, y = _operands(x, y)
    if _is_float(x.dtype):
        return floor(_op("Div", [x, y]))
    r = _op("Mod", [x, y], {"fmod": 0})
    return _op("Div", [_op("Sub", [x, r]), y])


def remainder(x, y):
    x, y = _operands(x, y)
    if _is_float(x.dtype):
        return _op("Sub", [x, _op("Mul", [floor(_op("Div", [x, y])), y])])
    return _op("Mod", [x, y], {"fmod": 0})


mod = remainder


def _logical(op_bool, op_int, x, y):
    x, y = _operands(x, y)
    return _op(op_bool if x.dtype == bool_ else op_int, [x, y])


def bitwise_and(x, y): return _logical("And", "BitwiseAnd", x, y)
def bitwise_or(x, y): return _logical("Or", "BitwiseOr", x, y)
def bitwise_xor(x, y): return _logical("Xor", "BitwiseXor", x, y)


def bitwise_invert(x):
    return _op("Not" if x.dtype == bool_ else "BitwiseNot", [x])


def logical_and(x, y): return _binary("And", astype(asarray(x), bool_), astype(asarray(y), bool_))
def logical_or(x, y): return _binary("Or", astype(asarray(x), bool_), astype(asarray(y), bool_))
def logical_xor(x, y): return _binary("Xor", astype(asarray(x), bool_), astype(asarray(y), bool_))


def logical_not(x):
    return _op("Not", [astype(asarray(x), bool_)])


def _unary(op_type, float_only=True):
    def f(x):
        x = asarray(x) if not isinstance(x, ndarray) else x
        return _op(op_type, [_to_float(x) if float_only else x])
    f.__name__ = op_type.lower()
    f.__doc__ = f"Element-wise ONNX {op_type}."
    return f


exp = _unary("Exp")
log = _unary("Log")
sqrt = _unary("Sqrt")
sin = _unary("Sin")
cos = _unary("Cos")
tan = _unary("Tan")
sinh = _unary("Sinh")
cosh = _unary("Cosh")
tanh = _unary("Tanh")
arcsin = asin = _unary("Asin")
arccos = acos = _unary("Acos")
arctan = atan = _unary("Atan")
arcsinh = asinh = _unary("Asinh")
arccosh = acosh = _unary("Acosh")
arctanh = atanh = _unary("Atanh")
erf = _unary("Erf")
sigmoid = _unary("Sigmoid")
reciprocal = _unary("Reciprocal")
negative = _unary("Neg", float_only=False)
sign = _unary("Sign", float_only=False)
abs = _unary("Abs", float_only=False)  # noqa: A001


def floor(x):
    x = asarray(x)
    return x if x.dtype.kind in "iub" else _op("Floor", [x])


def ceil(x):
    x = asarray(x)
    return x if x.dtype.kind in "iub" else _op("Ceil", [x])


def round(x):  # noqa: A001 - half to even, as NumPy
    x = asarray(x)
    return x if x.dtype.kind in "iub" else _op("Round", [x])


def trunc(x):
    x = asarray(x)
    return x if x.dtype.kind in "iub" else where(x < 0, ceil(x), floor(x))


def square(x): x = asarray(x); return multiply(x, x)
def log1p(x): return log(add(_to_float(x), 1))
def expm1(x): return subtract(exp(x), 1)
def log2(x): return divide(log(x), math.log(2))
def log10(x): return divide(log(x), math.log(10))
def exp2(x): return pow(2.0, _to_float(x))
def isnan(x): x = asarray(x); return _op("IsNaN", [x]) if _is_float(x.dtype) else full_like(x, False, bool_)
def isinf(x): x = asarray(x); return _op("IsInf", [x]) if _is_float(x.dtype) else full_like(x, False, bool_)
def isfinite(x): return logical_not(logical_or(isnan(x), isinf(x)))


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (broadcast)."""
    arrays = [v for v in (condition, x, y) if isinstance(v, ndarray)]
    ref = arrays[0] if arrays else None
    condition = asarray(condition, client=ref._client if ref else None,
                        device=ref.device if ref else None) if not isinstance(condition, ndarray) else condition
    if not isinstance(x, ndarray) and not isinstance(y, ndarray):
        x = asarray(x, client=condition._client, device=condition.device)
    x, y = _operands(x, y)
    return _op("Where", [astype(condition, bool_), x, y])


def clip(x, min=None, max=None):  # noqa: A002
    x = asarray(x)
    lo = None if min is None else _cast_operand(min, x.dtype, x)
    hi = None if max is None else _cast_operand(max, x.dtype, x)
    if (lo is not None and lo.ndim) or (hi is not None and hi.ndim):
        r = x if lo is None else maximum(x, lo)
        return r if hi is None else minimum(r, hi)
    return _op("Clip", [x, lo, hi])


def matmul(x, y):
    x, y = _operands(x, y)
    if x.ndim == 0 or y.ndim == 0:
        raise InvalidArgument("matmul: operands must have at least one dimension")
    return _op("MatMul", [x, y])


def dot(x, y):
    return matmul(x, y)


def vecdot(x, y, axis=-1):
    return sum(multiply(x, y), axis=axis)


# ---------------------------------------------------------------- shapes
def _axis(axis, ndim, what="axis"):
    a = operator.index(axis)
    if not -ndim <= a < builtins.max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
        raise InvalidArgument(f"{what} {axis} is out of range for an array of {ndim} dims")
    return a % ndim if ndim else 0


def _axes(axis, ndim):
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (tuple, list)):
        out = [_axis(a, ndim) for a in axis]
    else:
        out = [_axis(axis, ndim)]
    if len(set(out)) != len(out):
        raise InvalidArgument(f"repeated axis in {axis}")
    return out


def reshape(x, shape, copy=None):
    x = asarray(x)
    if isinstance(shape, int):
        shape = (shape,)
    shape = [int(s) for s in shape]
    if list(x.shape) == shape:
        return x
    return _op("Reshape", [x, _ints(x, shape)], {"allowzero": 1})


def permute_dims(x, axes=None):
    x = asarray(x)
    n = x.ndim
    axes = list(reversed(range(n))) if axes is None else [_axis(a, n) for a in axes]
    if sorted(axes) != list(range(n)):
        raise InvalidArgument(f"transpose: axes {axes} are not a permutation of {n} dims")
    if axes == list(range(n)):
        return x
    return _op("Transpose", [x], {"perm": axes})


def transpose(x, axes=None):
    return permute_dims(x, axes)


def swapaxes(x, a, b):
    n = x.ndim
    perm = list(range(n))
    a, b = _axis(a, n), _axis(b, n)
    perm[a], perm[b] = perm[b], perm[a]
    return permute_dims(x, perm)


def moveaxis(x, source, destination, /):
    n = x.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise InvalidArgument(f"moveaxis: {len(src)} sources for {len(dst)} destinations")
    src, dst = _axes(src, n), _axes(dst, n)
    perm = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return permute_dims(x, perm)


def squeeze(x, axis=None):
    x = asarray(x)
    shape = x.shape
    axes = [i for i, s in enumerate(shape) if s == 1] if axis is None else _axes(axis, x.ndim)
    for a in axes:
        if shape[a] != 1:
            raise InvalidArgument(f"squeeze: axis {a} has size {shape[a]}, not 1")
    if not axes:
        return x
    return _op("Squeeze", [x, _ints(x, axes)])


def expand_dims(x, axis=0):
    x = asarray(x)
    axes = axis if isinstance(axis, (tuple, list)) else [axis]
    n = x.ndim + len(axes)
    for a in axes:  # the standard: IndexError for an axis outside [-ndim - 1, ndim]
        if not -n <= operator.index(a) < n:
            raise IndexError(f"expand_dims: axis {a} is out of range for an array of "
                             f"{x.ndim} dims")
    axes = [_axis(a, n) for a in axes]
    return _op("Unsqueeze", [x, _ints(x, axes)])


def broadcast_to(x, shape):
    x = asarray(x)
    return _op("Expand", [x, _ints(x, shape)])


def broadcast_arrays(*arrays):
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def concat(arrays, axis=0):
    arrays = list(arrays)
    if not arrays:
        raise InvalidArgument("concat: no arrays")
    ref = next((a for a in arrays if isinstance(a, ndarray)), None)
    arrays = [a if isinstance(a, ndarray) else asarray(a, client=ref._client if ref else None,
                                                        device=ref.device if ref else None)
              for a in arrays]
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    dt = np.result_type(*(a.dtype for a in arrays))
    arrays = [astype(a, dt) for a in arrays]
    if arrays[0].ndim == 0:
        raise InvalidArgument("concat: zero-dimensional arrays cannot be concatenated")
    return _op("Concat", arrays, {"axis": _axis(axis, arrays[0].ndim)})


concatenate = concat


def stack(arrays, axis=0):
    arrays = [asarray(a) for a in arrays]
    if not arrays:
        raise InvalidArgument("stack: no arrays")
    n = arrays[0].ndim + 1
    ax = _axis(axis, n)
    return concat([expand_dims(a, ax) for a in arrays], axis=ax)


def flip(x, axis=None):
    x = asarray(x)
    axes = _axes(axis, x.ndim)
    if not axes:
        return x
    big = -(2 ** 63)
    return _op("Slice", [x, _ints(x, [-1] * len(axes)), _ints(x, [big] * len(axes)),
                         _ints(x, axes), _ints(x, [-1] * len(axes))])


def tile(x, reps):
    x = asarray(x)
    reps = [reps] if isinstance(reps, int) else list(reps)
    while len(reps) < x.ndim:
        reps.insert(0, 1)
    if len(reps) > x.ndim:
        x = reshape(x, (1,) * (len(reps) - x.ndim) + tuple(x.shape))
    return _op("Tile", [x, _ints(x, reps)])


def take(x, indices, axis=None):
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if not isinstance(indices, ndarray):
        indices = asarray(np.asarray(indices, dtype=np.int64), device=x.device, client=x._client)
    return _op("Gather", [x, astype(indices, int64)], {"axis": _axis(axis, x.ndim)})


def split(x, indices_or_sections, axis=0):
    x = asarray(x)
    ax = _axis(axis, x.ndim)
    n = x.shape[ax]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise InvalidArgument(f"split: {n} is not divisible into {indices_or_sections} sections")
        sizes = [n // indices_or_sections] * indices_or_sections
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes = [builtins.max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
    return _op("Split", [x, _ints(x, sizes)], {"axis": ax}, num_outputs=len(sizes))


def _getitem(x, key):
    if isinstance(key, ndarray) or (isinstance(key, (np.ndarray, list)) and not isinstance(key, tuple)):
        k = key if isinstance(key, ndarray) else None
        dt = key.dtype if k is not None else np.asarray(key).dtype
        if dt == bool_:  # mask: the selected elements, flattened (data-dependent size)
            mask = k if k is not None else asarray(key, device=x.device, client=x._client)
            m = mask.ndim
            if tuple(mask.shape) != tuple(x.shape)[:m]:
                raise IndexError(f"boolean index of shape {mask.shape} does not match {x.shape}")
            rest = tuple(x.shape)[m:]
            # a 0-d mask adds an axis of 1 (True) or 0 (False); a k-d one flattens k axes
            flat = reshape(x, (int(np.prod(mask.shape, dtype=np.int64)),) + rest)
            return _op("Compress", [flat, reshape(mask, (-1,))], {"axis": 0})
        idx = k if k is not None else asarray(np.asarray(key, dtype=np.int64), device=x.device,
                                               client=x._client)
        if x.ndim == 0:
            raise IndexError("too many indices for a 0-d array")
        n = x.shape[0]
        idx = where(idx < 0, idx + n, idx) if idx.dtype.kind == "i" else idx
        return _op("Gather", [x, astype(idx, int64)], {"axis": 0})
    if not isinstance(key, tuple):
        key = (key,)
    if builtins.any(isinstance(k, ndarray) for k in key) and builtins.all(
            isinstance(k, ndarray) and k.dtype.kind in "iu" or
            (not isinstance(k, (ndarray, bool)) and isinstance(k, (int, np.integer)))
            for k in key):
        return _getitem_arrays(x, key)
    n_ell = builtins.sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    shape = x.shape
    if consumed > len(shape):
        raise IndexError(f"too many indices: {consumed} for an array of {len(shape)} dims")
    if n_ell:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - consumed) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - consumed)
    starts, ends, axes, steps, squeeze_axes, new_axes = [], [], [], [], [], []
    dim = 0  # input axis
    out = 0  # result axis after squeezing
    for k in key:
        if k is None:
            new_axes.append(out)
            out += 1
            continue
        n = shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if not (start == 0 and stop == n and step == 1):
                if step < 0 and stop < 0:
                    stop = -(2 ** 63)
                starts.append(start)
                ends.append(stop)
                axes.append(dim)
                steps.append(step)
            out += 1
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError(f"only integers, slices, None, '...' and arrays are valid "
                                 f"indices, not {type(k).__name__}") from None
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            i %= n
            starts.append(i)
            ends.append(i + 1)
            axes.append(dim)
            steps.append(1)
            squeeze_axes.append(dim)
        dim += 1
    r = x
    if axes:
        r = _op("Slice", [r, _ints(x, starts), _ints(x, ends), _ints(x, axes), _ints(x, steps)])
    if squeeze_axes:
        r = _op("Squeeze", [r, _ints(x, squeeze_axes)])
    if new_axes:
        r = _op("Unsqueeze", [r, _ints(x, new_axes)])
    return r


def _getitem_arrays(x, key):
    """``x[i, j_array, ...]``: integer arrays and ints, broadcast together (one GatherND)."""
    if len(key) > x.ndim:
        raise IndexError(f"too many indices: {len(key)} for an array of {x.ndim} dims")
    idx = []
    for k, n in zip(key, x.shape):
        if not isinstance(k, ndarray):
            if not -n <= int(k) < n:
                raise IndexError(f"index {k} is out of bounds for an axis of size {n}")
            k = _like(x, np.int64(k), np.int64)
        k = astype(k, int64)
        idx.append(where(k < 0, k + n, k))
    shape = np.broadcast_shapes(*(k.shape for k in idx))
    idx = [expand_dims(broadcast_to(k, shape), -1) for k in idx]
    return _op("GatherND", [x, concat(idx, axis=-1) if len(idx) > 1 else idx[0]])


# ---------------------------------------------------------------- reductions
def _reduce(op_type, x, axis, keepdims, axes_as_input=False):
    x = asarray(x)
    axes = _axes(axis, x.ndim)
    if x.ndim == 0 or (axis is not None and not axes):  # axis=(): nothing is reduced
        return x
    attrs = {"keepdims": int(bool(keepdims))}
    if axes_as_input:
        return _op(op_type, [x, _ints(x, axes)], attrs)
    attrs["axes"] = axes
    return _op(op_type, [x], attrs)


def _acc_dtype(d):
    if d == bool_ or (d.kind == "i" and d.itemsize < 8):
        return int64
    if d.kind == "u" and d.itemsize < 8:
        return uint64
    return d


def sum(x, axis=None, dtype=None, keepdims=False):  # noqa: A001
    x = asarray(x)
    x = astype(x, _np_dtype(dtype) or _acc_dtype(x.dtype))
    return _reduce("ReduceSum", x, axis, keepdims, axes_as_input=True)


def prod(x, axis=None, dtype=None, keepdims=False):
    x = asarray(x)
    x = astype(x, _np_dtype(dtype) or _acc_dtype(x.dtype))
    return _reduce("ReduceProd", x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    return _reduce("ReduceMean", _to_float(x), axis, keepdims)


def var(x, axis=None, keepdims=False, ddof=0):
    x = _to_float(x)
    m = mean(x, axis=axis, keepdims=True)
    d = subtract(x, m)
    s = sum(multiply(d, d), axis=axis, keepdims=keepdims)
    n = int(np.prod([x.shape[a] for a in _axes(axis, x.ndim)], dtype=np.int64))
    return divide(s, builtins.max(n - ddof, 0))


def std(x, axis=None, keepdims=False, ddof=0):
    return sqrt(var(x, axis=axis, keepdims=keepdims, ddof=ddof))


def _check_nonempty(x, axis, what):
    shape = x.shape
    if builtins.any(shape[a] == 0 for a in _axes(axis, len(shape))):
        raise InvalidArgument(f"{what}: zero-size reduction has no identity")


def max(x, axis=None, keepdims=False):  # noqa: A001
    x = asarray(x)
    _check_nonempty(x, axis, "max")
    return _reduce("ReduceMax", x, axis, keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    x = asarray(x)
    _check_nonempty(x, axis, "min")
    return _reduce("ReduceMin", x, axis, keepdims)


amax, amin = max, min


def _arg(op_type, x, axis, keepdims):
    x = asarray(x)
    _check_nonempty(x, axis, op_type)
    if axis is None:
        r = _op(op_type, [reshape(x, (-1,))], {"axis": 0, "keepdims": 0})
        return reshape(r, (1,) * x.ndim) if keepdims else r
    return _op(op_type, [x], {"axis": _axis(axis, x.ndim), "keepdims": int(bool(keepdims))})


def argmax(x, axis=None, keepdims=False):
    return _arg("ArgMax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    return _arg("ArgMin", x, axis, keepdims)


def any(x, axis=None, keepdims=False):  # noqa: A001
    x = astype(astype(asarray(x), bool_), int32)
    if x.size == 0:
        return astype(sum(x, axis=axis, keepdims=keepdims), bool_)
    return astype(_reduce("ReduceMax", x, axis, keepdims), bool_)


def all(x, axis=None, keepdims=False):  # noqa: A001
    x = astype(astype(asarray(x), bool_), int32)
    if x.size == 0:
        return logical_not(astype(sum(x, axis=axis, keepdims=keepdims), bool_))
    return astype(_reduce("ReduceMin", x, axis, keepdims), bool_)


def cumsum(x, axis=None):
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    x = astype(x, _acc_dtype(x.dtype))
    return _op("CumSum", [x, _like(x, np.int64(_axis(axis, x.ndim)))])


# ---------------------------------------------------------------- models
class Model:
    """An ONNX model loaded into a client's session on one device. Calling it returns arrays
    that stay on the device until looked at."""

    def __init__(self, raw, client):
        self._m = raw
        self._client = client

    @property
    def device(self):
        return Device(self._m.device)

    @property
    def input_names(self):
        return list(self._m.input_names)

    @property
    def output_names(self):
        return list(self._m.output_names)

    @staticmethod
    def _specs(names, types):
        return [TensorSpec(n, _spec_dtype(d), tuple(None if k < 0 else k for k in shape))
                for n, (d, shape) in zip(names, types)]

    @property
    def inputs(self):
        """The inputs as ``TensorSpec(name, dtype, shape)``, in the order ``run`` binds them:
        dtype a NumPy dtype (None where the model does not declare it), shape a tuple with
        None for a dimension of any size (a symbolic batch)."""
        return self._specs(self.input_names, self._m.input_types)

    @property
    def outputs(self):
        """The outputs as ``TensorSpec(name, dtype, shape)`` (see ``inputs``)."""
        return self._specs(self.output_names, self._m.output_types)

    @property
    def input_shapes(self):
        """The inputs' shapes (tuples; None for a dimension of any size)."""
        return [s.shape for s in self.inputs]

    @property
    def input_dtypes(self):
        """The inputs' dtypes (NumPy dtypes; None where undeclared)."""
        return [s.dtype for s in self.inputs]

    @property
    def output_shapes(self):
        """The outputs' shapes (tuples; None for a dimension known only once run)."""
        return [s.shape for s in self.outputs]

    @property
    def output_dtypes(self):
        """The outputs' dtypes (NumPy dtypes; None where undeclared)."""
        return [s.dtype for s in self.outputs]

    def _input(self, value, i):
        if isinstance(value, ndarray):
            return value
        dtype_name = self._m.input_types[i][0]
        dt = np.dtype(dtype_name) if dtype_name not in ("undefined", "bfloat16") else None
        if hasattr(value, "__dlpack__") and not isinstance(value, (np.ndarray, np.generic)):
            return from_dlpack(value, device=self.device, client=self._client)
        return asarray(value, dtype=dt, device=self.device, client=self._client)

    def run(self, inputs, devices=None):
        """``inputs``: a dict by input name or a list in order. Returns a dict by output name.
        ``devices`` (a list of device names): data parallel — every input split along axis 0
        over the devices, the parts run at once, the outputs gathered on the first device."""
        names = self.input_names
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - set(names))
            missing = [n for n in names if n not in inputs]
            if unknown or missing:
                raise InvalidArgument(f"model inputs are {names}; unknown {unknown}, "
                                      f"missing {missing}")
            values = [inputs[n] for n in names]
        else:
            values = list(inputs)
            if len(values) != len(names):
                raise InvalidArgument(f"model takes {len(names)} inputs ({names}), got "
                                      f"{len(values)}")
        for n, v in zip(names, values):
            if _is_complex(v) or "complex" in str(getattr(v, "dtype", "")):
                raise InvalidArgument(f"model input {n!r} is complex ({v.dtype}); models take "
                                      "real tensors (pass real() and imag() as two inputs)")
        arrays = [self._input(v, i) for i, v in enumerate(values)]
        outs = self._m.run([a._a for a in arrays], [str(d) for d in (devices or [])])
        return {n: _wrap(o, self._client) for n, o in zip(self.output_names, outs)}

    def run_async(self, inputs, devices=None):
        """``run`` in the background: returns a ``ModelFuture`` — a
        ``concurrent.futures.Future`` (``.result()``, ``.done()``, callbacks) that asyncio code
        can also ``await`` — whose result is ``run``'s dict by output name, the outputs
        computed. The inputs are taken (copied to the client's arrays) before it returns, so
        the caller may change its NumPy arrays afterwards. Errors (a wrong input, a failed
        run) are the future's exception."""
        fut = ModelFuture()
        try:
            names = self.input_names
            if isinstance(inputs, dict):
                bound = {n: self._input(v, names.index(n)) if n in names else v
                         for n, v in inputs.items()}
            else:
                bound = [self._input(v, i) if i < len(names) else v
                         for i, v in enumerate(inputs)]
        except Exception as e:  # noqa: BLE001 - delivered through the future
            fut.set_exception(e)
            return fut

        def work():
            if not fut.set_running_or_notify_cancel():
                return
            try:
                outs = self.run(bound, devices)
                for a in outs.values():
                    a._a.eval()
                fut.set_result(outs)
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

        _async_pool().submit(work)
        return fut

    def __call__(self, *args, devices=None, **kwargs):
        if kwargs:
            if args:
                raise InvalidArgument("pass model inputs by position or by name, not both")
            outs = self.run(kwargs, devices)
        else:
            outs = self.run(list(args), devices)
        values = list(outs.values())
        return values[0] if len(values) == 1 else tuple(values)

    def __repr__(self):
        return f"tensord.Model(inputs={self.input_names}, outputs={self.output_names}, device={str(self.device)!r})"


TensorSpec = _collections.namedtuple("TensorSpec", ["name", "dtype", "shape"])
TensorSpec.__doc__ = ("A model input's or output's name, dtype (a NumPy dtype, None where "
                      "undeclared) and shape (a tuple, None for a dimension of any size).")


def _spec_dtype(name):
    if name == "undefined":
        return None
    if name == "bfloat16":
        return bfloat16
    return np.dtype(name)


class ModelFuture(_futures.Future):
    """What ``Model.run_async`` returns: a ``concurrent.futures.Future`` that an asyncio
    coroutine can also ``await`` (``asyncio.wrap_future``)."""

    def __await__(self):
        return _asyncio.wrap_future(self).__await__()


_async_pool_lock = _threading.Lock()
_async_pool_exec = None


def _async_pool():
    # A few threads run the models' runs (each mostly waits for the engine or the broker,
    # without the GIL); made on first use.
    global _async_pool_exec
    with _async_pool_lock:
        if _async_pool_exec is None:
            _async_pool_exec = _futures.ThreadPoolExecutor(
                max_workers=builtins.min(32, (os.cpu_count() or 1) + 4),
                thread_name_prefix="tensord-run-async")
        return _async_pool_exec


def open_model(name, client=None):
    """Opens a named model: one the broker loaded at start (``tensord serve --models DIR``,
    DIR/NAME/model.onnx), or, embedded, one of TENSORD_MODELS. Nothing is sent or loaded: the
    model is held once for every session, and not charged to this one. Runs like ``load()``'s
    models. Unknown names raise tensord.NotFound (listing the models there are)."""
    client = client or default_client()
    return Model(client._c.open_model(str(name)), client)


def list_models(client=None):
    """The named models, ready or not (sorted by name): dicts with name, ready, reason,
    device, inputs and outputs ((name, dtype, shape) each), weight_bytes, opset, ir_version,
    producer."""
    return (client or default_client())._c.list_models()


def load(source, device=None, client=None):
    """Loads an ONNX model (a path, or the bytes of a ModelProto) onto ``device``."""
    client = client or default_client()
    if not isinstance(source, (bytes, bytearray)):
        source = os.fspath(source)
    else:
        source = bytes(source)
    return Model(client._c.load(source, _dev(device)), client)
