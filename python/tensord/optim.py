"""Optimisers with the semantics of ONNX's training domain (``ai.onnx.preview.training``:
Momentum, Adam, Adagrad; the formulas of the ONNX operator specs, attribute names included).

The parameters, the optimiser state (momenta, squared-gradient averages), the step count and
the learning rate all live on the parameters' device as tensord arrays; a step is recorded
lazily beside the forward and backward graph and runs with it in one flush, so nothing goes
to the host between steps (only what the caller reads, such as the loss). Each step records
the same graph (the step count and the learning rate are device scalars, not embedded
constants), so it is compiled once.

    opt = td.optim.Adam(params, lr=1e-2)
    for _ in range(steps):
        loss, grads = td.value_and_grad(loss_fn)(params, x, y)
        params = opt.step(params, grads)

``onnx_op=True``: each step is ONE ``ai.onnx.preview.training`` node over every parameter (a
cpu kernel; other devices would run it on cpu:0 by fallback) instead of element-wise ops; the
default (None) is True for parameters on a cpu device, False elsewhere (there the element-wise
form runs where the parameters live). The element-wise form records the step's scalars (Adam's
bias-corrected learning rate) once a step, not once a parameter.

``params`` may be one array or a list/tuple/dict of arrays; ``step`` returns new arrays in the
same structure (tensord arrays are values: the updated parameters replace the old ones, whose
memory the engine frees when nothing uses it).
"""

import numpy as np

from ._autodiff import _flatten, _unflatten, eval_all
from ._core import asarray, op, sqrt, where

__all__ = ["Optimizer", "Momentum", "Adam", "Adagrad", "SGD", "save_checkpoint",
           "load_checkpoint"]


def _device_scalar(value, like):
    """A float scalar uploaded to `like`'s device (not embedded in graphs: changing it does not
    recompile)."""
    a = asarray(np.asarray(value, dtype=like.dtype), device=like.device, client=like._client)
    a._a.handle()  # an embedded constant becomes a device tensor
    return a


