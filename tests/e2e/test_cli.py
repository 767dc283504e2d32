"""The tensord CLI as a subprocess: devices listing, filters, version, exit codes."""
import json
import os
import subprocess
import sys


def run(exe, *args, env=None):
    e = dict(os.environ)
    for k in ("TENSORD_DEVICES", "TENSORD_DEVICE", "TENSORD_ADDRESS"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([exe, *args], capture_output=True, text=True, env=e, timeout=60)


def main(exe):
    r = run(exe, "--version")
    assert r.returncode == 0 and r.stdout.startswith("tensord "), r

    r = run(exe, "devices", "--json")
    assert r.returncode == 0, r.stderr
    devices = json.loads(r.stdout)
    cpu = [d for d in devices if d["name"] == "cpu:0"]
    assert cpu, devices
    assert cpu[0]["kind"] == "cpu" and cpu[0]["memory_bytes"] > 0, cpu

    r = run(exe, "devices")
    assert r.returncode == 0 and "cpu:0" in r.stdout, r

    r = run(exe, "devices", "--json", env={"TENSORD_DEVICES": "none"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], r.stdout
    assert "no devices" in r.stderr and "cpu:0" in r.stderr, r.stderr

    r = run(exe, "devices", env={"TENSORD_DEVICES": "none"})
    assert r.returncode == 0 and r.stdout == "" and "no devices" in r.stderr, r

    r = run(exe, "devices", "--json", env={"TENSORD_CPU_DEVICES": "3", "TENSORD_DEVICES": "cpu:1,cpu:2"})
    assert [d["name"] for d in json.loads(r.stdout)] == ["cpu:1", "cpu:2"], r.stdout

    r = run(exe, "no-such-command")
    assert r.returncode == 2, r
    r = run(exe, "devices", "--no-such-flag")
    assert r.returncode == 2 and "no-such-flag" in (r.stderr + r.stdout), r
    print("cli ok")


if __name__ == "__main__":
    main(sys.argv[1])
