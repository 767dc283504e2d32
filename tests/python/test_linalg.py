"""The linalg decompositions (tensord-domain ops with LAPACK kernels on cpu:0) against NumPy,
once per client (embedded and remote). Signs of eigenvectors and singular vectors are not
unique, so those are checked through the identities they satisfy."""
import numpy as np
import pytest

import tensord as td
from test_api import check


def a(client, v, dtype=np.float64, device=None):
    return td.asarray(np.asarray(v, dtype=dtype), client=client, device=device)


def spd(rng, *shape):
    m = rng.standard_normal(shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_numpy(client, rng, dtype):
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    s = spd(rng, 2, 3, 4, 4).astype(dtype)
    g = rng.standard_normal((2, 5, 3)).astype(dtype)
    L = td.linalg.cholesky(a(client, s, dtype))
    check(L, np.linalg.cholesky(s), **tol)
    check(td.linalg.cholesky(a(client, s, dtype), upper=True),
          np.swapaxes(np.linalg.cholesky(s), -1, -2), **tol)
    w, v = td.linalg.eigh(a(client, s, dtype))
    check(w, np.linalg.eigvalsh(s), **tol)
    check(td.linalg.eigvalsh(a(client, s, dtype)), np.linalg.eigvalsh(s), **tol)
    vv = v.numpy()
    np.testing.assert_allclose(s @ vv, vv * w.numpy()[..., None, :], **tol)
    check(td.linalg.inv(a(client, s, dtype)), np.linalg.inv(s), **tol)
    sign, logabs = td.linalg.slogdet(a(client, s, dtype))
    want_sign, want_logabs = np.linalg.slogdet(s)
    check(sign, want_sign)
    check(logabs, want_logabs, **tol)
    for g in (g, np.ascontiguousarray(np.swapaxes(g, -1, -2))):  # tall, then wide
        _check_qr_svd(client, g, dtype, tol)


def _check_qr_svd(client, g, dtype, tol):
    for mode in ("reduced", "complete"):
        q, r = td.linalg.qr(a(client, g, dtype), mode=mode)
        wq, wr = np.linalg.qr(g, mode=mode)
        assert q.shape == wq.shape and r.shape == wr.shape
        np.testing.assert_allclose(q.numpy() @ r.numpy(), g, **tol)
        np.testing.assert_allclose(np.abs(r.numpy()), np.abs(wr), **tol)
    for full in (True, False):
        u, sv, vh = td.linalg.svd(a(client, g, dtype), full_matrices=full)
        wu, ws, wvh = np.linalg.svd(g, full_matrices=full)
        assert (u.shape, sv.shape, vh.shape) == (wu.shape, ws.shape, wvh.shape)
        check(sv, ws, **tol)
        k = ws.shape[-1]
        np.testing.assert_allclose((u.numpy()[..., :k] * sv.numpy()[..., None, :]) @
                                   vh.numpy()[..., :k, :], g, **tol)
    check(td.linalg.svdvals(a(client, g, dtype)), np.linalg.svd(g, compute_uv=False), **tol)
    check(td.linalg.pinv(a(client, g, dtype)), np.linalg.pinv(g), **tol)
    for o in (2, -2, "nuc"):
        check(td.linalg.matrix_norm(a(client, g, dtype), ord=o), np.linalg.norm(g, ord=o,
                                                                                axis=(-2, -1)),
              **tol)
    check(td.linalg.matrix_norm(a(client, g, dtype), ord=2, keepdims=True),
          np.linalg.norm(g, ord=2, axis=(-2, -1), keepdims=True), **tol)


def test_solve_broadcasting_and_rank(client, rng):
    A = spd(rng, 3, 4, 4)
    b1 = rng.standard_normal(4)
    check(td.linalg.solve(a(client, A), a(client, b1)),
          np.stack([np.linalg.solve(m, b1) for m in A]), rtol=1e-10, atol=1e-10)
    B = rng.standard_normal((2, 1, 4, 2))  # stack dims (2, 1) broadcast with (3,)
    want = np.linalg.solve(np.broadcast_to(A, (2, 3, 4, 4)), np.broadcast_to(B, (2, 3, 4, 2)))
    check(td.linalg.solve(a(client, A), a(client, B)), want, rtol=1e-10, atol=1e-10)
    # float32 x1 with float64 x2 promotes to float64
    r = td.linalg.solve(a(client, A, np.float32), a(client, B))
    assert r.dtype == td.float64
    low = rng.standard_normal((2, 5, 2)) @ rng.standard_normal((2, 2, 4))  # rank 2
    check(td.linalg.matrix_rank(a(client, low)), np.linalg.matrix_rank(low))
    sv = np.linalg.svd(low, compute_uv=False)
    check(td.linalg.matrix_rank(a(client, low), rtol=0.5),
          (sv > 0.5 * sv.max(-1, keepdims=True)).sum(-1))
    check(td.linalg.matrix_power(a(client, A[0]), -2), np.linalg.matrix_power(A[0], -2),
          rtol=1e-8, atol=1e-10)


def test_errors_name_the_problem(client):
    with pytest.raises(ValueError, match="matrix 1 of the batch is singular"):
        td.linalg.inv(a(client, [[[1, 0], [0, 1]], [[1, 2], [2, 4]]])).numpy()
    with pytest.raises(ValueError, match="singular"):
        td.linalg.solve(a(client, [[1, 2], [2, 4]]), a(client, [1, 1])).numpy()
    with pytest.raises(ValueError, match="not positive definite"):
        td.linalg.cholesky(a(client, [[1, 2], [2, 1]])).numpy()
    with pytest.raises(ValueError, match="square"):
        td.linalg.inv(a(client, np.ones((2, 3))))
    sign, logabs = td.linalg.slogdet(a(client, [[1, 2], [2, 4]]))
    assert sign.numpy() == 0 and logabs.numpy() == -np.inf


def test_results_are_named_tuples(client):
    x = a(client, np.eye(3))
    assert td.linalg.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert td.linalg.qr(x)._fields == ("Q", "R")
    assert td.linalg.slogdet(x)._fields == ("sign", "logabsdet")
    assert td.linalg.svd(x)._fields == ("U", "S", "Vh")
    assert isinstance(td.linalg.svd(x), td.linalg.SVDResult)


def test_every_device_falls_back_to_cpu(client):
    """Devices without the LAPACK kernels (opencl, cuda) run the ops on cpu:0 (the engine's
    placement fallback) and give the same values."""
    m = np.array([[4.0, 7.0], [2.0, 6.0]])
    for d in client.devices():
        check(td.linalg.inv(a(client, m, np.float32, device=str(d))),
              np.linalg.inv(m).astype(np.float32))


def test_empty_stacks_and_matrices(client):
    """Zero-sized stacks and matrices: the shapes the standard asks for, no LAPACK call."""
    z = a(client, np.zeros((0, 3, 3)))
    assert td.linalg.inv(z).numpy().shape == (0, 3, 3)
    assert td.linalg.eigh(z).eigenvectors.numpy().shape == (0, 3, 3)
    e = a(client, np.zeros((2, 0, 3)))
    q, r = td.linalg.qr(e, mode="complete")
    assert q.numpy().shape == (2, 0, 0) and r.numpy().shape == (2, 0, 3)
    u, s, vh = td.linalg.svd(e)
    assert (u.numpy().shape, s.numpy().shape, vh.numpy().shape) == ((2, 0, 0), (2, 0), (2, 3, 3))
    np.testing.assert_array_equal(vh.numpy()[0], np.eye(3))
    check(td.linalg.matrix_rank(e), np.zeros(2, np.int64))
    assert td.linalg.pinv(e).numpy().shape == (2, 3, 0)
    check(td.linalg.slogdet(a(client, np.zeros((2, 0, 0)))).sign, np.ones(2))
