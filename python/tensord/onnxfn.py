"""ONNX models as differentiable functions: fine-tune an ONNX file's weights with ``td.grad`` and
``td.optim``, then write the trained model out again as ONNX (ONNX Runtime, or any runtime,
runs it with the new weights).

    f = td.onnxfn.load("model.onnx")             # read with python3-onnx
    params = f.parameters()                       # {initializer name: array}: the trainable ones
    opt = td.optim.Adam(params, lr=1e-3)
    for x, y in batches:
        loss, grads = td.value_and_grad(lambda p: td.op(
            "SoftmaxCrossEntropyLoss", f(p, x), y))(params)
        params = opt.step(params, grads)
    f.save("trained.onnx", params)                # the same graph, the trained initializers

``f(params, *inputs)`` records the model's nodes as ordinary lazy ops (``td.op``), the
initializers named in ``params`` taken from there and the others as constants, so gradients
flow to every parameter through the gradient rules of ``td.grad`` (an op without a rule on
the path from a parameter to the loss is refused by name). It runs on the arrays' device like
any other op.

What it takes: the default ONNX domain, opset 13 or later (the forms PyTorch exports with
``opset_version`` >= 13), no subgraphs (If, Loop, Scan: refused by name). The trainable
parameters are, by default, the floating-point initializers with at least one dimension
(weights and biases; PyTorch's scalar and integer constants stay constants); ``names=``
chooses them explicitly, as ONNX Runtime's training artefacts do with ``requires_grad``.
Models exported in eval mode run their BatchNormalization with the running statistics, which
stay fixed; Dropout is the identity.
"""

import numpy as np

from ._core import asarray, ndarray, _op
from ._errors import InvalidArgument, Unimplemented

__all__ = ["OnnxFunction", "load"]

_FLOATS = (np.float16, np.float32, np.float64)


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:  # pragma: no cover - Debian's python3-onnx is a dependency
        raise Unimplemented("td.onnxfn needs the onnx package (Debian: python3-onnx)") from e
    return onnx, numpy_helper


def _attribute(onnx, numpy_helper, node, a):
    t = onnx.AttributeProto
    if a.type == t.INT:
        return a.i
    if a.type == t.FLOAT:
        return float(a.f)
    if a.type == t.STRING:
        return a.s.decode("utf-8")
    if a.type == t.INTS:
        return list(a.ints)
    if a.type == t.FLOATS:
        return [float(v) for v in a.floats]
    if a.type == t.STRINGS:
        return [s.decode("utf-8") for s in a.strings]
    if a.type == t.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type in (t.GRAPH, t.GRAPHS):
        raise Unimplemented(f"td.onnxfn: node '{node.name or node.op_type}' ({node.op_type}) has "
                            "a subgraph; If, Loop and Scan are not supported")
    raise Unimplemented(f"td.onnxfn: attribute '{a.name}' of node '{node.name or node.op_type}' "
                        f"({node.op_type}) has a type tensord does not take ({a.type})")


