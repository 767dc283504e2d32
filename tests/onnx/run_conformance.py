"""ONNX conformance: `tensord onnx-test` over ../shared/onnx-node-tests on every present device,
checked against an expected-failures list per suite:

    --suite node      node/ and simple/ (ONNX 1.12's operator tests)   tests/onnx/expected_failures.txt
    --suite pytorch   pytorch-converted/ and pytorch-operator/ (the    tests/onnx/expected_failures_pytorch.txt
                      ONNX repository's PyTorch-exported models, many
                      of opset 6 to 9; seconds to run)

Fails on a failure that is not listed, on a listed test that no longer fails (delete its
line: the list only shrinks), and on a crash of `tensord onnx-test`. Exits 77 (CTest's skip
code here) when the suite's test data is absent, or 1 when CI=true (CI must not skip silently).
When the node suite is absent (a plain clone has no ../shared) and --generate-into DIR is given
(the ctest passes <build>/onnx-node-tests), it is generated there from the installed python3-onnx
by generate_node_tests.py, as the shared copy was made, and run from there.

Every device `tensord devices` lists runs the same tests (a new backend's devices join by being
listed; the ctests set TENSORD_CPU_DEVICES=2 so that cpu:1 runs them too); --device D limits it.

    run_conformance.py TENSORD [--suite node|pytorch] [--tests DIR] [--expected FILE]
                       [--generate-into DIR]
    run_conformance.py TENSORD --suite S --update   # rewrite S's expected-failures file from a real run

Expected-failures files: one `test_name  # reason` per line, `#` comments and blank lines allowed;
`test_name@kind  # reason` limits an entry to devices of one kind (`@opencl`).
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TESTS = os.path.join(os.path.dirname(REPO), "shared", "onnx-node-tests")
SUITES = {
    # suite: (its folders under --tests, its expected-failures file)
    "node": (("node", "simple"), os.path.join(HERE, "expected_failures.txt")),
    "pytorch": (("pytorch-converted", "pytorch-operator"),
                os.path.join(HERE, "expected_failures_pytorch.txt")),
}
SKIP = 77


def shown(path):
    """A path as the user should see it: relative to the repository when inside it."""
    rel = os.path.relpath(path, REPO)
    return path if rel.startswith("..") else rel


def clean_env():
    env = dict(os.environ)
    env.pop("TENSORD_DEVICE", None)
    env.pop("TENSORD_ADDRESS", None)  # conformance of this build's engine, not some broker's
    return env


def present_devices(exe):
    r = subprocess.run([exe, "devices", "--json"], capture_output=True, text=True, env=clean_env(),
                       timeout=120)
    if r.returncode != 0:
        sys.exit(f"`tensord devices --json` failed ({r.returncode}): {r.stderr.strip()}")
    return [(d["name"], d["kind"]) for d in json.loads(r.stdout)]


def run_device(exe, dirs, device):
    """{test name: (status, reason)} for one device."""
    cmd = [exe, "onnx-test", *dirs, "--device", device, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=1200)
    if r.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)}: exit status {r.returncode}\n{r.stderr[-4000:]}")
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        sys.exit(f"{' '.join(cmd)}: output is not JSON ({e})\n{r.stderr[-4000:]}")
    counts = {}  # folder -> {status: n}
    for t in report["tests"]:
        folder = os.path.basename(os.path.dirname(os.path.normpath(t.get("dir", ""))))
        by = counts.setdefault(folder, {})
        by[t["status"]] = by.get(t["status"], 0) + 1
    per_folder = "; ".join(
        f"{folder}/ {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
        f"{c.get('skipped', 0)} skipped" for folder, c in sorted(counts.items()))
    print(f"{device}: {per_folder} in {report.get('seconds', 0):.1f} s")
    return {t["name"]: (t["status"], t["reason"]) for t in report["tests"]}


def read_expected(path):
    """{test name: kind or None} from the expected-failures file."""
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+(@[a-z0-9_]+)?", entry):
                sys.exit(f"{path}:{lineno}: cannot read entry {entry!r} (want `test_name  # reason`)")
            name, _, kind = entry.partition("@")
            entries[name] = kind or None
    return entries


def chosen_devices(exe, wanted):
    """The present devices, or those of them named by --device (an absent one is an error)."""
    devices = present_devices(exe)
    if not wanted:
        return devices
    names = [d for d, _ in devices]
    missing = [w for w in wanted if w not in names]
    if missing:
        sys.exit(f"--device {', '.join(missing)}: not present (present: {', '.join(names) or 'none'})")
    return [(d, k) for d, k in devices if d in wanted]


def check(exe, dirs, expected_path, wanted=()):
    expected = read_expected(expected_path)
    devices = chosen_devices(exe, wanted)
    if not devices:
        print("no devices present (TENSORD_DEVICES filters out everything?)")
        return SKIP
    problems = []
    seen = set()
    for device, kind in devices:
        results = run_device(exe, dirs, device)
        seen.update(results)
        for name, (status, reason) in sorted(results.items()):
            listed = name in expected and expected[name] in (None, kind)
            if status == "failed" and not listed:
                problems.append(f"NEW FAILURE on {device}: {name}: {reason}")
            elif status != "failed" and listed:
                problems.append(
                    f"NOW {status.upper()} on {device}: {name}: delete its line from "
                    f"{shown(expected_path)} (the list only shrinks)")
    # A name no device ran is stale (a --device subset runs every test too: the list is the same).
    for name in sorted(set(expected) - seen):
        problems.append(f"STALE ENTRY: {name} is listed in {shown(expected_path)} "
                        "but no such test exists: delete its line")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) against {shown(expected_path)}")
        return 1
    print(f"conformance ok: every failure is a listed one ({len(expected)} listed)")
    return 0


# --- --update: regenerate the list, grouped by the op each test exercises --------------------

# Causes worth knowing that the failure message cannot say, printed under the op's heading.
NOTES = {
    "Cast": "ONNX 1.12's reference casts float->bfloat16 by truncating the low 16 bits; tensord "
            "rounds to nearest even",
    "CastLike": "ONNX 1.12's generator wrote 'like' as shape [1] while the model declares [3, 4]; "
                "the engine refuses inputs that contradict the declared shape",
    "Scan": "opset-8 Scan (batched, with sequence_lens) is not implemented; opset 9+ Scan is",
}

ALIASES = {"sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss"}


def tested_op(test_dir, name):
    """The op a test exercises, from its name (test_<op>_<case>, op in lower case with or
    without underscores), else its model's only op."""
    try:
        import onnx
        by_key = {s.name.lower(): s.name for s in onnx.defs.get_all_schemas()}
        by_key.update(ALIASES)
        tokens = (name[len("test_"):] if name.startswith("test_") else name).split("_")
        for k in range(len(tokens), 0, -1):
            key = "".join(tokens[:k]).lower()
            if key in by_key:
                return by_key[key]
        model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        return ops.pop() if len(ops) == 1 else "(several ops)"
    except Exception:  # noqa: BLE001 - grouping is cosmetic
        return "(unknown op)"


