"""tensord for Python: NumPy-like arrays on tensord devices, ONNX models, DLPack.

    import tensord as td
    x = td.asarray(numpy_array, device="cpu:1")   # or td.connect("HOST:PORT") first
    y = td.exp(x) @ x.T + 1                        # recorded lazily, run as one graph
    y.numpy()                                      # computed here

The same code runs on the embedded engine (default) and against a broker
(``tensord.connect("HOST:PORT")`` or TENSORD_ADDRESS).
"""

from . import _tensord
from ._errors import *  # noqa: F401,F403 - the exception classes
from ._errors import TensordError  # noqa: F401
from ._core import *  # noqa: F401,F403
from ._core import (  # noqa: F401 - names `import *` leaves out or that shadow builtins
    Client, Device, Model, ModelFuture, TensorSpec, ndarray, connect, default_client, devices,
    load, open_model,
    list_models, op, asarray, array,
    from_dlpack, abs, all, any, max, min, pow, round, sum, _host_pointer,
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64,
    complex64, complex128, bfloat16)
from ._api import *  # noqa: F401,F403 - the rest of the array API namespace
from ._api import __array_namespace_info__, __array_api_version__  # noqa: F401
from ._api import _PATCHED
globals().update({k: v for k, v in _PATCHED.items() if not k.startswith("_")})  # complex-aware
del _PATCHED
bool = bool_  # noqa: A001 - the array API's name for the boolean dtype
from ._autodiff import grad, value_and_grad, eval_all  # noqa: F401
from . import nn  # noqa: F401
from . import optim  # noqa: F401
from . import onnxfn  # noqa: F401
from . import linalg  # noqa: F401
from . import fft  # noqa: F401

__version__ = _tensord.__version__

for _name in ("builtins", "math", "operator", "os", "np"):  # _core's imports, not API
    globals().pop(_name, None)
del _name
from . import _docs  # noqa: E402
_docs.attach(globals(), linalg, fft, nn)  # docstrings of the functions defined without one
del _docs
