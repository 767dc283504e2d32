"""An embedded Python caller keeps the engine's thread pool and no more threads (issue 28).

oneDNN's parallel regions run on tensord's pool (src/backends/cpu/thread_pool.h), also when
libgomp was loaded into the process first (``import torch`` before tensord): libgomp would
otherwise start an OpenMP team of its own for every calling thread.
"""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("TENSORD_PY_MODE", "embedded") != "embedded",
    reason="embedded callers' threads: runs once, in the embedded pass")

SCRIPT = r"""
import os, sys, threading
if sys.argv[1] == "torch":
    import torch  # loads libgomp into the process's global scope first
import numpy as np
import tensord as td
import tensord.nn as nn

def tasks():
    # Threads that are not tensord's (named tensord-*): this one, the Python threads below,
    # and any OpenMP team's workers (named as the thread that started them).
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += not f.read().startswith("tensord-")
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile (ENOENT or ESRCH)
            pass
    return n

def conv(seed):
    rng = np.random.default_rng(seed)
    x = td.asarray(rng.random((1, 64, 56, 56), dtype=np.float32), device="cpu:0")
    w = td.asarray(rng.random((64, 64, 3, 3), dtype=np.float32), device="cpu:0")
    return float(np.asarray(nn.conv2d(x, w, padding=1)).sum())

conv(0)  # the engine, its device threads and the pool start here
import time
# A thread just started carries the starter's name until it names itself (tensord-*): on a
# loaded machine that takes a moment.
for _ in range(200):
    if tasks() <= 1:
        break
    time.sleep(0.01)
first = tasks()
peak = [first]
errors = []
def work(k):
    try:
        for i in range(3):
            conv(10 * k + i)
            peak[0] = max(peak[0], tasks())
    except Exception as e:  # reported below
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join()
# A joined Python thread's OS thread may still be exiting: give it a moment.
import time
for _ in range(200):
    if tasks() <= first:
        break
    time.sleep(0.01)
print(first, peak[0], tasks(), len(errors), errors[:1])
"""


def run(mode):
    env = dict(os.environ, TENSORD_NUM_THREADS="2", TENSORD_ADDRESS="", TENSORD_OPENCL="0")
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, peak, last, errors, first_error = out.stdout.split(maxsplit=4)
    assert int(errors) == 0, first_error
    return int(first), int(peak), int(last)


def test_threads_stay_at_the_pools_size_with_many_python_callers():
    first, peak, last = run("plain")
    # This thread, then the three Python threads, and nothing else: no OpenMP team per
    # calling thread.
    assert first == 1
    assert peak <= first + 3
    assert last == first


def test_onednn_uses_the_pool_after_torch_loaded_libgomp():
    pytest.importorskip("torch")
    plain = run("plain")
    with_torch = run("torch")
    # Importing torch starts no thread; a libgomp team would add its workers here.
    assert with_torch[0] == plain[0] == 1, (plain, with_torch)
    assert with_torch[1] <= with_torch[0] + 3
    assert with_torch[2] == with_torch[0]