class OnnxFunction:
    """An ONNX model as a function of its parameters and inputs (see the module's text)."""

    def __init__(self, model, device=None, client=None):
        onnx, self._numpy_helper = _onnx()
        self._onnx = onnx
        self.model = model
        self.device = device
        self._client = client
        g = model.graph
        opset = {o.domain: o.version for o in model.opset_import}
        self.opset = opset.get("", opset.get("ai.onnx", 0))
        if self.opset < 13:
            raise InvalidArgument(f"td.onnxfn: the model is opset {self.opset}; it takes opset 13 "
                                  "or later (export with opset_version=13 or more)")
        for node in g.node:
            if node.domain not in ("", "ai.onnx"):
                raise Unimplemented(f"td.onnxfn: node '{node.name or node.op_type}' is in domain "
                                    f"'{node.domain}'; only the default ONNX domain is taken")
        self._initial = {t.name: self._numpy_helper.to_array(t) for t in g.initializer}
        self.input_names = [i.name for i in g.input if i.name not in self._initial]
        self.output_names = [o.name for o in g.output]
        self._constants = {}  # initializers not trained, uploaded once

    def _array(self, value):
        return asarray(value, device=self.device, client=self._client)

    def parameters(self, names=None):
        """The trainable parameters as a dict {initializer name: array} on the function's device:
        ``names`` (a list of initializer names), else every floating-point initializer with at
        least one dimension."""
        if names is None:
            names = [n for n, v in self._initial.items()
                     if v.dtype.type in _FLOATS and v.ndim >= 1]
        out = {}
        for n in names:
            if n not in self._initial:
                raise InvalidArgument(f"td.onnxfn: the model has no initializer '{n}'")
            out[n] = self._array(self._initial[n])
        return out

    def __call__(self, params, *inputs, **named):
        """The model's outputs (one array, or a tuple for several) for ``inputs`` (positional,
        in the model's input order, or by name), with the initializers in ``params`` replaced by
        those arrays."""
        params = params or {}
        env = {}
        for name, value in self._initial.items():
            if name in params:
                env[name] = params[name]
            else:
                if name not in self._constants:
                    self._constants[name] = self._array(value)
                env[name] = self._constants[name]
        unknown = [n for n in params if n not in self._initial]
        if unknown:
            raise InvalidArgument(f"td.onnxfn: parameters {unknown} are not initializers of the "
                                  "model")
        if len(inputs) > len(self.input_names):
            raise InvalidArgument(f"td.onnxfn: {len(inputs)} inputs given, the model takes "
                                  f"{len(self.input_names)} ({', '.join(self.input_names)})")
        for name, x in zip(self.input_names, inputs):
            env[name] = x
        for name, x in named.items():
            if name not in self.input_names:
                raise InvalidArgument(f"td.onnxfn: the model has no input '{name}' (its inputs: "
                                      f"{', '.join(self.input_names)})")
            env[name] = x
        missing = [n for n in self.input_names if n not in env]
        if missing:
            raise InvalidArgument(f"td.onnxfn: input(s) {', '.join(missing)} missing")
        for name in self.input_names:
            if not isinstance(env[name], ndarray):
                env[name] = self._array(env[name])
        onnx, nh = self._onnx, self._numpy_helper
        for node in self.model.graph.node:
            attrs = {a.name: _attribute(onnx, nh, node, a) for a in node.attribute}
            if node.op_type == "Constant":
                if "value" not in attrs:
                    raise Unimplemented(f"td.onnxfn: Constant '{node.name}' without a 'value' "
                                        "tensor")
                env[node.output[0]] = self._array(attrs["value"])
                continue
            ins = []
            for n in node.input:
                if n == "":
                    ins.append(None)
                elif n in env:
                    ins.append(env[n])
                else:
                    raise InvalidArgument(f"td.onnxfn: node '{node.name or node.op_type}' reads "
                                          f"'{n}', which nothing before it produces")
            outs = _op(node.op_type, ins, attrs, len(node.output))
            if len(node.output) == 1:
                outs = [outs]
            for n, v in zip(node.output, outs):
                if n:
                    env[n] = v
        result = tuple(env[n] for n in self.output_names)
        return result[0] if len(result) == 1 else result

    def save(self, path, params):
        """Writes the model to ``path`` with the initializers named in ``params`` replaced by
        those arrays' values (each in its initializer's dtype and shape); the graph, the other
        initializers and the metadata are the loaded file's."""
        model = self._onnx.ModelProto()
        model.CopyFrom(self.model)
        by_name = {t.name: t for t in model.graph.initializer}
        for name, value in params.items():
            if name not in by_name:
                raise InvalidArgument(f"td.onnxfn: the model has no initializer '{name}'")
            old = self._initial[name]
            new = np.asarray(value.numpy() if isinstance(value, ndarray) else value)
            if new.shape != old.shape:
                raise InvalidArgument(f"td.onnxfn: parameter '{name}' has shape {new.shape}, the "
                                      f"initializer {old.shape}")
            by_name[name].CopyFrom(self._numpy_helper.from_array(new.astype(old.dtype), name))
        self._onnx.save_model(model, path)


def load(model, device=None, client=None):
    """An ONNX model (a path, the file's bytes, or an ``onnx.ModelProto``) as an
    :class:`OnnxFunction` whose arrays live on ``device`` (None: the client's default)."""
    onnx, _ = _onnx()
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_model_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load_model(str(model))
    return OnnxFunction(model, device=device, client=client)
