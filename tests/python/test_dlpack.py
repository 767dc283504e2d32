"""DLPack with NumPy and PyTorch: zero copies on the embedded engine (the data pointers are
the same), exactly one copy where the data must move (a broker)."""
import ctypes
import gc
import sys

import numpy as np
import pytest

import tensord as td

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def is_remote(client):
    return bool(client.address)


def aligned(shape, dtype=np.float32, align=64):
    """A NumPy array whose data is `align`-byte aligned (NumPy's own allocations are only
    16-byte aligned; the engine lends memory that is 64-byte aligned)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.empty(n + align, np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + n].view(dtype).reshape(shape)


def ptr(a):
    return a.__array_interface__["data"][0]


def test_torch_round_trip(client):
    t = torch.randn(64, 32)
    x = td.from_dlpack(t, client=client)
    assert x.shape == (64, 32) and x.dtype == td.float32
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    back = torch.from_dlpack(x)
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    if is_remote(client):
        assert td._host_pointer(x) == 0  # on the broker: copied once each way
        assert back.data_ptr() != t.data_ptr()
    else:
        assert td._host_pointer(x) == t.data_ptr()  # tensord uses torch's memory
        assert back.data_ptr() == t.data_ptr()      # and hands the same memory back
    y = td.nn.relu(x) * 2
    ty = torch.from_dlpack(y)
    np.testing.assert_allclose(ty.numpy(), torch.relu(t).numpy() * 2)
    if not is_remote(client):
        assert ty.data_ptr() == td._host_pointer(y)  # the engine's result, lent in place


def test_torch_dtypes_and_strides(client):
    for dt in (torch.float64, torch.int64, torch.int32, torch.uint8, torch.float16):
        t = (torch.arange(24) % 7).to(dt).reshape(2, 3, 4)
        x = td.from_dlpack(t, client=client)
        np.testing.assert_array_equal(x.numpy(), t.numpy())
        np.testing.assert_array_equal(torch.from_dlpack(x).numpy(), t.numpy())
    t = torch.randn(5, 6).T  # not contiguous: one copy
    x = td.from_dlpack(t, client=client)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    t = torch.tensor(3.5)  # 0-d
    x = td.asarray(t, client=client)  # asarray takes DLPack producers too
    assert x.shape == () and float(x) == 3.5


def test_numpy_round_trip(client):
    a = aligned((128, 16))
    a[...] = np.random.default_rng(0).standard_normal(a.shape)
    x = td.from_dlpack(a, client=client)
    b = np.from_dlpack(x)
    np.testing.assert_array_equal(b, a)
    if is_remote(client):
        assert ptr(b) != ptr(a)
    else:
        assert td._host_pointer(x) == ptr(a)
        assert ptr(b) == ptr(a)
    u = np.arange(1, 33, dtype=np.float32)[1:]  # not 64-byte aligned: copied once
    x = td.from_dlpack(u, client=client)
    np.testing.assert_array_equal(x.numpy(), u)
    assert td._host_pointer(x) != ptr(u)
    m = np.array([True, False, True])  # NumPy 1.24 does not export bool: copied
    np.testing.assert_array_equal(td.from_dlpack(m, client=client).numpy(), m)


def test_keepalive_both_ways(client):
    # Import: tensord holds the producer's memory until it no longer needs it.
    a = aligned((64,))
    a[...] = np.arange(64)
    before = sys.getrefcount(a)
    x = td.from_dlpack(a, client=client)
    y = x + 1
    if not is_remote(client):
        assert sys.getrefcount(a) > before  # NumPy's exporter holds a reference for us
    del x
    np.testing.assert_array_equal(y.numpy(), np.arange(64) + 1)
    del y
    gc.collect()
    td._tensord._drain_releases()
    assert sys.getrefcount(a) == before  # released: the deleter ran
    # Export: the engine's bytes outlive the tensord array while torch holds them.
    x = td.asarray(np.arange(100, dtype=np.float32), client=client) * 3
    t = torch.from_dlpack(x)
    del x
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(100, dtype=np.float32) * 3)


def test_dlpack_transfer_counts(client):
    t = torch.randn(256, 256)
    s0 = client.stats()
    x = td.from_dlpack(t, client=client)
    y = x * 2 + 1
    back = torch.from_dlpack(y)
    s1 = client.stats()
    assert s1["uploads"] - s0["uploads"] == 1       # one import (zero-copy when embedded)
    assert s1["executes"] - s0["executes"] == 1
    # Embedded: the result is lent in place (no download); remote: read exactly once.
    assert s1["downloads"] - s0["downloads"] == (1 if is_remote(client) else 0)
    np.testing.assert_allclose(back.numpy(), t.numpy() * 2 + 1, rtol=1e-6)


def test_dlpack_device_and_errors():
    x = td.asarray([1.0, 2.0])
    assert x.__dlpack_device__() == (1, 0)
    with pytest.raises(LookupError) as e:
        td.from_dlpack(aligned((16,)), device="cpu:99")
    assert "cpu:99" in str(e.value)
    cap = aligned((16,)).__dlpack__()
    td._tensord._array_from_capsule(td.default_client()._c, cap, "")
    with pytest.raises(ValueError):  # a capsule can be consumed once
        td._tensord._array_from_capsule(td.default_client()._c, cap, "")


# ---- CUDA (kDLCUDA) capsules: without a GPU they are refused, naming why -----------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class FakeCudaTensor:
    """A DLPack producer claiming a float32[16] on CUDA device `device_id` at a made-up address
    (nothing may read it: there is no GPU where this test asserts)."""

    def __init__(self, device_id=0):
        self.shape = (ctypes.c_int64 * 1)(16)
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = 0x7f0000000000
        t.device = _DLDevice(2, device_id)  # kDLCUDA
        t.ndim = 1
        t.dtype = _DLDataType(2, 32, 1)  # float32
        t.shape = self.shape
        self.device_id = device_id

    def __dlpack_device__(self):
        return (2, self.device_id)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def _has_cuda_device(client):
    return any(d.kind == "cuda" for d in client.devices())


def test_a_cuda_capsule_without_a_cuda_device_is_refused_clearly(client):
    if _has_cuda_device(client):
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(td.TensordError) as e:
        td.from_dlpack(FakeCudaTensor(), client=client)
    msg = str(e.value)
    assert e.value.code in ("FAILED_PRECONDITION",), msg
    assert "kDLCUDA" in msg and "CUDA" in msg, msg
    # Refused before anything was read: the client still works.
    x = td.asarray([1.0, 2.0], client=client)
    assert x.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