class Optimizer:
    """Base class: keeps per-parameter state on the device; subclasses implement ``_update``."""

    _onnx_op = None  # the ai.onnx.preview.training op of this optimiser

    def __init__(self, params, lr, onnx_op=None):
        leaves = []
        self._spec = _flatten(params, leaves)
        if not leaves:
            raise ValueError("optimizer: no parameters")
        self._ref = leaves[0]
        if onnx_op is None:  # the one-node form where a kernel runs it: on cpu devices
            onnx_op = str(self._ref.device).rsplit("/", 1)[-1].startswith("cpu")
        self.onnx_op = bool(onnx_op)
        self._lr = _device_scalar(lr, self._ref)
        self._lr_value = float(lr)
        self._t = _device_scalar(self._t0, self._ref)  # the update count T, on the device
        self.state = [self._init_state(p) for p in leaves]
        self.steps = 0
        if self.onnx_op:
            self._ti = asarray(np.asarray(self._t0, np.int64), device=self._ref.device,
                               client=self._ref._client)
            self._ti._a.handle()

    _t0 = 0

    @property
    def lr(self):
        return self._lr_value

    @lr.setter
    def lr(self, value):
        """A learning-rate schedule sets this between steps (one 4-byte upload when it changes)."""
        if float(value) != self._lr_value:
            self._lr_value = float(value)
            self._lr = _device_scalar(value, self._ref)

    def _init_state(self, p):
        return ()

    def _step_scalars(self):
        """The device scalars every parameter's update of this step reads (the bias-corrected
        learning rate), recorded once a step."""
        return None

    def step(self, params, grads, also=None, run=True):
        """New parameters (same structure as ``params``) after one update with ``grads``.
        ``run`` (default): the step is computed now, with ``also`` (the loss, metrics), as one
        graph on the device; nothing is read back. ``run=False`` leaves it pending (lazy) —
        then something must evaluate it before many steps pile up into one graph."""
        ps, gs = [], []
        _flatten(params, ps)
        _flatten(grads, gs)
        if len(ps) != len(self.state) or len(gs) != len(ps):
            raise ValueError(f"optimizer: {len(ps)} parameters and {len(gs)} gradients for "
                             f"{len(self.state)} states")
        out = []
        if self.onnx_op:
            n, k = len(ps), len(self.state[0])
            groups = [[st[j] for st in self.state] for j in range(k)]
            res = op(f"ai.onnx.preview.training.{self._onnx_op}", self._lr, self._ti, *ps, *gs,
                     *[a for grp in groups for a in grp], num_outputs=n * (1 + k),
                     **self._attrs())
            out = list(res[:n])
            self.state = [tuple(res[n * (1 + j) + i] for j in range(k)) for i in range(n)]
            self._ti = self._ti + 1
        else:
            shared = self._step_scalars()  # once a step, not once a parameter
            for i, (p, g) in enumerate(zip(ps, gs)):
                new_p, self.state[i] = self._update(p, g, self.state[i], shared)
                out.append(new_p)
        self._t = self._t + 1.0
        self.steps += 1
        if run:
            eval_all(out, self.state, self._t, getattr(self, "_ti", None), also)
        return _unflatten(self._spec, iter(out))


    def state_dict(self):
        """The optimiser's state read back as NumPy arrays: its kind, the step count, the
        learning rate, the update count T and every per-parameter state tensor
        (``state.I.J``: parameter I's J-th tensor, as Adam's V and H)."""
        d = {"kind": np.asarray(type(self).__name__), "steps": np.asarray(self.steps, np.int64),
             "lr": np.asarray(self._lr_value, np.float64), "t": np.asarray(self._t.numpy())}
        if self.onnx_op:
            d["ti"] = np.asarray(self._ti.numpy())
        for i, st in enumerate(self.state):
            for j, a in enumerate(st):
                d[f"state.{i}.{j}"] = np.asarray(a.numpy())
        return d

    def load_state_dict(self, d):
        """Puts a ``state_dict()`` back, on this optimiser's device; the optimiser must be of
        the same kind, over parameters of the same shapes (a ValueError names what differs)."""
        kind = str(np.asarray(d.get("kind", "")))
        if kind != type(self).__name__:
            raise ValueError(f"optimizer checkpoint: it holds {kind or 'no'} state, this is "
                             f"{type(self).__name__}")
        dev, cl = self._ref.device, self._ref._client

        def put(a):
            t = asarray(np.asarray(a), device=dev, client=cl)
            t._a.handle()
            return t

        new_state = []
        for i, st in enumerate(self.state):
            row = []
            for j, cur in enumerate(st):
                key = f"state.{i}.{j}"
                if key not in d:
                    raise ValueError(f"optimizer checkpoint: no {key} (it was saved for fewer "
                                     f"parameters than the {len(self.state)} here)")
                a = np.asarray(d[key])
                if tuple(a.shape) != tuple(cur.shape):
                    raise ValueError(f"optimizer checkpoint: {key} has shape {tuple(a.shape)}, "
                                     f"the parameter here {tuple(cur.shape)}")
                row.append(put(a))  # saved from the same dtype
            new_state.append(tuple(row))
        if f"state.{len(self.state)}.0" in d:
            raise ValueError(f"optimizer checkpoint: saved for more parameters than the "
                             f"{len(self.state)} here")
        self.state = new_state
        self.steps = int(np.asarray(d["steps"]))
        self._lr_value = float(np.asarray(d["lr"]))
        self._lr = _device_scalar(self._lr_value, self._ref)
        self._t = put(d["t"])
        if self.onnx_op:
            if "ti" not in d:
                raise ValueError("optimizer checkpoint: saved without onnx_op, loaded with it")
            self._ti = put(np.asarray(d["ti"], np.int64))


def save_checkpoint(path, params, optimizer=None):
    """Writes ``params`` (one array or a list/tuple/dict of them) and, when given, the
    optimiser's state to ``path`` as a NumPy ``.npz`` file: ``param.N`` in the order of the
    parameters' leaves, ``opt.*`` the optimiser's ``state_dict()``. Training resumed from it
    follows the same trajectory as training that never stopped."""
    leaves = []
    _flatten(params, leaves)
    arrays = {f"param.{i}": np.asarray(p.numpy()) for i, p in enumerate(leaves)}
    if optimizer is not None:
        arrays.update({"opt." + k: v for k, v in optimizer.state_dict().items()})
    np.savez(path, **arrays)


def load_checkpoint(path, params, optimizer=None):
    """Reads a ``save_checkpoint`` file: returns new parameters in the structure, shapes and on
    the device of ``params`` (whose values are replaced), and loads the optimiser's state into
    ``optimizer`` when given. A file for other parameters is a ValueError naming the first
    difference."""
    leaves = []
    spec = _flatten(params, leaves)
    with np.load(path, allow_pickle=False) as z:
        files = set(z.files)
        n = sum(1 for f in files if f.startswith("param."))
        if n != len(leaves):
            raise ValueError(f"checkpoint {path}: {n} parameters, {len(leaves)} given")
        out = []
        for i, p in enumerate(leaves):
            a = z[f"param.{i}"]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"checkpoint {path}: param.{i} has shape {tuple(a.shape)}, "
                                 f"the parameter given {tuple(p.shape)}")
            out.append(asarray(a, device=p.device, client=p._client))
        if optimizer is not None:
            opt = {f[4:]: z[f] for f in files if f.startswith("opt.")}
            if not opt:
                raise ValueError(f"checkpoint {path}: no optimizer state in it")
            optimizer.load_state_dict(opt)
    return _unflatten(spec, iter(out))


