#!/usr/bin/env python3
"""examples/train_digits.cpp (issue 34): the C++ Array API trains an MLP and a CNN on the digits
to >= 97% test accuracy, embedded and through a real `tensord serve` (TENSORD_ADDRESS), on
cpu:0. The example checks its own accuracy (exit 1 below 0.97).

usage: test_train_digits_example.py TRAIN_DIGITS TENSORD
Exit 77 (skip) without python3-sklearn's digits.csv.gz (a failure under CI=true).
"""
import os
import subprocess
import sys
import tempfile
import time

DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    print(" ".join(cmd[1:]) or "(defaults)", "->", last, flush=True)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
        sys.exit(1)
    assert "test accuracy" in last, last


def main():
    example, cli = sys.argv[1], sys.argv[2]
    if not os.path.exists(DIGITS):
        print(f"no {DIGITS} (Debian python3-sklearn)")
        sys.exit(1 if os.environ.get("CI") == "true" else 77)
    env = dict(os.environ, TENSORD_OPENCL="0")
    env.pop("TENSORD_ADDRESS", None)
    run([example, "--model", "mlp"], env)
    run([example, "--model", "cnn"], env)
    with tempfile.TemporaryDirectory(prefix="tensord-train-") as d:
        address = f"unix:{d}/broker.sock"
        broker = subprocess.Popen([cli, "serve", "--listen", address], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                line = broker.stdout.readline()
                if not line or "tensord serving on" in line:
                    break
            run([example, "--model", "cnn"], dict(env, TENSORD_ADDRESS=address))
        finally:
            broker.terminate()
            broker.wait(10)
    print("ok")


if __name__ == "__main__":
    main()
