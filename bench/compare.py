"""tensord next to ONNX Runtime and PyTorch on the same ONNX files, side by side.

usage: /usr/bin/python3 bench/compare.py [--set zoo|unseen|corpus|corpus-quick] [--profile]
           [--models a,b] [--batches 1,8]
           [--examples N] [--warmup W] [--threads T] [--tensord PATH] [--device D] [--cache DIR]
           [--no-memory] [--json | --markdown] [--from-json FILE]

For each model and batch size: exports torchvision's model with torch.onnx.export (opset 13;
seeded weights, BatchNorm statistics made non-trivial so folding them matters) into the cache
folder with an input and PyTorch's eager output as an ONNX test_data_set_0 (the golden: eager
run in float64, rounded to float32; eager float32 kept beside), then runs on that file and input
  - tensord:      `tensord bench --model FILE --data DIR --batch-size B --examples N --json`
  - ONNX Runtime: bench/peers/onnxruntime.js (onnxruntime-node, graph optimisation 'all')
  - PyTorch:      bench/peers/torch.py (jit freeze + optimize_for_inference)
with the same threads, and prints ms/example and the ratio tensord / ONNX Runtime, plus the
machine. Every output is checked against the float64 golden with the PASS criterion
(|d| <= 1e-5 * scale + 5e-4 * |golden|, scale = max |golden|; max_error_of_scale in the table)
and plaidbench's own formula beside it, also against eager float32. With the memory check
on (default), a MobileNetV2 batch-1 run of tensord and of ONNX Runtime is repeated under
`/usr/bin/time -v` and the peak RSS ratio printed.

--set unseen: the models of bench/model_set.py instead (21 PyTorch models of many families
nobody here tuned for; batch 1 and each model's larger batch unless --batches is given), their
PyTorch column from that script's own modules, the geometric mean of tensord / ONNX Runtime
and the worst ratio, and peak memory for three of them.

--set corpus / corpus-quick: bench/corpus.py's entries (NAME@oOPSET: every torchvision
classification, segmentation and video model under 150 MB at opsets 11, 13 and 17, and own
modules for what torchvision lacks; 66 models, 196 pairs) or its quick subset, each at its own
batch, exported once into CACHE/corpus/torch-VERSION. --profile adds one untimed
`tensord bench --profile` run per model: the share of time on reference kernels and in
regions with oneDNN ref primitives, in the table.

A part that is missing (no tensord binary or no `bench` command yet, no node_modules, no
PyTorch) is reported as such in its column; the rest still runs.
"""
import argparse
import math
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORT_PEER = os.path.join(HERE, "peers", "onnxruntime.js")
TORCH_PEER = os.path.join(HERE, "peers", "torch.py")
MODELS = ("mobilenet_v2", "resnet50")
MODEL_SET = os.path.join(HERE, "model_set.py")
CORPUS = os.path.join(HERE, "corpus.py")
MEMORY_MODELS = {"zoo": ["mobilenet_v2"],
                 "unseen": ["mobilenet_v3_small", "densenet121", "transformer_encoder"],
                 "corpus": ["mobilenet_v3_small@o13", "bert_ln@o14", "densenet121@o13"],
                 "corpus-quick": ["mobilenet_v3_small@o13", "bert_ln@o14"]}


def model_set():
    sys.path.insert(0, HERE)
    try:
        import model_set as ms  # bench/model_set.py
    finally:
        sys.path.pop(0)
    return ms


def corpus():
    sys.path.insert(0, HERE)
    try:
        import corpus as c  # bench/corpus.py
    finally:
        sys.path.pop(0)
    return c


def export_for(a, name, batch):
    if a.set in ("corpus", "corpus-quick"):
        c = corpus()
        return c.export(c.cache_root(a.cache), name, batch)
    if a.set == "unseen":
        return model_set().export(os.path.join(a.cache, "unseen"), name, batch)
    return export(a.cache, name, batch)


# ---- the machine ----

def machine():
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown CPU":
                    model = " ".join(value.split())
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    return {"cpu": model, "cores": os.cpu_count() or 1, "isa": isa}


def machine_line(m):
    return f"{m['cpu']}, {m['cores']} cores, {m['isa']}"


# ---- the models: torchvision -> ONNX (opset 13) + a test_data_set ----

