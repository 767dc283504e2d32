"""complex64/complex128 (issue 33): a complex array is two real tensord arrays (real and
imaginary part) in one ndarray. Checked against NumPy, once per client (embedded, broker)."""
import math

import numpy as np
import pytest

import tensord as td

Z = np.array([0.3 + 0.7j, -2 + 1j, 5 - 3j, -0.1 - 0.2j, 1.5 + 0j, -0.5 - 4j])


def a(client, v, dtype=None):
    return td.asarray(np.asarray(v, dtype=dtype), client=client)


def cclose(got, want, dtype=None, rtol=1e-5, atol=1e-6):
    assert isinstance(got, td.ndarray), type(got)
    g = got.numpy()
    want = np.asarray(want)
    assert g.shape == want.shape == tuple(got.shape), (g.shape, want.shape, got.shape)
    assert g.dtype == (dtype or want.dtype) == got.dtype, (g.dtype, want.dtype, got.dtype)
    np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)


def test_dtypes_and_inspection():
    assert td.complex64 == np.complex64 and td.complex128 == np.complex128
    info = td.__array_namespace_info__()
    assert info.dtypes(kind="complex floating") == {"complex64": td.complex64,
                                                    "complex128": td.complex128}
    assert "complex64" in info.dtypes()
    assert info.default_dtypes()["complex floating"] == td.complex128
    assert td.isdtype(td.complex64, "complex floating") and td.isdtype(td.complex128, "numeric")
    assert not td.isdtype(td.complex64, "real floating")
    assert td.result_type(td.float32, td.complex64) == td.complex64
    assert td.result_type(td.float64, td.complex64) == td.complex128
    assert td.result_type(td.complex64, td.complex128) == td.complex128
    assert td.result_type(td.float32, 1j) == td.complex64
    assert td.can_cast(td.float32, td.complex64) and not td.can_cast(td.complex64, td.float64)
    assert td.finfo(td.complex64).dtype == td.float32 and td.finfo(td.complex128).bits == 64


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_round_trip_and_metadata(client, dtype):
    z = Z.astype(dtype).reshape(2, 3)
    x = a(client, z)
    assert isinstance(x, td.ndarray) and x.dtype == dtype and x.shape == (2, 3)
    assert x.nbytes == z.nbytes and x.device == client.default_device
    cclose(x, z)
    np.testing.assert_array_equal(np.asarray(x), z)
    assert complex(a(client, np.asarray(1 - 2j, dtype))) == 1 - 2j
    with pytest.raises(TypeError):
        float(a(client, np.asarray(1 - 2j, dtype)))
    # a 0-d complex value stays 0-d
    assert a(client, np.asarray(3j, dtype)).shape == ()


def test_creation(client):
    cclose(td.zeros((2, 2), dtype=td.complex64, client=client), np.zeros((2, 2), np.complex64))
    cclose(td.ones(3, dtype=td.complex128, client=client), np.ones(3, np.complex128))
    cclose(td.full((2,), 1 - 2j, client=client), np.full((2,), 1 - 2j))
    cclose(td.full((2,), 3, dtype=td.complex64, client=client), np.full((2,), 3, np.complex64))
    cclose(td.eye(3, k=1, dtype=td.complex64, client=client), np.eye(3, k=1, dtype=np.complex64))
    cclose(td.linspace(0, 1 + 2j, 5, client=client), np.linspace(0, 1 + 2j, 5))
    x = a(client, Z)
    cclose(td.zeros_like(x), np.zeros_like(Z))
    cclose(td.ones_like(x, dtype=td.complex64), np.ones_like(Z, np.complex64))
    cclose(td.full_like(x, 2j), np.full_like(Z, 2j))
    with pytest.raises(td.InvalidArgument, match="complex fill value"):
        td.full(2, 1j, dtype=td.float32, client=client)


def test_astype(client):
    x = a(client, Z)
    cclose(td.astype(x, td.complex64), Z.astype(np.complex64))
    r = a(client, [1.5, -2.0], np.float32)
    cclose(td.astype(r, td.complex64), np.array([1.5, -2.0], np.complex64))
    cclose(td.astype(a(client, [1, 2]), td.complex128), np.array([1, 2], np.complex128))
    np.testing.assert_array_equal(td.astype(a(client, [0j, 1j, 0.5]), td.bool).numpy(),
                                  [False, True, True])
    np.testing.assert_allclose(td.astype(x, td.float64).numpy(), Z.real)  # imaginary dropped


