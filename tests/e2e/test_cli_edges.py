"""The rough edges a new user hit (issue 17), as processes: suggestions for mistyped commands and
flags, the OS's reason for an unopenable file, device and setting mistakes named with exit
status 2, the devices table's kind column, --help defaults, unique TensorBoard event files, the
progress phases, the peer scripts found from a copied / installed binary, and the torch peer's
message for a model it cannot rebuild.

Usage: test_cli_edges.py TENSORD_EXE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

EXE = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TENSORD_") or k == "TENSORD_OPENCL"}
    e.update(extra)
    return e


def run(*args, exe=None, env=None, timeout=120):
    return subprocess.run([exe or EXE, *map(str, args)], capture_output=True, text=True,
                          env=env or clean_env(), timeout=timeout)


def one_line_error(r):
    return r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""


def model(path):
    """y = relu(a @ w): one float input 'a' [N, 8]."""
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], rng.standard_normal(64).astype(np.float32))
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def check_suggestions():
    r = run("bnech")
    assert r.returncode == 2, r
    assert "unknown command 'bnech'" in r.stderr and "did you mean 'bench'?" in r.stderr, r.stderr
    r = run("devcies", "--json")
    assert r.returncode == 2 and "did you mean 'devices'?" in r.stderr, r.stderr
    r = run("bench", "--modle", "x.onnx")
    assert r.returncode == 2, r
    assert "unknown option '--modle'" in r.stderr and "did you mean '--model'?" in r.stderr, r.stderr
    r = run("serve", "--listen", "127.0.0.1:0", "--lease-second", "3")
    assert r.returncode == 2 and "did you mean '--lease-seconds'?" in r.stderr, r.stderr
    r = run("devices", "--no-such-flag")  # nothing near: named, no guess
    assert r.returncode == 2 and "'--no-such-flag'" in r.stderr and "did you mean" not in r.stderr, r
    print("suggestions ok:", one_line_error(run("bnech")))


def check_open_errors(tmp):
    r = run("run", os.path.join(tmp, "missing.onnx"))
    assert r.returncode == 2, r
    assert "cannot open" in r.stderr and "No such file or directory" in r.stderr, r.stderr
    m = os.path.join(tmp, "mm.onnx")
    r = run("run", m, os.path.join(tmp, "missing.npy"))
    assert r.returncode == 2 and "No such file or directory" in r.stderr, r.stderr
    print("open errors ok:", one_line_error(r))


def check_device_mistakes(tmp):
    m = os.path.join(tmp, "mm.onnx")
    a = os.path.join(tmp, "a.npy")
    np.save(a, np.ones((2, 8), np.float32))
    r = run("run", m, a)
    assert r.returncode == 0, r.stderr
    bad = clean_env(TENSORD_DEVICE="cuda:0")
    for args in (("run", m, a), ("bench", "--model", m, "-n", "2", "--warmup", "0")):
        r = run(*args, env=bad)
        assert r.returncode == 2, (args, r)
        assert "'cuda:0'" in r.stderr and "TENSORD_DEVICE" in r.stderr and "cpu:0" in r.stderr, r.stderr
        assert "to :" not in r.stderr, r.stderr  # never a blank device name
    r = run("run", m, a, "--device", "cpu:7")
    assert r.returncode == 2 and "'cpu:7'" in r.stderr and "--device" in r.stderr, r.stderr
    print("device mistakes ok:", one_line_error(r))


def check_settings_refused():
    for var, value in (("TENSORD_NUM_THREADS", "abc"), ("TENSORD_NUM_THREADS", "0"),
                       ("TENSORD_NUM_THREADS", "4x"), ("TENSORD_CPU_DEVICES", "x"),
                       ("TENSORD_CPU_DEVICES", "0"), ("TENSORD_CPU_DEVICES", "65"),
                       ("TENSORD_SERIAL_WORK_K", "0"), ("TENSORD_SERIAL_WORK_K", "1e3")):
        r = run("devices", env=clean_env(**{var: value}))
        assert r.returncode == 2, (var, value, r)
        assert f"{var}='{value}'" in r.stderr, r.stderr
    r = run("devices", "--json", env=clean_env(TENSORD_NUM_THREADS="2", TENSORD_CPU_DEVICES=" 3 "))
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 3, r
    print("settings refused ok:", one_line_error(run("devices", env=clean_env(TENSORD_CPU_DEVICES="x"))))


def check_devices_table_and_help():
    r = run("devices", env=clean_env(TENSORD_CPU_DEVICES="2"))
    assert r.returncode == 0, r
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [row[:2] for row in rows] == [["cpu:0", "cpu"], ["cpu:1", "cpu"]], r.stdout
    r = run("serve", "--help")
    assert "--lease-seconds FLOAT=30" in r.stdout and "--drain-seconds FLOAT=30" in r.stdout, r.stdout
    r = run("bench", "transfer", "--help")
    assert "--iterations INT=5" in r.stdout and "--round-trips INT=2000" in r.stdout, r.stdout
    print("devices kind column and --help defaults ok")


def check_transfer_bench():
    """`bench transfer` checks the bytes of every read it times (uploaded, computed, into
    allocate_host() memory, read()) on every path; a small size keeps it quick."""
    r = run("bench", "transfer", "--size", 3 << 20, "--iterations", 2, "--round-trips", 20,
            "--json", timeout=300)
    assert r.returncode == 0, r
    j = json.loads(r.stdout)
    assert j["bytes"] == 3 << 20, j
    for path in ("grpc-stream", "shm", "embedded"):
        p = j["paths"][path]
        assert "error" not in p, (path, p)
        for k in ("upload_gbps", "download_gbps", "download_computed_gbps",
                  "download_allocate_host_gbps", "read_alloc_gbps"):
            assert p[k] > 0, (path, k, p)
    print("bench transfer: every path read back what it wrote")


def check_event_files(tmp):
    m = os.path.join(tmp, "mm.onnx")
    logdir = os.path.join(tmp, "logs")
    runs = [subprocess.Popen([EXE, "bench", "--model", m, "-n", "4", "--warmup", "0", "--json",
                              "--logdir", logdir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=clean_env()) for _ in range(4)]
    paths = []
    for p in runs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        paths.append(json.loads(out)["event_file"])
    files = sorted(f for f in os.listdir(logdir) if f.startswith("events.out.tfevents."))
    assert len(files) == 4 and len(set(paths)) == 4, (files, paths)
    assert all(os.path.getsize(os.path.join(logdir, f)) > 100 for f in files), files
    print("event files ok: 4 runs at once,", len(files), "files, e.g.", files[0])


def check_progress_phases(tmp):
    m = os.path.join(tmp, "mm.onnx")
    r = run("bench", "--model", m, "-n", "64", "--progress", "--vs", "onnxruntime")
    assert r.returncode == 0, r.stderr
    err = r.stderr
    for phase in ("compile mm on cpu:0", "warmup mm", "mm batch 1", "64/64 examples",
                  "examples/s", "reference check: mm batch 1 on the cpu reference kernels",
                  "peer onnxruntime: mm"):
        assert phase in err, (phase, err)
    assert "\r" not in err and "\033[" not in err, repr(err)  # not a terminal: plain lines
    # The same through TENSORD_PROGRESS; and nothing without it (stderr is not a terminal).
    r = run("bench", "--model", m, "-n", "8", env=clean_env(TENSORD_PROGRESS="1"))
    assert "compile mm on cpu:0" in r.stderr and "reference check" in r.stderr, r.stderr
    r = run("bench", "--model", m, "-n", "8")
    assert r.returncode == 0 and "compile mm" not in r.stderr and "examples/s" not in r.stderr, r.stderr
    print("progress phases ok")


def peer_reason(exe, m, peer, env=None):
    r = run("bench", "--model", m, "-n", "1", "--warmup", "0", "--json", "--vs", peer, exe=exe,
            env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["peers"][peer]


def check_peers_from_copied_binary(tmp):
    """No build checkout path in the binary: a copy finds nothing (and says where it looked),
    a copy laid out as an installation finds <prefix>/share/tensord/peers."""
    m = os.path.join(tmp, "mm.onnx")
    alone = os.path.join(tmp, "alone", "bin")
    os.makedirs(alone)
    shutil.copy2(EXE, alone)
    p = peer_reason(os.path.join(alone, os.path.basename(EXE)), m, "torch")
    assert not p["available"] and "not found" in p["reason"], p
    assert REPO not in p["reason"] and os.path.join(tmp, "alone") in p["reason"], p
    prefix = os.path.join(tmp, "prefix")
    os.makedirs(os.path.join(prefix, "bin"))
    shutil.copy2(EXE, os.path.join(prefix, "bin"))
    shutil.copytree(os.path.join(REPO, "bench", "peers"),
                    os.path.join(prefix, "share", "tensord", "peers"))
    p = peer_reason(os.path.join(prefix, "bin", os.path.basename(EXE)), m, "torch")
    # The script ran (its own answer), and refuses a model it cannot rebuild in PyTorch.
    assert "not found" not in p.get("reason", ""), p
    print("peers from a copied binary ok:", p.get("reason", "available")[:80])


def check_torch_message(tmp):
    p = peer_reason(None, os.path.join(tmp, "mm.onnx"), "torch")
    assert not p["available"], p
    assert "--network" not in p["reason"], p  # a flag tensord bench does not have
    assert "mm.onnx is none of them" in p["reason"] and "--vs onnxruntime" in p["reason"], p
    print("torch peer message ok:", p["reason"][:100], "...")


def main():
    global EXE
    EXE = os.path.abspath(sys.argv[1])
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("SKIP: python3-onnx is not installed (needed to write the test models)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        model(os.path.join(tmp, "mm.onnx"))
        check_suggestions()
        check_open_errors(tmp)
        check_device_mistakes(tmp)
        check_settings_refused()
        check_devices_table_and_help()
        check_transfer_bench()
        check_event_files(tmp)
        check_progress_phases(tmp)
        check_peers_from_copied_binary(tmp)
        check_torch_message(tmp)
    print("cli rough edges ok")


if __name__ == "__main__":
    main()
