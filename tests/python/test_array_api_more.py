"""The names issue 33 added to the namespace, against NumPy (the array API standard's own suite
runs as ctest python_array_api_suite; these are the quick, exact checks). Once per client."""
import math

import numpy as np
import pytest

import tensord as td
from test_api import check


def a(client, v, dtype=None):
    return td.asarray(np.asarray(v, dtype=dtype), client=client)


def test_namespace_and_dtype_functions():
    assert td.__array_api_version__ == "2024.12"
    assert td.asarray([1]).__array_namespace__() is td
    info = td.__array_namespace_info__()
    assert info.default_dtypes()["integral"] == td.int64 and "cpu:0" in info.devices()
    assert (td.e, td.pi, td.newaxis) == (math.e, math.pi, None) and math.isnan(td.nan)
    assert td.iinfo(td.int8).min == -128 and td.iinfo(td.uint16).max == 65535
    assert td.finfo(td.float32).eps == np.finfo(np.float32).eps
    assert td.result_type(td.int8, td.uint8) == td.int16 and td.result_type(td.float32, 1.0) == td.float32
    with pytest.raises(td.InvalidArgument, match="no promotion"):
        td.result_type(td.int8, td.float32)
    assert td.can_cast(td.int8, td.int16) and not td.can_cast(td.float32, td.int64)
    assert td.isdtype(td.uint8, "integral") and not td.isdtype(td.bool, "numeric")
    assert td.isdtype(td.float32, ("bool", "real floating"))


def test_elementwise_against_numpy(client):
    x = np.array([3.0, -1.0, 2.0, -0.0, 0.0, np.inf, -np.inf, 1e-12, 7.5])
    y = np.array([1.0, -1.0, 0.0, -1.0, -0.0, 2.0, np.inf, 3.0, -np.inf])
    tx, ty = a(client, x), a(client, y)
    check(td.atan2(tx, ty), np.arctan2(x, y))
    check(td.hypot(tx, ty), np.hypot(x, y))
    check(td.copysign(tx, ty), np.copysign(x, y))
    check(td.logaddexp(tx, ty), np.logaddexp(x, y))
    check(td.signbit(tx), np.signbit(x))
    check(td.nextafter(tx, ty), np.nextafter(x, y))
    with np.errstate(all="ignore"):
        check(td.remainder(tx, ty), np.remainder(x, y))
    assert np.signbit(td.log1p(a(client, -0.0)).numpy()) and np.signbit(td.expm1(a(client, -0.0)).numpy())
    check(td.log1p(a(client, [1e-12, 3.0])), np.log1p([1e-12, 3.0]), rtol=1e-12)
    check(td.expm1(a(client, [1e-12, 3.0])), np.expm1([1e-12, 3.0]), rtol=1e-12)
    i = np.array([-7, -1, 0, 5, 100], dtype=np.int8)
    s = np.array([0, 1, 2, 3, 7], dtype=np.int8)
    check(td.bitwise_left_shift(a(client, i), a(client, s)), np.left_shift(i, s))
    check(td.bitwise_right_shift(a(client, i), a(client, s)), np.right_shift(i, s))
    check(a(client, i) >> 1, i >> 1)
    u = np.array([0, 1, 200], dtype=np.uint8)
    check(-a(client, u), -u)
    check(a(client, u) ** 2, u ** 2)


def test_searching_sorting_sets(client, rng):
    x = rng.integers(-5, 5, (4, 6)).astype(np.float32)
    check(td.sort(a(client, x), axis=0), np.sort(x, axis=0, kind="stable"))
    check(td.argsort(a(client, x)), np.argsort(x, kind="stable"))
    check(td.sort(a(client, x), descending=True), -np.sort(-x, kind="stable"))
    for g, w in zip(td.nonzero(a(client, x)), np.nonzero(x)):
        check(g, w)
    check(td.count_nonzero(a(client, x), axis=1), np.count_nonzero(x, axis=1))
    s = np.sort(x.reshape(-1))
    check(td.searchsorted(a(client, s), a(client, [-2.0, 0.5, 9.0]), side="right"),
          np.searchsorted(s, [-2.0, 0.5, 9.0], side="right"))
    v, idx, inv, cnt = td.unique_all(a(client, x))
    wv, widx, winv, wcnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    check(v, wv), check(idx, widx), check(cnt, wcnt)
    check(inv, winv.reshape(x.shape))
    check(td.isin(a(client, x), a(client, [1.0, 2.0])), np.isin(x, [1.0, 2.0]))


