"""A PyTorch tensor handed to tensord and back through DLPack, without copies on the embedded
engine (the data pointers are the same).

    PYTHONPATH=build/python python3 examples/python/dlpack_torch.py
"""
import torch

import tensord as td

t = torch.randn(1024, 256)
x = td.from_dlpack(t)             # tensord uses torch's memory
y = td.nn.gelu(x) * 2             # computed by tensord
back = torch.from_dlpack(y)       # torch uses tensord's result in place

print("torch -> tensord shares memory:", td._host_pointer(x) == t.data_ptr())
print("tensord -> torch shares memory:", back.data_ptr() == td._host_pointer(y))
torch.testing.assert_close(back, torch.nn.functional.gelu(t) * 2, rtol=1e-5, atol=1e-5)
print("values match torch")
