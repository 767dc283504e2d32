"""`tensord bench load` against a real `tensord serve`: 4 clients for 3 s after a 1 s warm-up (small ops, uploads
through gRPC and shared memory, model runs) with 0 errors, every JSON field present and sane,
the broker's RSS found through the unix socket's peer (SO_PEERCRED) and the broker alive after;
bad flags are usage errors (exit 2).

Usage: test_bench_load.py TENSORD_EXE. Only a unix socket in a temp folder.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TENSORD_") or k == "TENSORD_OPENCL"}
    e["TENSORD_CPU_DEVICES"] = "1"
    e.update(extra)
    return e


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tensord-load-") as tmp:
        listen = "unix:" + os.path.join(tmp, "broker.sock")
        broker = subprocess.Popen([exe, "serve", "--listen", listen], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=clean_env())
        try:
            ready, _, _ = select.select([broker.stdout], [], [], 30)
            assert ready, "broker not ready after 30 s"
            line = broker.stdout.readline().strip()
            assert line.startswith("tensord serving on "), line
            address = line[len("tensord serving on "):]

            r = subprocess.run([exe, "bench", "load", "--address", address, "--clients", "4",
                                "--seconds", "3", "--warmup", "1", "--json"], capture_output=True, text=True,
                               env=clean_env(), timeout=120)
            assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
            j = json.loads(r.stdout)
            assert j["errors"] == 0, j["error_messages"]
            assert j["warmup_errors"] == 0 and j["warmup_seconds"] == 1
            assert j["error_messages"] == []
            assert j["clients"] == 4 and j["address"] == address
            assert 2.5 < j["seconds"] < 60, j["seconds"]
            assert j["ops"] > 0 and j["ops_per_s"] > 0
            total = 0
            for kind in ("small_op", "upload", "model_run"):
                k = j["kinds"][kind]
                assert k["ops"] > 0, (kind, k)
                assert 0 < k["p50_ms"] <= k["p99_ms"] <= k["max_ms"], (kind, k)
                total += k["ops"]
            assert total == j["ops"]
            assert j["broker_pid"] == broker.pid, (j["broker_pid"], broker.pid)
            for f in ("broker_rss_start_bytes", "broker_rss_before_bytes", "broker_rss_peak_bytes", "broker_rss_after_bytes"):
                assert isinstance(j[f], int) and j[f] > 1 << 20, (f, j[f])
            assert j["broker_rss_peak_bytes"] >= j["broker_rss_before_bytes"]
            assert j["broker_rss_after_vs_before"] > 0

            # The text form says the same.
            r = subprocess.run([exe, "bench", "load", "--address", address, "--clients", "2",
                                "--seconds", "1"], capture_output=True, text=True,
                               env=clean_env(), timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
            assert "0 errors" in r.stdout and "broker RSS (pid %d)" % broker.pid in r.stdout, r.stdout

            # Usage errors.
            for bad in (["--clients", "0"], ["--seconds", "0"], ["--clients=-3"], ["--warmup=-1"]):
                r = subprocess.run([exe, "bench", "load", "--address", address, *bad],
                                   capture_output=True, text=True, env=clean_env(), timeout=60)
                assert r.returncode == 2, (bad, r.returncode, r.stderr)
                assert bad[0].split("=")[0] in r.stderr, (bad, r.stderr)
            r = subprocess.run([exe, "bench", "load"], capture_output=True, text=True,
                               env=clean_env(), timeout=60)
            assert r.returncode == 2 and "--address" in r.stderr, r.stderr

            assert broker.poll() is None, "the broker died under load"
        finally:
            if broker.poll() is None:
                broker.send_signal(signal.SIGTERM)
                try:
                    broker.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    broker.kill()
                    broker.wait()
        assert broker.returncode == 0, f"broker exit {broker.returncode}"
    print("bench load e2e: ok")


if __name__ == "__main__":
    main()
