"""Fixtures for the Python package's tests: the client under test (the embedded engine, and a
real `tensord serve` on a unix socket), run as ctest `python_embedded` / `python_remote`.

Environment: PYTHONPATH=build/python, TENSORD_CLI (the `tensord` binary, for the remote mode),
TENSORD_PY_MODE=embedded|remote|both (default both).
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import tensord as td

MODES = {"both": ["embedded", "remote"]}.get(os.environ.get("TENSORD_PY_MODE", "both"),
                                             [os.environ.get("TENSORD_PY_MODE", "both")])


class Broker:
    def __init__(self, cli, cpu_devices=2, args=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="tensord-py-")
        self.address = f"unix:{self.dir}/broker.sock"
        env = dict(os.environ if env is None else env, TENSORD_CPU_DEVICES=str(cpu_devices))
        env.pop("TENSORD_ADDRESS", None)
        self.proc = subprocess.Popen([cli, "serve", "--listen", self.address, *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        self.output = []
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if "tensord serving on" in line:
                return
        self.stop()
        raise RuntimeError("tensord serve did not start:\n" + "".join(self.output))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def broker():
    cli = os.environ.get("TENSORD_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("TENSORD_CLI does not name the tensord binary: no broker to test against")
    b = Broker(cli)
    yield b
    b.stop()


@pytest.fixture(scope="session", params=MODES)
def client(request):
    """The client every API test runs against: embedded, then remote."""
    if request.param == "embedded":
        return td.Client.local()
    b = request.getfixturevalue("broker")
    return td.Client(b.address)


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(1234)
