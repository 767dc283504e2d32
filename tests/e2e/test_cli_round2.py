"""Issue 35's rough edges, as processes: the same broker flags (--address, --tls-ca,
--token-file) on every command that talks to a broker; sizes with units in flags and config
files; "did you mean" for config keys, zoo networks and devices; the OS's reason for a taken
HTTP port; `devices --json` alone on its streams; `run --random-inputs` with --dim; models named
by their file or folder in bench output and the broker's log.

Usage: test_cli_round2.py TENSORD_EXE
"""
import os
import re
import socket
import subprocess
import sys
import tempfile

EXE = None


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TENSORD_") or k == "TENSORD_OPENCL"}
    e.update(extra)
    return e


def run(*args, env=None, timeout=180):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True,
                          env=env or clean_env(), timeout=timeout)


def expect(r, code, *needles, stream="stderr"):
    text = getattr(r, stream)
    assert r.returncode == code, f"exit {r.returncode}, wanted {code}\n{r.stdout}\n{r.stderr}"
    for n in needles:
        assert n in text, f"{n!r} not in {stream}: {text!r}"


def start_broker(*args):
    p = subprocess.Popen([EXE, "serve", "--listen", "127.0.0.1:0", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env(TENSORD_LOG_LEVEL="info"))
    line = p.stdout.readline()
    m = re.match(r"tensord serving on (\S+)", line)
    assert m, (line, p.stderr.read() if p.poll() is not None else "")
    return p, m.group(1)


def stop_broker(p):
    p.terminate()
    _, err = p.communicate(timeout=60)
    return err


def dyn_model(path):
    """y = relu(x @ w): x float32[batch, 16]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 4],
                           rng.standard_normal(64).astype(np.float32))
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "torch_jit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def node_test(folder, model_path):
    """An ONNX backend node test folder: model.onnx and test_data_set_0/{input,output}_0.pb."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    m = onnx.load(model_path)
    onnx.save(m, os.path.join(folder, "model.onnx"))
    w = numpy_helper.to_array(m.graph.initializer[0])
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    for name, a in (("input_0", x), ("output_0", np.maximum(x @ w, 0))):
        with open(os.path.join(folder, "test_data_set_0", name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


def check_broker_flags(tmp, model):
    # The same three flags on every command that talks to a broker.
    for cmd in (["devices"], ["status"], ["run"], ["onnx-test"], ["bench"],
                ["bench", "load"], ["bench", "transfer"]):
        r = run(*cmd, "--help")
        expect(r, 0, stream="stdout")
        for flag in ("--address", "--tls-ca", "--token-file"):
            assert flag in r.stdout, (cmd, flag, r.stdout)

    tokens = os.path.join(tmp, "tokens")
    with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("alice:alice-secret\n")
    mine = os.path.join(tmp, "my-token")
    with open(mine, "w") as f:
        f.write("alice-secret\n")
    wrong = os.path.join(tmp, "wrong-token")
    with open(wrong, "w") as f:
        f.write("\n  nope  \n")
    tests = os.path.join(tmp, "node-tests", "test_dyn")
    node_test(tests, model)
    broker, addr = start_broker("--token-file", tokens)
    try:
        r = run("run", "--address", addr, "--token-file", mine, model, "--random-inputs")
        expect(r, 0, "y: float32[1, 4]", stream="stdout")
        r = run("run", "--address", addr, "--token-file", wrong, model, "--random-inputs")
        expect(r, 1, "wrong token")
        r = run("run", "--address", addr, model, "--random-inputs")  # no token at all
        expect(r, 1, "TENSORD_TOKEN")
        r = run("onnx-test", "--address", addr, "--token-file", mine, tests)
        expect(r, 0, "1 passed", stream="stdout")
        r = run("onnx-test", "--address", addr, "--token-file", wrong, tests)
        assert r.returncode != 0 and "wrong token" in r.stdout + r.stderr, r
        r = run("status", "--address", addr, "--token-file", mine, "--json")
        expect(r, 0, '"sessions"', stream="stdout")
        r = run("devices", "--address", addr, "--token-file", mine)
        expect(r, 0, "cpu:0", stream="stdout")
        r = run("devices", "--address", addr, "--token-file", os.path.join(tmp, "absent"))
        expect(r, 2, "--token-file", "absent", "No such file")
        # The broker names a client's model by its file, not the graph's "torch_jit".
        r = run("bench", "--address", addr, "--token-file", mine, "--model", model,
                "--examples", "4", "--warmup", "1")
        expect(r, 0, "examples with dyn,", stream="stdout")
    finally:
        log = stop_broker(broker)
    loaded = [l for l in log.splitlines() if "model loaded" in l]
    assert loaded and all("name=dyn" in l for l in loaded), log
    assert "torch_jit" not in log, log


def check_sizes(tmp):
    r = run("serve", "--listen", "127.0.0.1:0", "--session-memory-limit", "4GiB",
            "--max-message-bytes", "512 MiB", "--shm-arena-bytes", "1.5GiB", "--dump-config")
    expect(r, 0, "session-memory-limit = 4294967296", "max-message-bytes = 536870912",
           "shm-arena-bytes = 1610612736", stream="stdout")
    r = run("serve", "--listen", "127.0.0.1:0", "--tenant-memory-limit", "2GB", "--dump-config")
    expect(r, 0, "tenant-memory-limit = 2000000000", stream="stdout")
    r = run("serve", "--listen", "127.0.0.1:0", "--session-memory-limit", "4GiX")
    expect(r, 2, "--session-memory-limit", "'4GiX' is not a size", "unknown unit 'GiX'", "KiB")
    r = run("serve", "--listen", "127.0.0.1:0", "--session-memory-limit", "0.5B")
    expect(r, 2, "not a whole number of bytes")
    conf = os.path.join(tmp, "broker.toml")
    with open(conf, "w") as f:
        f.write('listen = "127.0.0.1:0"\nsession-memory-limit = "4GiB"\n'
                'max-model-bytes = 1048576\n')
    r = run("serve", "--config", conf, "--dump-config")
    expect(r, 0, "session-memory-limit = 4294967296", "max-model-bytes = 1048576",
           stream="stdout")
    # The dump reads back.
    dumped = os.path.join(tmp, "dumped.toml")
    with open(dumped, "w") as f:
        f.write(r.stdout)
    expect(run("serve", "--config", dumped, "--dump-config"), 0,
           "session-memory-limit = 4294967296", stream="stdout")
    with open(conf, "w") as f:
        f.write('listen = "127.0.0.1:0"\nsession-memory-limit = "four"\n')
    expect(run("serve", "--config", conf), 2, "line 2", "'four' is not a size")
    r = run("bench", "transfer", "--size", "1MiB", "--chunk-bytes", "64KiB", "--iterations", "1",
            "--round-trips", "2", "--json")
    expect(r, 0, '"bytes": 1048576,', stream="stdout")


def check_suggestions(tmp, model):
    conf = os.path.join(tmp, "typo.toml")
    with open(conf, "w") as f:
        f.write('listen = "127.0.0.1:0"\nlease-second = 5\n')
    expect(run("serve", "--config", conf), 2, "unknown key 'lease-second'",
           "did you mean 'lease-seconds'?")
    expect(run("bench", "mobilenetv2"), 2, "unknown network 'mobilenetv2'",
           "did you mean 'mobilenet_v2'?")
    expect(run("run", model, "--random-inputs", "--device", "cpu:O"), 2,
           "unknown device 'cpu:O'", "did you mean 'cpu:0'?")
    expect(run("bench", "--model", model, "--device", "cpu0"), 2, "did you mean 'cpu:0'?")


def check_http_port_taken():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        r = run("serve", "--listen", "127.0.0.1:0", "--http", str(port), timeout=60)
        assert r.returncode != 0, r
        assert f"cannot serve HTTP on '{port}': Address already in use" in r.stderr, r.stderr
    finally:
        taken.close()


def check_devices_json():
    r = run("devices", "--json")
    expect(r, 0, '"name": "cpu:0"', stream="stdout")
    assert r.stderr == "", r.stderr  # no "no cuda devices" lines mixed in
    # Without --json, or with --verbose, the reasons are still given (when there are any).
    plain = run("devices")
    verbose = run("devices", "--json", "--verbose")
    assert verbose.stderr == plain.stderr, (plain.stderr, verbose.stderr)


def check_random_inputs(tmp, model):
    r = run("run", model)
    expect(r, 2, "missing input(s) 'x' float32[?, 16]", "--random-inputs")
    r = run("run", model, "--random-inputs")
    expect(r, 0, "y: float32[1, 4]", stream="stdout")
    expect(r, 0, "random input 'x' float32[1, 16]")
    r = run("run", model, "--random-inputs", "--dim", "batch=3")
    expect(r, 0, "y: float32[3, 4]", stream="stdout")
    # The same values each time: a fixed seed.
    assert r.stdout == run("run", model, "--random-inputs", "--dim", "batch=3").stdout
    expect(run("run", model, "--random-inputs", "--dim", "N=3"), 2,
           "no input made up by --random-inputs has a free dimension 'N'",
           "free dimensions: 'batch'")
    expect(run("run", model, "--random-inputs", "--dim", "batch=0"), 2, "NAME=N with N >= 1")
    expect(run("run", model, "--dim", "batch=2"), 2, "give --random-inputs too")


def check_bench_names(tmp, model):
    r = run("bench", "--model", model, "--examples", "4", "--warmup", "1")
    expect(r, 0, "Running 4 examples with dyn,", stream="stdout")
    flat = os.path.join(tmp, "tiny-mlp.onnx")
    with open(model, "rb") as src, open(flat, "wb") as dst:
        dst.write(src.read())
    r = run("bench", "--model", flat, "--examples", "4", "--warmup", "1")
    expect(r, 0, "Running 4 examples with tiny-mlp,", stream="stdout")


def main():
    global EXE
    EXE = os.path.abspath(sys.argv[1])
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("SKIP: python3-onnx is not installed")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "dyn", "model.onnx")
        dyn_model(model)
        checks = [("sizes", lambda: check_sizes(tmp)),
                  ("suggestions", lambda: check_suggestions(tmp, model)),
                  ("http port", check_http_port_taken),
                  ("devices --json", check_devices_json),
                  ("random inputs", lambda: check_random_inputs(tmp, model)),
                  ("bench names", lambda: check_bench_names(tmp, model)),
                  ("broker flags", lambda: check_broker_flags(tmp, model))]
        only = sys.argv[2:]
        for name, check in checks:
            if only and name not in only:
                continue
            check()
            print("ok:", name, flush=True)
    print("cli round 2 ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