def save_pb(path, array):
    from onnx import numpy_helper
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def export(cache, name, batch):
    """cache/NAME_bB/{model.onnx, input.npy, test_data_set_0/{input_0,output_0}.pb}."""
    folder = os.path.join(cache, f"{name}_b{batch}")
    model_path = os.path.join(folder, "model.onnx")
    data = os.path.join(folder, "test_data_set_0")
    input_npy = os.path.join(folder, "input.npy")
    expected_npy = os.path.join(folder, "expected.npy")
    done = [model_path, input_npy, expected_npy, os.path.join(data, "output_0.pb"),
            os.path.join(folder, "expected_fp32.npy")]
    if all(os.path.exists(p) for p in done):
        return folder
    import torch
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    # BatchNorm like a trained network's: random scale and shift, running statistics measured
    # on a calibration batch (so activations stay O(1) through the depth and folding BatchNorm
    # into the convolutions really changes their weights).
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.num_features, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.num_features, generator=g))
                m.reset_running_stats()
                m.momentum = None  # cumulative average: exactly the calibration batch's
        model.train()
        model(torch.randn(8, 3, 224, 224, generator=g))
    model.eval()
    x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    ms = model_set()
    y, y32 = ms.eager_outputs(torch, model, x)  # the float64 golden, eager float32
    tmp = tempfile.mkdtemp(dir=cache)
    try:
        torch.onnx.export(model, torch.from_numpy(x), os.path.join(tmp, "model.onnx"),
                          opset_version=13, input_names=["input"], output_names=["output"])
        os.makedirs(os.path.join(tmp, "test_data_set_0"))
        save_pb(os.path.join(tmp, "test_data_set_0", "input_0.pb"), x)
        np.save(os.path.join(tmp, "input.npy"), x)
        ms.write_goldens(tmp, y, y32)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ---- running the three ----

def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def run_json(cmd, timeout, env=None):
    """Runs cmd; returns (json or None, error string or None). Under /usr/bin/time where it is
    installed: the JSON gets the process's peak resident set, max_rss_kib (the whole process as a
    user sees it: runtime, weights, arena; for the ONNX Runtime peer, node's too)."""
    fd, rss_file = tempfile.mkstemp(prefix="rss-")
    os.close(fd)
    timed = os.path.exists("/usr/bin/time")
    try:
        p = subprocess.run((["/usr/bin/time", "-f", "%M", "-o", rss_file] if timed else []) + cmd,
                           capture_output=True, text=True, timeout=timeout, env=env)
        with open(rss_file) as f:
            rss = f.read().strip().splitlines()
    except FileNotFoundError as e:
        return None, f"cannot start {cmd[0]}: {e.strerror}"
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    finally:
        os.unlink(rss_file)
    doc = last_json_line(p.stdout)
    if doc is not None and rss and rss[-1].isdigit():
        doc["max_rss_kib"] = int(rss[-1])
    # `tensord bench` exits 1 on a correctness FAIL but still prints its figures.
    if doc is None or (p.returncode != 0 and "per_example_s" not in doc):
        err = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])
        return None, f"exit {p.returncode}: {err[-1][:300]}"
    if p.returncode != 0:
        doc["exit_code"] = p.returncode
    return doc, None


def find_tensord(explicit):
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for d in ("build", "build-bench", "build-peers"):
        p = os.path.join(ROOT, d, "tensord")
        if os.path.exists(p):
            return p
    return shutil.which("tensord")