def test_arithmetic_and_promotion(client):
    w = Z[::-1] + 0.25
    x, y = a(client, Z), a(client, w)
    cclose(x + y, Z + w)
    cclose(x - y, Z - w)
    cclose(x * y, Z * w)
    cclose(x / y, Z / w)
    cclose(x ** y, Z ** w, rtol=1e-4)
    cclose(-x, -Z)
    cclose(2 * x, 2 * Z)
    cclose(x + 1j, Z + 1j)
    cclose(1 / x, 1 / Z)
    f32 = a(client, [1.0, 2.0], np.float32)
    assert (f32 + 1j).dtype == td.complex64
    assert (f32 + a(client, [1j, 2j], np.complex64)).dtype == td.complex64
    assert (a(client, [1.0, 2.0]) + a(client, [1j, 2j], np.complex64)).dtype == td.complex128
    assert (a(client, [1j], np.complex64) + a(client, [1j])).dtype == td.complex128
    np.testing.assert_array_equal((x == y).numpy(), Z == w)
    np.testing.assert_array_equal((x != x).numpy(), np.zeros(6, bool))
    # huge operands: Smith's division does not overflow c² + d²
    big = np.array([1e300 + 1e300j])
    cclose(a(client, big) / a(client, big), np.array([1 + 0j]))


UNARY = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh",
         "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "square",
         "reciprocal", "conj", "positive", "negative", "round"]
NP_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
           "acosh": "arccosh", "atanh": "arctanh", "round": "round_"}


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_unary_against_numpy(client, name, dtype):
    z = Z.astype(dtype)
    want = getattr(np, NP_NAME.get(name, name), None)(z) if name != "positive" else z
    tol = 1e-4 if dtype == np.complex64 else 1e-9
    cclose(getattr(td, name)(a(client, z)), want.astype(dtype), rtol=tol, atol=tol)


def test_real_valued_results(client):
    x = a(client, Z.astype(np.complex64))
    for f, want in [(td.abs, np.abs(Z)), (td.real, Z.real), (td.imag, Z.imag)]:
        r = f(x)
        assert r.dtype == td.float32
        np.testing.assert_allclose(r.numpy(), want, rtol=1e-6)
    cclose(td.sign(x), (Z / np.abs(Z)).astype(np.complex64))
    special = np.array([complex(math.nan, 1), complex(math.inf, 0), complex(1, -math.inf), 1j])
    s = a(client, special)
    np.testing.assert_array_equal(td.isnan(s).numpy(), np.isnan(special))
    np.testing.assert_array_equal(td.isinf(s).numpy(), np.isinf(special))
    np.testing.assert_array_equal(td.isfinite(s).numpy(), np.isfinite(special))


def test_special_values(client):
    inf, nan = math.inf, math.nan
    e = td.exp(a(client, [complex(inf, 0.0), complex(-inf, 0.0), complex(0.0, -0.0)])).numpy()
    assert e[0] == complex(inf, 0) and e[1] == 0 and math.copysign(1, e[2].imag) == -1
    s = td.sqrt(a(client, [complex(-4, 0.0), complex(-4, -0.0), complex(3, inf)])).numpy()
    assert s[0] == 2j and s[1] == -2j and s[2] == complex(inf, inf)
    lg = td.log(a(client, [complex(-0.0, 0.0)])).numpy()[0]
    assert lg.real == -inf and lg.imag == pytest.approx(math.pi)
    at = td.atanh(a(client, [complex(inf, 1.0), complex(0.0, nan)])).numpy()
    assert at[0] == complex(0, math.pi / 2) and at[1].real == 0 and math.isnan(at[1].imag)


