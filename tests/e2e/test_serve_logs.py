"""`tensord serve`'s log and config file, as processes: level filtering, JSON lines, session
open/close lines, a failed call's line naming the method and code, a short message for a port
in use; --config sets options, flags win over it, it wins over TENSORD_LOG_LEVEL, unknown keys
and unreadable or malformed files are refused.

Usage: test_serve_logs.py TENSORD_EXE PYTHON_DIR (build/python: the client that makes calls
fail). Listens on 127.0.0.1 only.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import tomllib

import numpy as np


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORD_", "GRPC_"))}
    e.update(extra)
    return e


def run(exe, *args, env=None):
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                          env=env or clean_env(), timeout=60)


class Broker:
    def __init__(self, exe, *flags, env=None):
        self.proc = subprocess.Popen([exe, "serve", *map(str, flags)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env or clean_env())
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "broker not ready after 20 s"
        line = self.proc.stdout.readline().strip()
        assert line.startswith("tensord serving on "), (line, self.proc.stderr.read())
        self.address = line[len("tensord serving on "):]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, (self.proc.returncode, err)
        return err


def relu_model(path):
    from onnx import TensorProto, helper
    import onnx
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"], name="relu")], "logged",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


PYTHON_CLIENT = """
import sys, numpy as np, tensord
c = tensord.connect(sys.argv[1])
c.load(sys.argv[2])
try:
    c.load(sys.argv[2], device="cpu:9")
    raise SystemExit("a model loaded on cpu:9")
except tensord.NotFound:
    pass