def has_bench_command(tensord):
    try:
        p = subprocess.run([tensord, "bench", "--help"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "--model" in p.stdout


def peer_args(folder, a, batch, out):
    return ["--model", os.path.join(folder, "model.onnx"),
            "--input", "input=" + os.path.join(folder, "input.npy"),
            "--examples", str(a.examples * batch if a.per_batch else a.examples),
            "--batch-size", str(batch), "--warmup", str(a.warmup), "--threads", str(a.threads),
            "--outputs", out]


def plaid_fail_ratio(golden, y):
    """plaidbench's check, `np.allclose(golden, out, rtol=5e-4, atol=1e-6)` (its
    check_correctness at inference precision: the tolerance scales with the output under test,
    not the golden one), element by element: the share of elements that fail (NaN fails)."""
    diff = np.abs(golden.astype(np.float64) - y)
    return float((~(diff <= 1e-6 + 5e-4 * np.abs(y))).mean())


def verdict(golden, y):
    """The PASS criterion (as `tensord bench`, src/cli/bench_report.h): every element has
    |d| <= 1e-5 * s + 5e-4 * |golden| with s = max |golden| over the output (its scale); NaN or
    infinity fails. Beside it plaidbench's figures: max_error = max |d| / (1e-6/5e-4 + |y|),
    max_abs_error, and max_error_of_scale = max |d| / s; fail_ratio is the criterion's."""
    ref, y = golden.astype(np.float64), y.astype(np.float64)
    finite = np.isfinite(ref) & np.isfinite(y)
    scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0.0
    diff = np.where(finite, np.abs(ref - y), 0.0)
    ok = finite & (diff <= 1e-5 * scale + 5e-4 * np.abs(ref))
    fail_ratio = float((~ok).mean()) if ok.size else 0.0
    return {"pass": fail_ratio == 0,
            "fail_ratio": fail_ratio,
            "max_error": float(np.where(finite, diff / (1e-6 / 5e-4 + np.abs(np.where(
                finite, y, 0.0))), 0.0).max()) if diff.size else 0.0,
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "max_error_of_scale": float(diff.max()) / scale if diff.size and scale > 0 else 0.0}


def vs_eager(out_path, expected, expected32=None):
    """An output against PyTorch eager's: `match` is the tests' criterion (rtol 1e-3, atol 1e-4
    of the output's scale, as tests/models/test_zoo_vs_torch.py); `pass`, `fail_ratio`,
    `max_error`, `max_abs_error` and `max_error_of_scale` are the verdict (verdict() above)
    against the golden (PyTorch eager in float64, see model_set.py); plaidbench_fail_ratio is
    plaidbench's own check against it. With expected32 (eager float32) its plaidbench fail
    ratio is reported beside (fp32_plaidbench_fail_ratio): float32 rounding alone fails
    elements near zero there."""
    try:
        y = np.load(out_path)
    except (OSError, ValueError) as e:
        return {"match": False, "pass": False, "error": f"unreadable output ({e})"}
    if y.shape != expected.shape:
        return {"match": False, "pass": False,
                "error": f"shape {list(y.shape)} != {list(expected.shape)}"}
    y, ref = y.astype(np.float64), expected.astype(np.float64)
    scale = max(float(np.abs(ref).max()), 1e-30)
    res = {"match": bool(np.allclose(y, ref, rtol=1e-3, atol=1e-4 * scale))}
    res.update(verdict(ref, y))
    res["plaidbench_fail_ratio"] = plaid_fail_ratio(ref, y)
    if expected32 is not None and expected32.shape == y.shape:
        res["fp32_plaidbench_fail_ratio"] = plaid_fail_ratio(expected32, y)
    return res


def load_goldens(folder):
    """(the golden, eager float32 or None) of an exported folder."""
    fp32 = os.path.join(folder, "expected_fp32.npy")
    return (np.load(os.path.join(folder, "expected.npy")),
            np.load(fp32) if os.path.exists(fp32) else None)


def first_npy(folder):
    names = sorted(n for n in os.listdir(folder) if n.endswith(".npy")) \
        if os.path.isdir(folder) else []
    return os.path.join(folder, "output.npy" if "output.npy" in names else names[0]) \
        if names else None


def tensord_env(a):
    """tensord takes its compute threads from the environment (the peers get --threads). With
    --device, TENSORD_DEVICES names only that device, so no other backend is probed (as the
    ONNX Runtime peer loads only its CPU provider; PoCL alone maps 65 MB)."""
    env = dict(os.environ, TENSORD_NUM_THREADS=str(a.threads))
    if a.device:
        env["TENSORD_DEVICES"] = a.device
    return env


def run_tensord(tensord, folder, a, batch, goldens):
    if not tensord:
        return {"available": False, "reason": "no tensord binary (build it, or pass --tensord)"}
    if not has_bench_command(tensord):
        return {"available": False, "reason": f"{tensord} has no `bench` command yet"}
    examples = a.examples * batch if a.per_batch else a.examples
    out = tempfile.mkdtemp(prefix="tensord-", dir=a.cache)
    try:
        cmd = [tensord, "bench", "--model", os.path.join(folder, "model.onnx"),
               "--data", os.path.join(folder, "test_data_set_0"), "--batch-size", str(batch),
               "--examples", str(examples), "--warmup", str(a.warmup), "--json",
               "--outputs", out] + (["--device", a.device] if a.device else [])
        env = tensord_env(a)
        doc, err = run_json(cmd, a.timeout, env)
        if doc is None:
            return {"available": False, "reason": f"tensord bench failed: {err}"}
        doc["available"] = True
        path = first_npy(out)
        if path:
            doc["vs_torch_eager"] = vs_eager(path, *goldens)
        return doc
    finally:
        shutil.rmtree(out, ignore_errors=True)


def examples_for_budget(tensord, folder, a, batch, goldens):
    """`a` itself, or a copy whose --examples (in examples, a multiple of `batch`) makes a
    timed run last --min-ms by tensord's time per example in one untimed run; at most 64x
    --examples and 200,000 examples."""
    if a.min_ms <= 0 or not tensord:
        return a
    first = run_tensord(tensord, folder, a, batch, goldens)
    per = ms(first)
    examples = a.examples * batch if a.per_batch else a.examples
    if not per or per * examples >= a.min_ms:
        return a
    want = min(int(math.ceil(a.min_ms / per)), 64 * examples, 200000)
    want = max(examples, (want + batch - 1) // batch * batch)
    b = argparse.Namespace(**vars(a))
    b.examples, b.per_batch = want, False
    return b


def run_peer(kind, folder, a, batch, goldens):
    out = tempfile.mkdtemp(prefix=f"{kind}-", dir=a.cache)
    try:
        if kind == "onnxruntime":
            node = shutil.which("node")
            if not node:
                return {"available": False, "reason": "node is not installed"}
            cmd = [node, ORT_PEER]
        else:
            name = os.path.basename(folder).rsplit("_b", 1)[0]
            if a.set == "unseen":
                cmd = ["/usr/bin/python3", MODEL_SET, "torch", "--name", name]
            elif a.set in ("corpus", "corpus-quick"):
                cmd = ["/usr/bin/python3", CORPUS, "torch", "--name", name]
            else:
                cmd = ["/usr/bin/python3", TORCH_PEER, "--network", name]
        doc, err = run_json(cmd + peer_args(folder, a, batch, out), a.timeout)
        if doc is None:
            return {"available": False, "reason": f"{kind} peer failed: {err}"}
        if doc.get("available") and doc.get("outputs"):
            doc["vs_torch_eager"] = vs_eager(next(iter(doc["outputs"].values())), *goldens)
            del doc["outputs"]  # the temp folder goes away
        return doc
    finally:
        shutil.rmtree(out, ignore_errors=True)


def profile_tensord(tensord, folder, a, batch):
    """One untimed `tensord bench --profile` run: the shares of step time on reference kernels
    and in regions with oneDNN ref primitives, the ref primitives, the largest reference
    kernel; None when unavailable."""
    if not tensord or not has_bench_command(tensord):
        return None
    cmd = [tensord, "bench", "--model", os.path.join(folder, "model.onnx"),
           "--data", os.path.join(folder, "test_data_set_0"), "--batch-size", str(batch),
           "--examples", str(4 * batch), "--warmup", str(batch), "--json", "--profile",
           "--no-check"] + (["--device", a.device] if a.device else [])
    doc, err = run_json(cmd, a.timeout, tensord_env(a))
    prof = (doc or {}).get("profile")
    if not prof:
        return {"error": err or "no profile"}
    refs = [r for r in prof["steps"] if r["kind"] == "reference"]
    return {"reference_share": prof["reference_share"],
            "onednn_ref_share": prof["onednn_ref_share"],
            "onednn_ref_primitives": prof["onednn_ref_primitives"],
            "top_reference": (f"{refs[0]['step']} {100 * refs[0]['share']:.1f}%" if refs else "")}


# ---- peak memory ----

def max_rss_kib(cmd, timeout, env=None):
    time_bin = "/usr/bin/time"
    if not os.path.exists(time_bin):
        return None, "/usr/bin/time is not installed (apt install time)"
    try:
        p = subprocess.run([time_bin, "-v"] + cmd, capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    doc = last_json_line(p.stdout)
    # A run that completed (its JSON has the timings) counts even when it exits 1, as
    # `tensord bench` does on a correctness FAIL.
    completed = p.returncode == 0 or (doc is not None and "per_example_s" in doc)
    if not completed or not m:
        lines = [ln for ln in p.stderr.splitlines()
                 if ln and not ln.startswith("\t") and not ln.startswith("Command exited")]
        return None, f"exit {p.returncode}: {(lines or ['no output'])[-1][:300]}"
    if doc is not None and doc.get("available") is False:
        return None, doc.get("reason", "not available")
    return int(m.group(1)), None


def memory(tensord, a, name="mobilenet_v2"):
    folder = export_for(a, name, 1)
    model = os.path.join(folder, "model.onnx")
    n = str(min(a.examples, 32))
    res = {"model": name, "batch": 1, "examples": int(n)}
    if tensord and has_bench_command(tensord):
        kib, err = max_rss_kib([tensord, "bench", "--model", model, "--data",
                                os.path.join(folder, "test_data_set_0"), "--batch-size", "1",
                                "--examples", n, "--warmup", "1", "--json"]
                               + (["--device", a.device] if a.device else []),
                               a.timeout, env=tensord_env(a))  # as the timed runs
        res["tensord_max_rss_kib"], res["tensord_error"] = kib, err
    else:
        res["tensord_error"] = "no tensord with a `bench` command"
    node = shutil.which("node")
    if node:
        kib, err = max_rss_kib([node, ORT_PEER, "--model", model, "--input",
                                "input=" + os.path.join(folder, "input.npy"), "--examples", n,
                                "--warmup", "1", "--threads", str(a.threads)], a.timeout)
        res["onnxruntime_max_rss_kib"], res["onnxruntime_error"] = kib, err
    else:
        res["onnxruntime_error"] = "node is not installed"
    t, o = res.get("tensord_max_rss_kib"), res.get("onnxruntime_max_rss_kib")
    res["ratio"] = t / o if t and o else None
    return res


# ---- output ----

def median_run(docs):
    """The run with the median time per example (the first unavailable one if any failed)."""
    ok = [d for d in docs if d.get("available")]
    if len(ok) < len(docs):
        return next(d for d in docs if not d.get("available"))
    ok.sort(key=lambda d: d["per_example_s"])
    doc = dict(ok[len(ok) // 2])
    doc["rounds_ms"] = [round(1e3 * d["per_example_s"], 3) for d in docs]
    rss = [d["max_rss_kib"] for d in docs if d.get("max_rss_kib")]
    if rss:  # the peak over the rounds
        doc["max_rss_kib"] = max(rss)
    return doc


def rss_mib(doc):
    kib = (doc or {}).get("max_rss_kib") if (doc or {}).get("available") else None
    return kib / 1024 if kib else None


def ms(doc):
    if not doc or not doc.get("available"):
        return None
    return 1e3 * doc["per_example_s"]


def rows_of(results):
    rows = []
    for r in results:
        t, o, p = ms(r["tensord"]), ms(r["onnxruntime"]), ms(r["torch"])
        c = r["tensord"].get("vs_torch_eager") or {}
        prof = r.get("profile") or {}
        tr, orr = rss_mib(r["tensord"]), rss_mib(r["onnxruntime"])
        rows.append({"model": r["model"], "batch": r["batch"], "examples": r.get("examples"),
                     "tensord_ms": t, "onnxruntime_ms": o,
                     "tensord_rss_mib": tr, "onnxruntime_rss_mib": orr,
                     "rss_ratio_vs_onnxruntime": tr / orr if tr and orr else None,
                     "torch_ms": p, "ratio_vs_onnxruntime": t / o if t and o else None,
                     "tensord_pass": c.get("pass"),
                     "tensord_max_error_of_scale": c.get("max_error_of_scale"),
                     "torch_fp32_pass": (r.get("torch_fp32_verdict") or {}).get("pass"),
                     "torch_fp32_max_error_of_scale":
                         (r.get("torch_fp32_verdict") or {}).get("max_error_of_scale"),
                     "reference_share": prof.get("reference_share"),
                     "onednn_ref_share": prof.get("onednn_ref_share"),
                     "top_reference": prof.get("top_reference")})
    return rows


def geomean_of(rows, key="ratio_vs_onnxruntime"):
    """Geometric mean and worst of tensord / ONNX Runtime over the rows that have both."""
    ratios = [r[key] for r in rows if r[key]]
    if not ratios:
        return None, None, 0
    worst = max(rows, key=lambda r: r[key] or 0)
    return (float(np.exp(np.mean(np.log(ratios)))),
            (worst["model"], worst["batch"], worst[key]), len(ratios))


def rss_summary(rows):
    """geomean_of for the peak resident set ratio."""
    return geomean_of(rows, "rss_ratio_vs_onnxruntime")


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def print_table(results, mem, m, markdown):
    rows = rows_of(results)
    mach = machine_line(m)
    profiled = any(r["reference_share"] is not None for r in rows)
    rss = any(r["rss_ratio_vs_onnxruntime"] is not None for r in rows)
    head = ["model", "batch", "tensord ms/ex", "ONNX Runtime", "PyTorch", "tensord/ORT",
            "tensord verdict (max_error_of_scale)"] + \
        (["peak RSS MiB tensord/ORT"] if rss else []) + \
        (["reference kernels", "oneDNN ref regions"] if profiled else []) + ["machine"]
    body = [[r["model"], str(r["batch"]), fmt(r["tensord_ms"], ".2f"),
             fmt(r["onnxruntime_ms"], ".2f"), fmt(r["torch_ms"], ".2f"),
             fmt(r["ratio_vs_onnxruntime"], ".2f") + ("x" if r["ratio_vs_onnxruntime"] else ""),
             ("n/a" if r["tensord_pass"] is None else
              f"{'PASS' if r['tensord_pass'] else 'FAIL'} "
              f"({fmt(r['tensord_max_error_of_scale'], '.1e')})")] +
            ([f"{fmt(r['tensord_rss_mib'], '.0f')}/{fmt(r['onnxruntime_rss_mib'], '.0f')} "
              f"({fmt(r['rss_ratio_vs_onnxruntime'], '.2f')}x)"] if rss else []) +
            ([fmt(r["reference_share"] and 100 * r["reference_share"], ".1f") + "%"
              + (f" ({r['top_reference']})" if r["top_reference"] else ""),
              fmt(r["onednn_ref_share"] and 100 * r["onednn_ref_share"], ".1f") + "%"]
             if profiled else []) + [mach] for r in rows]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i in (0, 6, len(head) - 1) else "---:"
                             for i in range(len(head))) + "|")
        for b in body:
            print("| " + " | ".join(b) + " |")
    else:
        widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head) - 1)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for b in body:
            print("  ".join(c.ljust(w) for c, w in zip(b, widths)))
        print(f"machine: {mach}")
    g, worst, n = geomean_of(rows)
    if g is not None:
        def passed(kind, key="pass"):
            return sum(1 for r in results if (r[kind].get("vs_torch_eager") or {}).get(key)
                       is True)

        def plaid_passed(kind, key="plaidbench_fail_ratio"):
            return sum(1 for r in results if (r[kind].get("vs_torch_eager") or {}).get(key) == 0)
        fp32 = "fp32_plaidbench_fail_ratio"
        print(f"{'- ' if markdown else ''}tensord / ONNX Runtime over {n} runs: geometric mean "
              f"{g:.2f}x, worst {worst[2]:.2f}x ({worst[0]} batch {worst[1]}); "
              f"PASS against PyTorch eager float64 (|d| <= 1e-5 scale + 5e-4 |ref|): tensord "
              f"{passed('tensord')} of {len(results)}, ONNX Runtime {passed('onnxruntime')}, "
              f"PyTorch {passed('torch')}; plaidbench's own check (1e-6 + 5e-4 |out|): "
              f"{plaid_passed('tensord')}, {plaid_passed('onnxruntime')}, "
              f"{plaid_passed('torch')} (against eager float32: {plaid_passed('tensord', fp32)}, "
              f"{plaid_passed('onnxruntime', fp32)}, {plaid_passed('torch', fp32)})")
        failed = [r for r in rows if r["tensord_pass"] is False]
        if failed:
            floor = [r for r in failed if r["torch_fp32_pass"] is False]
            within = [r for r in failed if r["torch_fp32_max_error_of_scale"] and
                      (r["tensord_max_error_of_scale"] or 0) <= 2 * r["torch_fp32_max_error_of_scale"]]
            print(f"{'- ' if markdown else ''}tensord FAIL verdicts: {len(failed)}; PyTorch's "
                  f"own float32 output fails the same criterion on {len(floor)} of them; "
                  f"tensord's error within 2x of PyTorch float32's on {len(within)}")
        ranked = sorted((r for r in rows if r["ratio_vs_onnxruntime"]),
                        key=lambda r: -r["ratio_vs_onnxruntime"])
        if len(ranked) > 10:
            print(f"{'- ' if markdown else ''}the ten worst: " + ", ".join(
                f"{r['model']} {r['ratio_vs_onnxruntime']:.2f}x" for r in ranked[:10]))
    rg, rworst, rn = rss_summary(rows)
    if rg is not None:
        above = [r for r in rows if (r["rss_ratio_vs_onnxruntime"] or 0) > 1.3]
        print(f"{'- ' if markdown else ''}peak RSS tensord / ONNX Runtime (node) over {rn} runs: "
              f"geometric mean {rg:.2f}x, worst {rworst[2]:.2f}x ({rworst[0]} batch {rworst[1]}); "
              f"above 1.3x: {len(above)}" +
              (f" ({', '.join(r['model'] for r in above[:12])}"
               f"{', ...' if len(above) > 12 else ''})" if above else ""))
    for r in results:
        for kind in ("tensord", "onnxruntime", "torch"):
            d = r[kind]
            if not d.get("available"):
                print(f"{'- ' if markdown else ''}{r['model']} b{r['batch']} {kind}: "
                      f"{d.get('reason', 'not available')}")
            elif d.get("note"):
                print(f"{'- ' if markdown else ''}{r['model']} b{r['batch']} {kind}: {d['note']}")
        checks = []
        for kind in ("tensord", "onnxruntime", "torch"):
            c = r[kind].get("vs_torch_eager")
            if isinstance(c, dict):
                detail = c.get("error") or (
                    f"{'PASS' if c.get('pass') else 'FAIL'}, "
                    f"max_error_of_scale {fmt(c.get('max_error_of_scale'), '.1e')}, "
                    f"max_error {fmt(c.get('max_error'), '.1e')}, "
                    f"max_abs_error {fmt(c.get('max_abs_error'), '.1e')}, "
                    f"fail_ratio {fmt(c.get('fail_ratio'), '.2g')}, "
                    f"plaidbench fail_ratio {fmt(c.get('plaidbench_fail_ratio'), '.2g')}"
                    + (f" (vs eager float32 {fmt(c['fp32_plaidbench_fail_ratio'], '.2g')})"
                       if "fp32_plaidbench_fail_ratio" in c else ""))
                checks.append(f"{kind} {'match' if c.get('match') else 'DIFFER'} ({detail})")
        if checks:
            print(f"{'- ' if markdown else '  '}{r['model']} b{r['batch']} outputs vs PyTorch "
                  "eager float64: " + ", ".join(checks))
    for one in mem or []:
        t, o = one.get("tensord_max_rss_kib"), one.get("onnxruntime_max_rss_kib")
        line = (f"peak RSS, {one['model']} batch 1 ({one['examples']} examples, /usr/bin/time -v): "
                f"tensord {fmt(t and t / 1024, '.0f')} MiB, ONNX Runtime (node) "
                f"{fmt(o and o / 1024, '.0f')} MiB, ratio {fmt(one['ratio'], '.2f')}")
        print(("\n" if markdown else "") + line)
        for k in ("tensord_error", "onnxruntime_error"):
            if one.get(k):
                print(f"  {k.split('_')[0]}: {one[k]}")


def parse_list(text, conv=str):
    return [conv(x) for x in text.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=("zoo", "unseen", "corpus", "corpus-quick"), default="zoo",
                   help="zoo: MobileNetV2 and ResNet-50 (default); unseen: bench/model_set.py; "
                        "corpus, corpus-quick: bench/corpus.py (all NAME@oOPSET entries, or "
                        "its quick subset)")
    p.add_argument("--models", default="", help="comma list (default: all of the set)")
    p.add_argument("--batches", default="",
                   help="comma list of batch sizes (default 1,8; for --set unseen 1 and each "
                        "model's larger batch)")
    p.add_argument("--examples", type=int, default=64,
                   help="timed examples per run (default 64; plaidbench uses 1024)")
    p.add_argument("--per-batch", action="store_true",
                   help="--examples counts batches, not examples")
    p.add_argument("--min-ms", type=float, default=500.0,
                   help="each timed run lasts at least this long (default 500): a model faster "
                        "than that runs more examples, for every peer alike (counted from an "
                        "untimed tensord run first); 0: --examples exactly. At a fixed 16 "
                        "examples a batch-8 model ran two batches a round and its ratio to "
                        "ONNX Runtime swung 1.0-1.8x between runs")
    p.add_argument("--warmup", type=int, default=8, help="untimed examples (default 8)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved runs of each (default 3); the median is reported")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--tensord", default="", help="the tensord binary (default: build/tensord)")
    p.add_argument("--device", default="",
                   help="the device tensord runs on (default: `tensord bench`'s choice)")
    p.add_argument("--cache", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tensord-bench"),
        help="where exported models are kept")
    p.add_argument("--peers", default="onnxruntime,torch", help="comma list, or '' for none")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-RSS runs")
    p.add_argument("--profile", action="store_true",
                   help="one more (untimed) tensord run per model with `tensord bench "
                        "--profile`: the share of time on reference kernels and in regions "
                        "with oneDNN ref primitives, in the table")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--from-json", default="",
                   help="print the table of a saved --json run instead of running (with "
                        "--markdown: the README's form)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object on stdout")
    out.add_argument("--markdown", action="store_true", help="a Markdown table (the README's)")
    a = p.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        print_table(saved["runs"], saved.get("memory"), saved["machine"], a.markdown)
        return

    if a.set == "corpus":
        known = list(corpus().CORPUS)
    elif a.set == "corpus-quick":
        known = list(corpus().QUICK)
    else:
        known = list(model_set().MODELS) if a.set == "unseen" else list(MODELS)
    if a.set == "corpus-quick" and a.models:  # any corpus entry may be named
        known = list(corpus().CORPUS)
    models = parse_list(a.models) or known
    for mname in models:
        if mname not in known:
            p.error(f"unknown model '{mname}' (known: {', '.join(known)})")
    try:
        batches = parse_list(a.batches or ("" if a.set != "zoo" else "1,8"), int)
    except ValueError:
        p.error(f"--batches must be a comma list of integers, got '{a.batches}'")

    def batches_for(mname):
        if batches or a.set == "zoo":
            return batches
        if a.set in ("corpus", "corpus-quick"):
            return [corpus().batch_of(mname)]
        return model_set().batches_of(mname, "large")
    every = sorted({b for mname in models for b in batches_for(mname)})
    if not every or any(b < 1 for b in every) or a.examples < 1 or a.warmup < 0 or a.rounds < 1:
        p.error("batch sizes, --examples and --rounds must be >= 1, --warmup >= 0")
    if not a.per_batch:
        bad = [b for b in every if a.examples % b]
        if bad:
            p.error(f"--examples {a.examples} is not divisible by batch size {bad[0]}")
    peers = parse_list(a.peers)
    for peer in peers:
        if peer not in ("onnxruntime", "torch"):
            p.error(f"unknown peer '{peer}' (known: onnxruntime, torch)")
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        sys.exit(f"compare.py: exporting the models needs PyTorch, torchvision and onnx ({e}); "
                 "run scripts/setup.sh")
    os.makedirs(a.cache, exist_ok=True)

    tensord = find_tensord(a.tensord)
    if a.tensord and not tensord:
        sys.exit(f"compare.py: --tensord {a.tensord}: no such file")
    log = sys.stderr
    m = machine()
    results = []
    for mname in models:
        for batch in batches_for(mname):
            print(f"[{mname} batch {batch}] exporting ...", file=log, flush=True)
            try:
                folder = export_for(a, mname, batch)
            except Exception as e:  # an exporter failure: reported, the rest still runs
                print(f"[{mname} batch {batch}] export failed: {e}", file=log, flush=True)
                continue
            goldens = load_goldens(folder)
            r = {"model": mname, "batch": batch}
            if goldens[1] is not None and goldens[1].shape == goldens[0].shape:
                # PyTorch's own float32 output against its float64 golden: what float32
                # arithmetic gives on this model (the verdict's floor).
                r["torch_fp32_verdict"] = verdict(goldens[0], goldens[1])
            t0 = time.time()
            ma = examples_for_budget(tensord, folder, a, batch, goldens)
            if ma is not a:
                r["examples"] = ma.examples
                print(f"[{mname} batch {batch}] {ma.examples} examples a run (--min-ms "
                      f"{a.min_ms:g})", file=log, flush=True)
            # Rounds interleave the three, so a slow spell of a shared machine hits them all;
            # each keeps its median run (all times in rounds_ms).
            runs = {"tensord": [], "onnxruntime": [], "torch": []}
            for _ in range(a.rounds):
                runs["tensord"].append(run_tensord(tensord, folder, ma, batch, goldens))
                for peer in ("onnxruntime", "torch"):
                    runs[peer].append(run_peer(peer, folder, ma, batch, goldens) if peer in peers
                                      else {"available": False, "reason": "not requested"})
            for kind, docs in runs.items():
                r[kind] = median_run(docs)
            if a.profile:
                r["profile"] = profile_tensord(tensord, folder, a, batch)
            summary = ", ".join(f"{k} {fmt(ms(r[k]), '.2f')} ms"
                                for k in ("tensord", "onnxruntime", "torch"))
            print(f"[{mname} batch {batch}] {summary} ({time.time() - t0:.0f} s)", file=log,
                  flush=True)
            results.append(r)
    mem = None
    if not a.no_memory:
        mem = []
        for mname in MEMORY_MODELS[a.set]:
            print(f"[memory] {mname} batch 1 under /usr/bin/time -v ...", file=log, flush=True)
            mem.append(memory(tensord, a, mname))

    if a.json:
        rows = rows_of(results)
        g, worst, n = geomean_of(rows)
        print(json.dumps({"machine": m, "set": a.set, "threads": a.threads,
                          "examples": a.examples, "warmup": a.warmup, "rows": rows,
                          "geomean_vs_onnxruntime": g,
                          "worst_vs_onnxruntime": list(worst) if worst else None,
                          "rss_geomean_vs_onnxruntime": rss_summary(rows)[0],
                          "rss_worst_vs_onnxruntime": (list(rss_summary(rows)[1])
                                                       if rss_summary(rows)[1] else None),
                          "runs": results, "memory": mem}))
    else:
        print_table(results, mem, m, a.markdown)


if __name__ == "__main__":
    main()