def test_reductions_and_linear_algebra(client):
    z = Z.reshape(2, 3)
    x = a(client, z)
    cclose(td.sum(x), z.sum())
    cclose(td.sum(x, axis=0, keepdims=True), z.sum(axis=0, keepdims=True))
    cclose(td.prod(x, axis=1), z.prod(axis=1))
    cclose(td.mean(x, axis=1), z.mean(axis=1))
    cclose(td.sum(a(client, [1.0, 2.0]), dtype=td.complex128), np.complex128(3))
    cclose(x @ td.matrix_transpose(x), z @ z.T)
    cclose(td.matmul(x, a(client, np.ones((3, 1)))), z @ np.ones((3, 1)))
    cclose(td.vecdot(x, x), np.sum(np.conj(z) * z, axis=-1))
    cclose(td.tensordot(x, x, axes=((1,), (1,))), np.tensordot(z, z, axes=((1,), (1,))))
    cclose(td.cumulative_sum(x, axis=1), np.cumsum(z, axis=1))
    np.testing.assert_allclose(td.linalg.vector_norm(x).numpy(), np.linalg.norm(z))
    sq = a(client, z[:, :2])
    cclose(td.linalg.trace(sq), np.trace(z[:, :2]))  # raw ONNX element moves/sums: per part
    cclose(td.linalg.diagonal(sq), np.diagonal(z[:, :2]))
    cclose(td.op("Transpose", x), z.T)
    cclose(td.linalg.matrix_power(sq, 3), np.linalg.matrix_power(z[:, :2], 3))
    assert int(td.count_nonzero(a(client, [0j, 1j, 0]))) == 1
    np.testing.assert_array_equal(td.nonzero(a(client, [0j, 1j, 2]))[0].numpy(), [1, 2])
    assert bool(td.any(a(client, [0j, 1j]))) and not bool(td.all(a(client, [0j, 1j])))


def test_shapes_indexing_and_assignment(client):
    z = Z.reshape(2, 3)
    x = a(client, z)
    cclose(x[1], z[1])
    cclose(x[:, ::-1], z[:, ::-1])
    cclose(x[a(client, [True, False])], z[[True, False]])
    cclose(x[a(client, [1, 0])], z[[1, 0]])
    cclose(td.reshape(x, (3, 2)), z.reshape(3, 2))
    cclose(x.T, z.T)
    cclose(td.concat([x, a(client, np.ones((1, 3)))]), np.concatenate([z, np.ones((1, 3))]))
    cclose(td.stack([x, x], axis=1), np.stack([z, z], axis=1))
    cclose(td.expand_dims(x, axis=0), z[None])
    cclose(td.flip(x, axis=1), np.flip(z, axis=1))
    cclose(td.roll(x, 1, axis=1), np.roll(z, 1, axis=1))
    cclose(td.broadcast_to(x[0], (2, 3)), np.broadcast_to(z[0], (2, 3)))
    cclose(td.where(a(client, [True, False, True]), x, 0), np.where([True, False, True], z, 0))
    cclose(td.take(x, a(client, [2, 0]), axis=1), np.take(z, [2, 0], axis=1))
    parts = td.unstack(x)
    assert len(parts) == 2
    cclose(parts[1], z[1])
    b = td.broadcast_arrays(a(client, True), x)
    assert b[0].dtype == td.bool and b[1].dtype == td.complex128
    y = td.asarray(x, copy=True)
    x[0, 1] = 7 - 1j
    z2 = z.copy()
    z2[0, 1] = 7 - 1j
    cclose(x, z2)
    cclose(y, z)  # copy on write


def test_dlpack_and_devices(client):
    x = a(client, Z.astype(np.complex64))
    assert x.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(x), Z.astype(np.complex64))
    with pytest.raises(BufferError, match="copy"):
        x.__dlpack__(copy=False)
    cclose(td.from_dlpack(Z, client=client), Z)
    torch = pytest.importorskip("torch")
    t = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    cclose(td.from_dlpack(t, client=client), t.numpy())
    if "cpu:1" in [str(d) for d in client.devices()]:
        cclose(x.to("cpu:1") * 2, Z.astype(np.complex64) * 2)


def test_refused_with_clear_errors(client):
    x = a(client, Z)
    for f in (td.max, td.argmax, td.sort, lambda v: v < v, lambda v: td.maximum(v, v),
              td.floor, lambda v: td.atan2(v, v)):
        with pytest.raises(td.InvalidArgument, match="complex"):
            f(x)
    with pytest.raises(td.InvalidArgument, match="complex"):
        td.op("Relu", x)
    with pytest.raises(td.InvalidArgument, match="complex"):
        td.linalg.det(td.reshape(td.concat([x[:4]]), (2, 2)))


def test_model_inputs_refuse_complex(client, tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "id.onnx"
    torch.onnx.export(torch.nn.ReLU(), torch.randn(2), str(path), input_names=["x"],
                      output_names=["y"], opset_version=13)
    m = td.load(path, client=client)
    np.testing.assert_array_equal(m(np.array([-1.0, 2.0], np.float32)).numpy(), [0.0, 2.0])
    for v in (a(client, [1j, 2], np.complex64), np.array([1j, 2], np.complex64)):
        with pytest.raises(td.InvalidArgument, match="complex"):
            m(v)