class Momentum(Optimizer):
    """ONNX Momentum: G' = norm_coefficient * X + G; V = alpha * V + beta' * G' (beta' = beta,
    or 1 on the first update); X -= lr * V ("standard") or X -= lr * (G' + alpha * V)
    ("nesterov"). PyTorch's SGD(momentum=m) is alpha=m, beta=1."""

    _onnx_op = "Momentum"

    def __init__(self, params, lr, alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0,
                 onnx_op=None):
        if mode not in ("standard", "nesterov"):
            raise ValueError(f"Momentum: mode must be 'standard' or 'nesterov', got {mode!r}")
        self.alpha, self.beta, self.mode, self.norm_coefficient = alpha, beta, mode, norm_coefficient
        super().__init__(params, lr, onnx_op)

    def _attrs(self):
        return dict(alpha=self.alpha, beta=self.beta, mode=self.mode,
                    norm_coefficient=self.norm_coefficient)

    def _init_state(self, p):
        return (p * 0.0,)

    def _step_scalars(self):
        return where(self._t > 0.0, self._t * 0.0 + self.beta, self._t * 0.0 + 1.0)

    def _update(self, x, g, state, beta):
        (v,) = state
        if self.norm_coefficient:
            g = g + x * self.norm_coefficient
        v = v * self.alpha + beta * g
        if self.mode == "standard":
            x = x - self._lr * v
        else:
            x = x - self._lr * (g + v * self.alpha)
        return x, (v,)


class SGD(Momentum):
    """Plain gradient descent: X -= lr * G (Momentum with alpha 0)."""

    def __init__(self, params, lr, onnx_op=None):
        super().__init__(params, lr, alpha=0.0, beta=1.0, onnx_op=onnx_op)


class Adam(Optimizer):
    """ONNX Adam: G' = norm_coefficient * X + G; V = alpha * V + (1 - alpha) * G';
    H = beta * H + (1 - beta) * G'^2; lr' = lr * sqrt(1 - beta^T) / (1 - alpha^T) (T > 0);
    X -= lr' * V / (sqrt(H) + epsilon); X *= 1 - norm_coefficient_post. T counts updates from 1
    here (PyTorch's bias correction at the first step)."""

    _t0 = 1
    _onnx_op = "Adam"

    def __init__(self, params, lr=1e-3, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
                 norm_coefficient_post=0.0, onnx_op=None):
        self.alpha, self.beta, self.epsilon = alpha, beta, epsilon
        self.norm_coefficient, self.norm_coefficient_post = norm_coefficient, norm_coefficient_post
        super().__init__(params, lr, onnx_op)

    def _attrs(self):
        return dict(alpha=self.alpha, beta=self.beta, epsilon=self.epsilon,
                    norm_coefficient=self.norm_coefficient,
                    norm_coefficient_post=self.norm_coefficient_post)

    def _init_state(self, p):
        return (p * 0.0, p * 0.0)

    def _step_scalars(self):
        t = self._t
        one = t * 0.0 + 1.0
        return where(t > 0.0,
                     self._lr * sqrt(one - (one * self.beta) ** t) / (one - (one * self.alpha) ** t),
                     self._lr)

    def _update(self, x, g, state, lr):
        v, h = state
        if self.norm_coefficient:
            g = g + x * self.norm_coefficient
        v = v * self.alpha + g * (1.0 - self.alpha)
        h = h * self.beta + g * g * (1.0 - self.beta)
        x = x - lr * v / (sqrt(h) + self.epsilon)
        if self.norm_coefficient_post:
            x = x * (1.0 - self.norm_coefficient_post)
        return x, (v, h)


class Adagrad(Optimizer):
    """ONNX Adagrad: lr' = lr / (1 + T * decay_factor); G' = norm_coefficient * X + G;
    H += G'^2; X -= lr' * G' / (sqrt(H) + epsilon)."""

    _onnx_op = "Adagrad"

    def __init__(self, params, lr=1e-2, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0,
                 onnx_op=None):
        self.decay_factor, self.epsilon, self.norm_coefficient = decay_factor, epsilon, norm_coefficient
        super().__init__(params, lr, onnx_op)

    def _attrs(self):
        return dict(decay_factor=self.decay_factor, epsilon=self.epsilon,
                    norm_coefficient=self.norm_coefficient)

    def _init_state(self, p):
        return (p * 0.0,)

    def _step_scalars(self):
        return self._lr / (self._t * self.decay_factor + 1.0)

    def _update(self, x, g, state, lr):
        (h,) = state
        if self.norm_coefficient:
            g = g + x * self.norm_coefficient
        h = h + g * g
        x = x - lr * g / (sqrt(h) + self.epsilon)
        return x, (h,)
