"""Neural-network functions in PyTorch's conventions (NCHW, weight layouts of torch.nn),
recorded as ONNX ops on the arrays' device.

    import tensord as td
    y = td.nn.relu(td.nn.conv2d(x, w, b, padding=1))
"""

import math

import numpy as np

from . import _core as _c
from ._core import _op, _ints, _like, asarray, ndarray
from ._errors import InvalidArgument


def _pair(v, n=2):
    return [int(v)] * n if isinstance(v, int) else [int(x) for x in v]


def relu(x):
    return _op("Relu", [asarray(x)])


def leaky_relu(x, negative_slope=0.01):
    return _op("LeakyRelu", [asarray(x)], {"alpha": float(negative_slope)})


def elu(x, alpha=1.0):
    return _op("Elu", [asarray(x)], {"alpha": float(alpha)})


def gelu(x, approximate="none"):
    """x * Phi(x) (``approximate="tanh"``: PyTorch's tanh form)."""
    x = asarray(x)
    if approximate == "tanh":
        inner = _c.multiply(_c.add(x, _c.multiply(_c.multiply(_c.multiply(x, x), x), 0.044715)),
                            math.sqrt(2.0 / math.pi))
        return _c.multiply(_c.multiply(x, 0.5), _c.add(_c.tanh(inner), 1.0))
    if approximate != "none":
        raise InvalidArgument(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return _c.multiply(_c.multiply(x, 0.5), _c.add(_c.erf(_c.multiply(x, 1.0 / math.sqrt(2.0))), 1.0))


def silu(x):
    x = asarray(x)
    return _c.multiply(x, _c.sigmoid(x))


sigmoid = _c.sigmoid
tanh = _c.tanh


def softmax(x, axis=-1):
    return _op("Softmax", [asarray(x)], {"axis": int(axis)})


def log_softmax(x, axis=-1):
    return _op("LogSoftmax", [asarray(x)], {"axis": int(axis)})


def linear(x, weight, bias=None):
    """x @ weight.T + bias (torch.nn.functional.linear)."""
    y = _c.matmul(x, _c.permute_dims(weight))
    return y if bias is None else _c.add(y, bias)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C/groups, kH, kW]."""
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        else:
            raise InvalidArgument(f"conv2d: padding {padding!r} is not supported (use ints)")
    p = _pair(padding)
    attrs = {"strides": _pair(stride), "pads": p + p, "dilations": _pair(dilation),
             "group": int(groups)}
    inputs = [asarray(x), asarray(weight)] + ([asarray(bias)] if bias is not None else [])
    return _op("Conv", inputs, attrs)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    k = _pair(kernel_size)
    p = _pair(padding)
    attrs = {"kernel_shape": k, "strides": _pair(stride) if stride is not None else k,
             "pads": p + p, "dilations": _pair(dilation), "ceil_mode": int(ceil_mode)}
    return _op("MaxPool", [asarray(x)], attrs)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    k = _pair(kernel_size)
    p = _pair(padding)
    attrs = {"kernel_shape": k, "strides": _pair(stride) if stride is not None else k,
             "pads": p + p, "ceil_mode": int(ceil_mode),
             "count_include_pad": int(count_include_pad)}
    return _op("AveragePool", [asarray(x)], attrs)


def adaptive_avg_pool2d_1(x):
    """Global average pooling to [N, C, 1, 1]."""
    return _op("GlobalAveragePool", [asarray(x)])


def batch_norm(x, running_mean, running_var, weight=None, bias=None, eps=1e-5):
    """Inference-mode batch normalisation over axis 1 (torch.nn.functional.batch_norm)."""
    x = asarray(x)
    mean = asarray(running_mean)
    c = mean.shape[0]
    w = asarray(weight) if weight is not None else _c.ones((c,), x.dtype, x.device, x.client)
    b = asarray(bias) if bias is not None else _c.zeros((c,), x.dtype, x.device, x.client)
    return _op("BatchNormalization", [x, w, b, mean, asarray(running_var)], {"epsilon": float(eps)})


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the last len(normalized_shape) axes."""
    x = asarray(x)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    w = asarray(weight) if weight is not None else _c.ones(shape, x.dtype, x.device, x.client)
    inputs = [x, w] + ([asarray(bias)] if bias is not None else [])
    return _op("LayerNormalization", inputs, {"axis": -len(shape), "epsilon": float(eps)},
               num_outputs=1)


def _torch_gates_to_onnx(w, hidden):
    # PyTorch stacks LSTM gates i, f, g, o; ONNX i, o, f, c (c = g).
    i, f, g, o = (w[k * hidden:(k + 1) * hidden] for k in range(4))
    return _c.concat([i, o, f, g], axis=0)


def lstm(x, weight_ih, weight_hh, bias_ih=None, bias_hh=None, hx=None, batch_first=False):
    """A one-layer, one-direction LSTM with torch.nn.LSTM's weight layout.

    x: [seq, batch, input] ([batch, seq, input] with batch_first); weight_ih [4H, input],
    weight_hh [4H, H]; hx = (h0, c0), each [1, batch, H]. Returns (output, (h_n, c_n)) like
    torch: output [seq, batch, H], h_n and c_n [1, batch, H].
    """
    x = asarray(x)
    if batch_first:
        x = _c.permute_dims(x, (1, 0, 2))
    weight_ih, weight_hh = asarray(weight_ih), asarray(weight_hh)
    hidden = weight_hh.shape[1]
    W = _c.expand_dims(_torch_gates_to_onnx(weight_ih, hidden), 0)
    R = _c.expand_dims(_torch_gates_to_onnx(weight_hh, hidden), 0)
    B = None
    if bias_ih is not None or bias_hh is not None:
        zeros = _c.zeros((4 * hidden,), x.dtype, x.device, x.client)
        bi = _torch_gates_to_onnx(asarray(bias_ih), hidden) if bias_ih is not None else zeros
        bh = _torch_gates_to_onnx(asarray(bias_hh), hidden) if bias_hh is not None else zeros
        B = _c.expand_dims(_c.concat([bi, bh], axis=0), 0)
    h0 = c0 = None
    if hx is not None:
        h0, c0 = asarray(hx[0]), asarray(hx[1])
    y, y_h, y_c = _op("LSTM", [x, W, R, B, None, h0, c0], {"hidden_size": int(hidden)},
                      num_outputs=3)
    out = _c.squeeze(y, 1)  # [seq, 1, batch, H] -> [seq, batch, H]
    if batch_first:
        out = _c.permute_dims(out, (1, 0, 2))
    return out, (y_h, y_c)


def dropout(x, p=0.5, training=False):
    if training:
        raise InvalidArgument("dropout: tensord runs inference only (training=False)")
    return asarray(x)
