"""Reverse-mode differentiation over the lazy API: ``td.grad(f)``, ``td.value_and_grad(f)``.

``f`` is called once on tensord arrays; its result's pending graph is differentiated into a
graph of ordinary ONNX ops (C++ ``tensord::gradients``) recorded lazily beside the forward
graph, so reading the loss and the gradients runs the forward pass once, on whatever device the
arrays live on. The arguments differentiated may be arrays or (nested) lists, tuples and dicts
of arrays (model parameters); the gradients come back in the same structure.
"""

from . import _tensord as _C
from ._core import asarray, ndarray, _wrap
from ._errors import InvalidArgument


def _flatten(tree, leaves):
    if isinstance(tree, ndarray):
        if tree._im is not None:
            raise InvalidArgument("grad: complex arrays have no gradient rules")
        leaves.append(tree)
        return ("leaf",)
    if isinstance(tree, (list, tuple)):
        return (type(tree), [_flatten(t, leaves) for t in tree])
    if isinstance(tree, dict):
        return (dict, {k: _flatten(v, leaves) for k, v in tree.items()})
    raise InvalidArgument(f"grad: cannot differentiate with respect to a {type(tree).__name__} "
                          "(arrays, and lists/tuples/dicts of arrays)")


def _unflatten(spec, leaves):
    if spec[0] == "leaf":
        return next(leaves)
    if spec[0] is dict:
        return {k: _unflatten(v, leaves) for k, v in spec[1].items()}
    return spec[0](_unflatten(s, leaves) for s in spec[1])


def _as_arrays(tree):
    if isinstance(tree, ndarray):
        return tree
    if isinstance(tree, (list, tuple)):
        return type(tree)(_as_arrays(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _as_arrays(v) for k, v in tree.items()}
    return asarray(tree)


def value_and_grad(f, argnums=0, has_aux=False):
    """A function returning ``(f(*args), gradient)``: the gradient of ``f``'s result (an array;
    summed when not a scalar) with respect to argument ``argnums`` (an int, or a tuple of ints
    for a tuple of gradients). Arguments differentiated may be arrays, NumPy data (converted
    with ``asarray``) or lists/tuples/dicts of arrays. ``has_aux``: ``f`` returns
    ``(loss, aux)`` and the result is ``((loss, aux), gradient)``, as in JAX."""
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)

    def wrapped(*args, **kwargs):
        args = list(args)
        for i in nums:
            if i >= len(args):
                raise InvalidArgument(f"grad: argnums {i} but f was called with {len(args)} "
                                      "positional arguments")
            args[i] = _as_arrays(args[i])
        out = f(*args, **kwargs)
        if has_aux:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise InvalidArgument("grad: has_aux=True but f did not return (loss, aux)")
            loss, aux = out
        else:
            loss, aux = out, None
        if not isinstance(loss, ndarray):
            raise InvalidArgument(f"grad: f returned a {type(loss).__name__}, not an array")
        if loss._im is not None:
            raise InvalidArgument("grad: the loss is complex; differentiate a real loss")
        leaves, specs = [], []
        for i in nums:
            specs.append(_flatten(args[i], leaves))
        raw = _C.grad(loss._a, [x._a for x in leaves])
        it = iter([_wrap(r, loss._client) for r in raw])
        grads = tuple(_unflatten(s, it) for s in specs)
        g = grads[0] if single else grads
        return ((loss, aux) if has_aux else loss), g

    wrapped.__doc__ = f"value and gradient of {getattr(f, '__name__', 'f')}"
    return wrapped


def grad(f, argnums=0, has_aux=False):
    """A function returning the gradient of ``f`` (see ``value_and_grad``) with respect to
    argument ``argnums``: ``td.grad(lambda w: ((x @ w - y) ** 2).mean())(w)``. With
    ``has_aux``: ``(gradient, aux)``."""
    vg = value_and_grad(f, argnums, has_aux)

    def wrapped(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    wrapped.__doc__ = f"gradient of {getattr(f, '__name__', 'f')}"
    return wrapped


def eval_all(*trees):
    """Computes every array in ``trees`` (arrays, or lists/tuples/dicts of them) in one flush
    per device, where evaluating them one by one would run one graph each: a training step's
    loss, new parameters and optimiser state together."""
    leaves = []
    for t in trees:
        if t is not None:
            _flatten(t, leaves)
    if leaves:
        _C.eval_all([x._a for x in leaves])