def test_manipulation(client, rng):
    x = rng.standard_normal((3, 4))
    t = a(client, x)
    check(td.roll(t, 2, axis=1), np.roll(x, 2, axis=1))
    check(td.roll(t, -1), np.roll(x, -1))
    check(td.repeat(t, 2, axis=0), np.repeat(x, 2, axis=0))
    check(td.repeat(t, a(client, [1, 0, 2, 1]), axis=1), np.repeat(x, [1, 0, 2, 1], axis=1))
    assert [u.shape for u in td.unstack(t, axis=1)] == [(3,)] * 4
    assert td.broadcast_shapes((3, 1), (4,)) == (3, 4)
    idx = np.array([[0, 3], [1, 1], [2, 0]])
    check(td.take_along_axis(t, a(client, idx), axis=1), np.take_along_axis(x, idx, axis=1))
    for g, w in zip(td.meshgrid(a(client, [1, 2]), a(client, [3, 4, 5])), np.meshgrid([1, 2], [3, 4, 5])):
        check(g, w)
    check(td.matrix_transpose(t), x.T)
    y = rng.standard_normal((4, 2))
    check(td.tensordot(t, a(client, y), axes=1), np.tensordot(x, y, axes=1))
    check(td.diff(t, axis=0, n=2), np.diff(x, axis=0, n=2))
    check(td.cumulative_sum(t, axis=1, include_initial=True),
          np.concatenate([np.zeros((3, 1)), np.cumsum(x, axis=1)], axis=1))
    check(td.cumulative_prod(t, axis=1), np.cumprod(x, axis=1))
    check(td.moveaxis(a(client, np.ones((2, 3, 4))), (0, 1), (2, 0)),
          np.moveaxis(np.ones((2, 3, 4)), (0, 1), (2, 0)))
    check(td.var(t, axis=(), correction=0), np.zeros_like(x))
    check(td.std(t, axis=0, correction=1), np.std(x, axis=0, ddof=1))


def test_indexing_and_setitem(client):
    n = np.arange(12).reshape(3, 4)
    x = a(client, n)
    check(x[a(client, [0, 2]), 1], n[[0, 2], 1])
    check(x[a(client, [[0], [2]]), a(client, [1, 3])], n[[[0], [2]], [1, 3]])
    check(x[a(client, True)], n[np.True_])
    before = x + 0
    x[0, 1] = 9
    x[:, 2] = a(client, [7, 8, 9])
    x[x > 8] = -1
    n[0, 1] = 9
    n[:, 2] = [7, 8, 9]
    n[n > 8] = -1
    check(x, n)
    check(before, np.arange(12).reshape(3, 4))  # copy on write: earlier results keep their value


def test_linalg_subset(client, rng):
    x = rng.standard_normal((2, 3, 3))
    t = a(client, x)
    check(td.linalg.det(t), np.linalg.det(x), rtol=1e-9)
    check(td.linalg.diagonal(t, offset=1), np.diagonal(x, offset=1, axis1=-2, axis2=-1))
    check(td.linalg.trace(t), np.trace(x, axis1=-2, axis2=-1))
    check(td.linalg.matrix_power(t, 3), np.linalg.matrix_power(x, 3), rtol=1e-9)
    check(td.linalg.matrix_norm(t), np.linalg.norm(x, axis=(-2, -1)))
    check(td.linalg.matrix_norm(t, ord=np.inf), np.linalg.norm(x, ord=np.inf, axis=(-2, -1)))
    check(td.linalg.vector_norm(t, axis=-1, ord=3), np.linalg.norm(x, ord=3, axis=-1))
    check(td.linalg.cross(t, t[:, ::-1]), np.cross(x, x[:, ::-1]))
    check(td.linalg.outer(t[0, 0], t[1, 1]), np.outer(x[0, 0], x[1, 1]))