def update(exe, dirs, expected_path, suite):
    devices = present_devices(exe)
    failing = {}  # name -> {kind: reason}
    kinds = sorted({k for _, k in devices})
    dir_of = {}
    for device, kind in devices:
        for name, (status, reason) in run_device(exe, dirs, device).items():
            if status == "failed":
                failing.setdefault(name, {})[kind] = reason
    for d in dirs:
        for name in os.listdir(d):
            dir_of.setdefault(name, os.path.join(d, name))
    groups = {}
    for name, by_kind in failing.items():
        groups.setdefault(tested_op(dir_of.get(name, ""), name), []).append(name)
    folders = " and ".join(f"{d}/" for d in SUITES[suite][0])
    lines = [
        f"# Known failures of `tensord onnx-test` on ../shared/onnx-node-tests ({folders}).",
        "# Generated from a real run by `tests/onnx/run_conformance.py build/tensord --suite "
        f"{suite} --update`,",
        "# grouped by the op each test exercises. The list only shrinks: when a listed test starts",
        "# passing, the conformance CTest test fails until its line is deleted.",
        "# Format: `test_name  # reason`; `test_name@kind` limits an entry to one device kind.",
    ]
    for op in sorted(groups, key=str.lower):
        lines += ["", f"# --- {op} ---"]
        if op in NOTES:
            lines.append(f"# note: {NOTES[op]}")
        for name in sorted(groups[op]):
            by_kind = failing[name]
            if set(by_kind) == set(kinds):
                entries = [(name, next(iter(by_kind.values())))]
            else:
                entries = [(f"{name}@{k}", r) for k, r in sorted(by_kind.items())]
            for entry, reason in entries:
                reason = " ".join(reason.split())
                if len(reason) > 160:
                    reason = reason[:157] + "..."
                lines.append(f"{entry}  # {reason}")
    with open(expected_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(failing)} entries in {len(groups)} groups to {expected_path}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tensord", help="the tensord executable")
    ap.add_argument("--suite", choices=sorted(SUITES), default="node",
                    help="which test folders, each with its own expected-failures file (default: node)")
    ap.add_argument("--tests", default=DEFAULT_TESTS,
                    help="folder holding the suites' folders (default: <repo>/../shared/"
                         "onnx-node-tests; the TENSORD_ONNX_TESTS environment variable wins)")
    ap.add_argument("--expected", help="the expected-failures file (default: the suite's)")
    ap.add_argument("--update", action="store_true", help="rewrite the expected-failures file")
    ap.add_argument("--generate-into", metavar="DIR",
                    help="when the node suite is absent from --tests, generate it here from the "
                         "installed python3-onnx (kept for the next run) and run it from here")
    ap.add_argument("--device", action="append", default=[],
                    help="run on this present device only (repeatable; default: every device)")
    args = ap.parse_args()
    if os.environ.get("TENSORD_ONNX_TESTS"):
        args.tests = os.environ["TENSORD_ONNX_TESTS"]
    subdirs, default_expected = SUITES[args.suite]
    expected = args.expected or default_expected

    present = lambda root: [os.path.join(root, d) for d in subdirs  # noqa: E731
                            if os.path.isdir(os.path.join(root, d))]
    dirs = present(args.tests)
    if len(dirs) != len(subdirs) and args.suite == "node" and args.generate_into:
        print(f"no ONNX node tests at {args.tests}: generating them from the installed "
              f"python3-onnx into {args.generate_into}", flush=True)
        gen = subprocess.run([sys.executable, os.path.join(HERE, "generate_node_tests.py"),
                              args.generate_into])
        if gen.returncode not in (0, SKIP):
            sys.exit(f"generating the ONNX node tests failed (exit status {gen.returncode})")
        if gen.returncode == 0:
            args.tests = args.generate_into
            dirs = present(args.tests)
    if len(dirs) != len(subdirs):
        missing = [d for d in subdirs if not os.path.isdir(os.path.join(args.tests, d))]
        message = (f"no ONNX tests {', '.join(missing)} at {args.tests} (suite {args.suite}; set "
                   "TENSORD_ONNX_TESTS or --tests to point elsewhere"
                   + ("; only the node suite can be generated from python3-onnx, these come from "
                      "the ONNX repository's backend test data" if args.suite != "node" else "")
                   + ")")
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            print(f"FAIL: {message}; CI=true, so a missing suite is an error, not a skip")
            return 1
        print(f"SKIP: {message}")
        return SKIP
    if args.update:
        if args.device:
            sys.exit("--update runs on every device (the list covers them all); drop --device")
        return update(args.tensord, dirs, expected, args.suite)
    return check(args.tensord, dirs, expected, args.device)


if __name__ == "__main__":
    sys.exit(main())
