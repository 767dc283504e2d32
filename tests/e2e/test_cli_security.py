"""Issue 15 through the CLI: tokens with newlines or control characters (attack 9), public
listeners without a token (attack 8), token files others can read."""
import os
import re
import subprocess
import sys
import tempfile


def env_without_tensord(**extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("TENSORD_") or k == "TENSORD_OPENCL"}
    e.update(extra)
    return e


def start(exe, *args, listen="127.0.0.1:0"):
    p = subprocess.Popen([exe, "serve", "--listen", listen, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env_without_tensord())
    line = p.stdout.readline()
    m = re.match(r"tensord serving on (\S+)", line)
    assert m, (line, p.stderr.read() if p.poll() is not None else "")
    return p, m.group(1)


def main(exe):
    with tempfile.TemporaryDirectory() as d:
        tokens = os.path.join(d, "tokens")
        with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("# tenants\nalice:alice-secret\n")
        broker, addr = start(exe, "--token-file", tokens)
        try:
            def devices(token):
                return subprocess.run([exe, "devices", "--address", addr], capture_output=True,
                                      text=True, timeout=60,
                                      env=env_without_tensord(TENSORD_TOKEN=token))
            r = devices("alice-secret\n")  # as `TENSORD_TOKEN=$(cat file)` would not, but a
            assert r.returncode == 0 and "cpu:0" in r.stdout, r  # file read raw does
            r = devices("  alice-secret\r\n")
            assert r.returncode == 0, r
            r = devices("alice\x01secret")
            assert r.returncode == 2, r  # not 134 (abort)
            assert "INVALID_ARGUMENT" in r.stderr and "0x01" in r.stderr, r.stderr
            r = devices("alice\nsecret")
            assert r.returncode == 2 and "TENSORD_TOKEN" in r.stderr, r
            r = devices("wrong")
            assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr, r
            assert broker.poll() is None, "the broker died"
        finally:
            broker.terminate()
            assert broker.wait(30) == 0

        for listen in ("0.0.0.0:0", "[::]:0"):
            r = subprocess.run([exe, "serve", "--listen", listen], capture_output=True, text=True,
                               timeout=30, env=env_without_tensord())
            assert r.returncode == 2, r
            assert "not a loopback address" in r.stderr and "--insecure" in r.stderr, r.stderr
        broker, addr = start(exe, "--insecure", listen="0.0.0.0:0")
        broker.terminate()
        assert broker.wait(30) == 0
        broker, addr = start(exe, "--token-file", tokens, listen="0.0.0.0:0")
        broker.terminate()
        broker.wait(30)
        assert "cleartext" in broker.stderr.read()

        os.chmod(tokens, 0o644)
        r = subprocess.run([exe, "serve", "--listen", "127.0.0.1:0", "--token-file", tokens],
                           capture_output=True, text=True, timeout=30, env=env_without_tensord())
        assert r.returncode == 2 and "chmod 600" in r.stderr, r
    print("cli security ok")


if __name__ == "__main__":
    main(sys.argv[1])
