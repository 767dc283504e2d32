"""The README's quickstarts run as written, from a directory outside the repository: the C++
one (install into $HOME/tensord, build a program against the prefix with pkg-config, run it) and
the Python one (pip installs the package into a fresh venv from the checkout, reusing the build
folder; the example runs from $HOME; then `pip wheel` and the wheel into a second venv), and the
Node.js one (a broker from the build
folder, the client from the checkout's clients/node, its socket moved into the test's folder).
HOME is a fresh temporary folder and the working directory another one holding only a `build`
link to the build folder (and, for Node.js, a `clients` link), so nothing of the checkout is in
reach but what the quickstart names.

Usage: test_quickstarts.py BUILD_DIR SOURCE_DIR [cpp|python|node]...
"""
import os
import re
import subprocess
import sys
import tempfile


def block(readme, heading):
    """The first ```sh block under `## heading`."""
    part = readme.split("## " + heading + "\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```sh\n(.*?)```", part, re.S)
    assert m, f"no sh block under '## {heading}'"
    return m.group(1)


def run(script, home, cwd, extra_env=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TENSORD_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=home, TENSORD_OPENCL="0", **(extra_env or {}))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def main(build, src, which):
    build, src = os.path.realpath(build), os.path.realpath(src)
    with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tensord-quickstart.") as tmp:
        home, work = os.path.join(tmp, "home"), os.path.join(tmp, "work")
        os.makedirs(home)
        os.makedirs(work)
        os.symlink(build, os.path.join(work, "build"))
        if "cpp" in which:
            r = run(block(readme, "Quickstart: C++"), home, work)
            ok = r.returncode == 0 and r.stdout.split()[-4:] == ["5", "6", "11", "12"]
            print("C++ quickstart:", "ok" if ok else f"FAILED\n{r.stdout}\n{r.stderr}")
            failures += not ok
        if "python" in which:
            # Its first line sets up and builds: done already by the build this test runs in.
            # It runs from the repository root (pip installs "."), with the build folder the
            # test was given.
            script = "\n".join(l for l in block(readme, "Quickstart: Python").splitlines()
                               if not l.startswith("bash scripts/"))
            pip_env = {"TENSORD_PIP_BUILD_DIR": build}
            r = run(script, home, src, pip_env)
            last = r.stdout.strip().splitlines()[-1:] or [""]
            values = [float(v) for v in re.findall(r"[-\d.]+(?:e[-+]?\d+)?", last[0])]
            ok = r.returncode == 0 and len(values) == 2 and all(abs(v - 2) < 1e-3 for v in values)
            print("Python quickstart (pip, venv):", "ok" if ok else f"FAILED\n{r.stdout}\n{r.stderr}")
            failures += not ok
            # A wheel, installed into a second venv: the module, the Python files, py.typed.
            wheels = os.path.join(tmp, "wheels")
            r = run(f"""
/usr/bin/python3 -m venv --system-site-packages {tmp}/venv2
{tmp}/venv2/bin/pip wheel --no-build-isolation --no-deps -w {wheels} {src}
{tmp}/venv2/bin/pip install --no-deps {wheels}/tensord-*.whl
cd {home} && {tmp}/venv2/bin/python -c '
import os, numpy as np, tensord as td
d = os.path.dirname(td.__file__)
assert d.startswith("{tmp}/venv2/"), d
assert os.path.isfile(os.path.join(d, "py.typed"))
print(float(td.sum(td.asarray(np.arange(4.0))).numpy()))'
""", home, home, pip_env)
            ok = r.returncode == 0 and r.stdout.strip().endswith("6.0")
            print("Python wheel:", "ok" if ok else f"FAILED\n{r.stdout}\n{r.stderr}")
            failures += not ok
        if "node" in which:
            import shutil
            if not shutil.which("node") or not shutil.which("npm"):
                print("Node.js quickstart: skipped (no node or npm on PATH)")
            else:
                os.symlink(os.path.join(src, "clients"), os.path.join(work, "clients"))
                sock = os.path.join(tmp, "tensord.sock")
                # The broker it starts in the background is stopped when the script ends.
                script = ("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" +
                          block(readme, "Quickstart: Node.js").replace("/tmp/tensord.sock", sock))
                r = run(script, home, work)
                ok = r.returncode == 0 and "[ 1, 0, 3, 0 ]" in r.stdout
                print("Node.js quickstart:", "ok" if ok else f"FAILED\n{r.stdout}\n{r.stderr}")
                failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:] or ["cpp", "python", "node"]))