a = tensord.asarray(np.ones((1024, 1024), np.float32))
assert (a @ a).numpy()[0, 0] == 1024
"""


def work(exe, address, tmp):
    """A session through the CLI (devices), and one through the Python client (build/python)
    that loads a model, fails a call (a device that does not exist: NOT_FOUND from the broker)
    and runs a 1024x1024 matmul (a slow call at --slow-request-ms 1)."""
    r = run(exe, "devices", "--address", address)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", PYTHON_CLIENT, address,
                        os.path.join(tmp, "relu.onnx")], capture_output=True, text=True,
                       env=clean_env(PYTHONPATH=PYTHON_DIR), timeout=60)
    assert r.returncode == 0, r.stderr


def test_log(exe, tmp):
    # Default (info, text): session lines with the id prefix, the peer and the memory; the failed
    # call with its method and code; the model load.
    b = Broker(exe, "--listen", "127.0.0.1:0", "--slow-request-ms", "0")
    work(exe, b.address, tmp)
    err = b.stop()
    opened = [l for l in err.splitlines() if "session opened" in l]
    closed = [l for l in err.splitlines() if "session closed" in l]
    assert opened and closed, err
    assert "peer=ipv4:127.0.0.1:" in opened[0] and "memory_limit_bytes=" in opened[0], opened
    assert "memory_bytes=" in closed[0] and "reason=" in closed[0], closed
    failed = [l for l in err.splitlines() if "request failed" in l]
    assert any("warning: request failed method=/tensord.v1.Tensord/LoadModel" in l and
               "code=NOT_FOUND" in l and "cpu:9" in l for l in failed), err
    assert any("model loaded name=relu" in l and "device=cpu:0" in l for l in err.splitlines())
    assert "debug:" not in err and "slow request" not in err, err

    # warn: no info lines (sessions), the failed call still; off: nothing at all.
    b = Broker(exe, "--listen", "127.0.0.1:0", "--log-level", "warn")
    work(exe, b.address, tmp)
    err = b.stop()
    assert "session opened" not in err and "request failed" in err, err
    b = Broker(exe, "--listen", "127.0.0.1:0", "--log-level", "off")
    work(exe, b.address, tmp)
    assert b.stop() == ""

    # TENSORD_LOG_LEVEL sets it; the flag wins over it; a wrong value is refused, naming it.
    b = Broker(exe, "--listen", "127.0.0.1:0", env=clean_env(TENSORD_LOG_LEVEL="error"))
    work(exe, b.address, tmp)
    err = b.stop()
    assert "session opened" not in err and "request failed" not in err, err
    b = Broker(exe, "--listen", "127.0.0.1:0", "--log-level", "info",
               env=clean_env(TENSORD_LOG_LEVEL="error"))
    run(exe, "devices", "--address", b.address)
    assert "session opened" in b.stop()
    for args in (("serve", "--listen", "127.0.0.1:0"), ("devices",)):
        r = run(exe, *args, env=clean_env(TENSORD_LOG_LEVEL="loud"))
        assert r.returncode == 2 and "TENSORD_LOG_LEVEL" in r.stderr and "'loud'" in r.stderr, r
    r = run(exe, "serve", "--listen", "127.0.0.1:0", "--log-format", "xml")
    assert r.returncode == 2 and "--log-format" in r.stderr and "json" in r.stderr, r

    # JSON: every line one object with time, level and msg; fields keep their types; a slow
    # call (over 1 ms: loading a model is) is logged.
    b = Broker(exe, "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug",
               "--slow-request-ms", "1")
    work(exe, b.address, tmp)
    err = b.stop()
    lines = [json.loads(l) for l in err.splitlines()]
    assert lines and all({"time", "level", "msg"} <= l.keys() for l in lines), err
    assert all(l["time"].endswith("Z") and "T" in l["time"] for l in lines), lines[0]
    opened = [l for l in lines if l["msg"] == "session opened"]
    assert opened and isinstance(opened[0]["memory_limit_bytes"], int), opened
    assert len(opened[0]["session"]) == 8 and opened[0]["peer"].startswith("ipv4:"), opened
    assert any(l["msg"] == "request failed" and l["method"].startswith("/tensord.v1.Tensord/")
               and l["level"] == "warn" for l in lines), lines
    assert any(l["msg"] == "slow request" and l["ms"] >= 1 for l in lines), lines
    assert any(l["level"] == "debug" and l.get("source") == "grpc" for l in lines), lines
    assert any(l["msg"] == "stopped" for l in lines), lines

    # A wrong token is refused before the call reaches the service: logged all the same.
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("alice:s3cret-token\n")
    os.chmod(tokens, 0o600)
    b = Broker(exe, "--listen", "127.0.0.1:0", "--token-file", tokens)
    r = run(exe, "devices", "--address", b.address, env=clean_env(TENSORD_TOKEN="guess-123"))
    err = b.stop()
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, r
    assert "request failed method=/tensord.v1.Tensord/Handshake code=UNAUTHENTICATED" in err, err
    assert "wrong token" in err and "s3cret" not in err and "guess-123" not in err, err

    # A port in use: one short line with the OS's reason, no gRPC dump.
    b = Broker(exe, "--listen", "127.0.0.1:0")
    r = run(exe, "serve", "--listen", b.address)
    quiet = run(exe, "serve", "--listen", b.address, "--log-level", "off")
    b.stop()
    assert r.returncode == 1, r
    assert len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 200, r.stderr
    assert "cannot listen" in r.stderr and "Address already in use" in r.stderr, r.stderr
    # A reason not to start is printed even with the log off.
    assert quiet.returncode == 1 and "Address already in use" in quiet.stderr, quiet


def test_config(exe, tmp):
    conf = os.path.join(tmp, "tensord.toml")

    def write(text):
        with open(conf, "w") as f:
            f.write(text)

    def dump(*flags, env=None):
        r = run(exe, "serve", "--config", conf, "--dump-config", *flags, env=env)
        assert r.returncode == 0, r
        return tomllib.loads(r.stdout)

    write('listen = "127.0.0.1:0"\nlease-seconds = 12.5\nmax_sessions = 7\n'
          'log-format = "json"\ninsecure = true\n')
    d = dump()
    assert d["listen"] == "127.0.0.1:0" and d["lease-seconds"] == 12.5, d
    assert d["max-sessions"] == 7 and d["insecure"] is True and d["log-format"] == "json", d
    assert d["drain-seconds"] == 30 and d["log-level"] == "info", d  # defaults
    # The flag wins over the file; the file over the environment.
    d = dump("--lease-seconds", "3", "--max-sessions", "9", env=clean_env(TENSORD_LOG_LEVEL="debug"))
    assert d["lease-seconds"] == 3 and d["max-sessions"] == 9, d
    assert d["log-level"] == "debug", d  # the file does not set it: the environment does
    write('listen = "127.0.0.1:0"\nlog-level = "warn"\n')
    assert dump(env=clean_env(TENSORD_LOG_LEVEL="debug"))["log-level"] == "warn"
    # The dump is a config file that gives the same dump.
    first = run(exe, "serve", "--config", conf, "--dump-config", "--max-threads", "5").stdout
    write(first)
    assert run(exe, "serve", "--config", conf, "--dump-config").stdout == first

    # The file's options take effect: a broker from the file alone logs JSON.
    write('listen = "127.0.0.1:0"\nlog-format = "json"\n')
    b = Broker(exe, "--config", conf)
    run(exe, "devices", "--address", b.address)
    err = b.stop()
    assert any(json.loads(l)["msg"] == "session opened" for l in err.splitlines()), err

    # Refused, naming what is wrong.
    bad = {
        'listen = "127.0.0.1:0"\nlisten-port = 7070\n': ["unknown key 'listen-port'", "line 2"],
        '[serve]\nlisten = "127.0.0.1:0"\n': ["unknown key 'serve'", "top level"],
        'listen = "127.0.0.1:0"\nlease-seconds = "soon"\n': ["lease-seconds", "soon"],
        'listen = "127.0.0.1:0"\ninsecure = 1\n': ["insecure", "true or false"],
        'listen = "127.0.0.1:0\n': ["line 1"],
        'config = "other.toml"\n': ["unknown key 'config'"],
    }
    for text, words in bad.items():
        write(text)
        r = run(exe, "serve", "--config", conf)
        assert r.returncode == 2 and all(w in r.stderr for w in words), (text, r.stderr)
    for path, why in ((os.path.join(tmp, "absent.toml"), "No such file or directory"),
                      (tmp, "Is a directory")):
        r = run(exe, "serve", "--config", path)
        assert r.returncode == 2 and why in r.stderr and path in r.stderr, r.stderr
    write('log-level = "info"\n')
    r = run(exe, "serve", "--config", conf)
    assert r.returncode == 2 and "--listen is required" in r.stderr, r.stderr


HUGE_NAME_CLIENT = """
import sys, time, tensord
c = tensord.connect(sys.argv[1])
data = open(sys.argv[2], "rb").read()  # bytes: the model keeps the name inside the file
t = time.monotonic()
c.load(data)
print(f"{time.monotonic() - t:.2f}")
"""


def test_huge_names_are_clipped(exe, tmp):
    """Issue 27: a model whose name is 60 MiB was written to the log whole (26 s). Log fields
    quoting what a client sent are clipped to a few hundred bytes, with the length."""
    from onnx import TensorProto, helper
    import onnx
    name = "n" * (60 << 20)
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"], name="relu")], name,
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    path = os.path.join(tmp, "huge_name.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    b = Broker(exe, "--listen", "127.0.0.1:0")
    r = subprocess.run([sys.executable, "-c", HUGE_NAME_CLIENT, b.address, path],
                       capture_output=True, text=True, env=clean_env(PYTHONPATH=PYTHON_DIR),
                       timeout=120)
    err = b.stop()
    os.remove(path)
    assert r.returncode == 0, r.stderr
    longest = max(len(l) for l in err.splitlines())
    print(f"[ figures ] load of a model named with 60 MiB: {r.stdout.strip()} s; longest log "
          f"line {longest} bytes")
    assert longest < 8192, longest
    loaded = [l for l in err.splitlines() if "model loaded" in l]
    assert loaded and f"... ({len(name)} bytes)" in loaded[0], loaded


def main(exe, python_dir):
    global PYTHON_DIR
    PYTHON_DIR = python_dir
    if not os.path.isdir(os.path.join(python_dir, "tensord")):
        print(f"skipped: no Python package at {python_dir} (TENSORD_BUILD_PYTHON=OFF?)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        relu_model(os.path.join(tmp, "relu.onnx"))
        np.save(os.path.join(tmp, "x.npy"), np.ones((2, 3), np.float32))
        test_log(exe, tmp)
        test_config(exe, tmp)
        test_huge_names_are_clipped(exe, tmp)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
