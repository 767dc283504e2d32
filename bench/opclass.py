"""Where the time goes, class by class: one model's kernel time on tensord (cpu:0) beside ONNX
Runtime's, grouped into classes both sides share (Conv by kernel, kind, stride and map size;
MatMul/Gemm; pooling; layout and data movement; element-wise; normalisation; ...).

usage: /usr/bin/python3 bench/opclass.py TARGET [--rounds 3] [--examples 16] [--warmup 4]
           [--tensord build/tensord] [--threads T] [--json]

TARGET: a folder of the ONNX test layout with model.onnx and input.npy (what bench/corpus.py and
bench/model_set.py export), or a corpus key NAME@oOPSET already exported in the corpus cache.
tensord's side is `tensord bench` with ONEDNN_VERBOSE=1 and TENSORD_VERBOSE_OPS=1 (every oneDNN
primitive's and every region kernel of tensord's own execution time, a class holding the
latter marked "*"; the rest, kernels outside regions and the run's overhead, is the row "outside
regions": wall time less the rest); ONNX Runtime's is the node peer's own
profiler (bench/peers/onnxruntime.js --profile; per node, its "framework" row is wall time less
the nodes). Both sides profile, so both pay for it. The rounds alternate tensord and ONNX
Runtime; each class shows its median over the rounds, in ms per run, rows sorted by what tensord
spends above ONNX Runtime. A measurement tool, not a test: what it shows is where to look (a
class at 1.3x on one CPU may be at parity on another; see docs/corpus.md).
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Coarse classes for everything that is not a convolution.
ORT_CLASS = {
    "Gemm": "MatMul/Gemm", "MatMul": "MatMul/Gemm", "FusedMatMul": "MatMul/Gemm",
    "FusedGemm": "MatMul/Gemm", "MatMulNBits": "MatMul/Gemm",
    "MaxPool": "Pool", "AveragePool": "Pool", "GlobalAveragePool": "Pool",
    "GlobalMaxPool": "Pool", "NchwcMaxPool": "Pool",
    "ReorderInput": "Layout/copies", "ReorderOutput": "Layout/copies",
    "Transpose": "Layout/copies", "Reshape": "Layout/copies", "Split": "Layout/copies",
    "Slice": "Layout/copies", "Flatten": "Layout/copies", "Squeeze": "Layout/copies",
    "Unsqueeze": "Layout/copies", "Expand": "Layout/copies", "Gather": "Layout/copies",
    "Concat": "Concat", "Pad": "Layout/copies", "Tile": "Layout/copies",
    "LayerNormalization": "Normalisation", "SkipLayerNormalization": "Normalisation",
    "BatchNormalization": "Normalisation", "InstanceNormalization": "Normalisation",
    "SimplifiedLayerNormalization": "Normalisation", "LRN": "Normalisation",
    "Softmax": "Softmax", "LSTM": "RNN", "GRU": "RNN", "RNN": "RNN",
    "ConvTranspose": "ConvTranspose", "Resize": "Resize", "Upsample": "Resize",
    "ReduceMean": "Reduce", "ReduceSum": "Reduce", "ReduceMax": "Reduce",
}
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
               "HardSwish", "Erf", "Gelu", "FastGelu", "BiasGelu", "Sqrt", "Pow", "Exp",
               "LeakyRelu", "Where", "Neg", "Abs", "Cast", "QuickGelu", "Max", "Min", "Equal",
               "Not", "Less", "Greater"}
# The custom ops of tensord's regions (TENSORD_VERBOSE_OPS), by kind.
TENSORD_CLASS = {"pool": "Pool", "concat": "Concat", "grouped conv": "Conv grouped",
                 "phase scatter": "ConvTranspose"}
ONEDNN_CLASS = {
    "inner_product": "MatMul/Gemm", "matmul": "MatMul/Gemm", "pooling": "Pool",
    "pooling_v2": "Pool", "reorder": "Layout/copies", "shuffle": "Layout/copies",
    "concat": "Concat", "eltwise": "Element-wise", "binary": "Element-wise",
    "sum": "Element-wise", "prelu": "Element-wise", "batch_normalization": "Normalisation",
    "layer_normalization": "Normalisation", "lrn": "Normalisation", "softmax": "Softmax",
    "softmax_v2": "Softmax", "rnn": "RNN", "deconvolution": "ConvTranspose",
    "resampling": "Resize", "reduction": "Reduce",
}


def map_bucket(spatial):
    """The output map's size class: the deep layers of a CNN (<= 16x16) behave apart."""
    n = int(np.prod(spatial)) if spatial else 1
    return "map<=16x16" if n <= 256 else "map<=32x32" if n <= 1024 else "map>32x32"


def conv_class(kernel, group, ic, oc, stride, out_spatial):
    kind = "dw " if group > 1 and group == ic and group == oc else "grouped " if group > 1 else ""
    k = "x".join(str(v) for v in kernel)
    s = f" s{max(stride)}" if max(stride) > 1 else ""
    return f"Conv {kind}{k}{s} {map_bucket(out_spatial)}"


def ort_class(op, args):
    if op == "Conv":
        shapes = [list(d.values())[0] for d in args.get("input_type_shape", [])]
        outs = [list(d.values())[0] for d in args.get("output_type_shape", [])]
        if len(shapes) >= 2 and outs:
            x, w, y = shapes[0], shapes[1], outs[0]
            group = max(1, x[1] // max(1, w[1]))
            stride = [max(1, round(i / max(1, o))) for i, o in zip(x[2:], y[2:])]
            return conv_class(w[2:], group, x[1], y[1], stride, y[2:])
        return "Conv"
    if op in ORT_CLASS:
        return ORT_CLASS[op]
    if op in ELEMENTWISE:
        return "Element-wise"
    return op


def onednn_class(kind, desc):
    if kind != "convolution":
        return ONEDNN_CLASS.get(kind, kind)
    # mb1_g32ic32oc32_ih112oh112kh3sh1dh0ph1_iw112ow112kw3sw1dw0pw1 (1-D: ih1; 3-D: id..)
    g = re.search(r"_g(\d+)", desc)
    ic = int(re.search(r"ic(\d+)", desc).group(1))
    oc = int(re.search(r"oc(\d+)", desc).group(1))
    vals = {}
    for axis in "dhw":
        for part in ("i", "o", "k", "s"):
            m = re.search(rf"{part}{axis}(\d+)", desc)
            if m:
                vals[part + axis] = int(m.group(1))
    axes = [a for a in "dhw" if "k" + a in vals]
    if axes and axes[0] == "h" and vals.get("ih") == 1 and vals.get("kh") == 1:
        axes = axes[1:]  # a 1-D convolution oneDNN runs as H = 1
    kernel = [vals["k" + a] for a in axes]
    stride = [vals.get("s" + a, 1) for a in axes]
    out = [vals.get("o" + a, 1) for a in axes]
    return conv_class(kernel, int(g.group(1)) if g else 1, ic, oc, stride, out)


def exec_ms(fields):
    """The milliseconds at the end of a verbose exec line's fields, or None."""
    try:
        return float(fields[-1])
    except ValueError:
        return None


def run_tensord(tensord, folder, batch, a):
    n = a.examples * batch
    cmd = [tensord, "bench", "--model", os.path.join(folder, "model.onnx"), "--batch-size",
           str(batch), "--examples", str(n), "--warmup", str(a.warmup * batch), "--no-check",
           "--json"]
    data = os.path.join(folder, "test_data_set_0")
    if os.path.isdir(data):
        cmd += ["--data", data]
    env = dict(os.environ, ONEDNN_VERBOSE="1", TENSORD_VERBOSE_OPS="1", TENSORD_DEVICES="cpu:0")
    if a.threads:
        env["TENSORD_NUM_THREADS"] = str(a.threads)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"tensord bench failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    runs = a.warmup + a.examples + 1  # runs: the first (at compile), warmup and timed
    classes = collections.defaultdict(float)
    counts = collections.Counter()
    own = set()  # classes with a kernel of tensord's own
    doc = None
    # A reorder seen fewer times than there were runs happened at compile: weights packed
    # once (into ABcd8b8a, or Acdb16a for the channels-last convolutions of AVX-512, which
    # the pattern below misses), not a run's.
    reorders = collections.Counter(",".join(line.split(",")[:-1]) for line in p.stdout.splitlines()
                                   if line.startswith("onednn_verbose,exec,cpu,reorder,"))
    for line in p.stdout.splitlines():
        f = line.split(",")
        t = exec_ms(f)
        if line.startswith("onednn_verbose,exec,cpu,") and t is not None:
            if f[3] == "reorder" and (re.search(r"dst_\w+::blocked:\w*[A-Z]\w*[A-Z]", line) or
                                      reorders[",".join(f[:-1])] < runs):
                continue
            c = onednn_class(f[3], f[-2])
            classes[c] += t / runs
            counts[c] += 1
        elif line.startswith("tensord_verbose,exec,cpu,") and t is not None:
            # A region's own kernel (TENSORD_VERBOSE_OPS): kind, problem, ms.
            c = (onednn_class("convolution", f[-2]) if f[3] == "conv" and f[-2] else
                 TENSORD_CLASS.get(f[3], f[3]))
            classes[c] += t / runs
            counts[c] += 1
            own.add(c)
        elif line.startswith("{"):
            doc = json.loads(line)
    if doc is None:
        sys.exit("tensord bench printed no JSON")
    wall = 1e3 * doc["per_example_s"] * batch  # ms per run
    classes["outside regions (other kernels, overhead)"] = max(0.0, wall - sum(classes.values()))
    return wall, dict(classes), {k: v / runs for k, v in counts.items()}, own


def run_ort(folder, batch, a, tmp):
    prefix = os.path.join(tmp, "ortprof")
    cmd = ["node", os.path.join(HERE, "peers", "onnxruntime.js"), "--model",
           os.path.join(folder, "model.onnx"), "--input", "input=" + os.path.join(folder, "input.npy"),
           "--examples", str(a.examples * batch), "--batch-size", str(batch), "--warmup",
           str(a.warmup * batch), "--profile", prefix]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"ONNX Runtime peer failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    if not doc.get("available"):
        sys.exit(f"ONNX Runtime peer not available: {doc.get('reason')}")
    with open(doc["profile_file"]) as f:
        events = json.load(f)
    os.unlink(doc["profile_file"])
    runs = sum(1 for e in events if e.get("name") == "model_run") or 1
    classes = collections.defaultdict(float)
    counts = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            c = ort_class(e["args"].get("op_name", "?"), e["args"])
            classes[c] += e["dur"] / 1e3 / runs
            counts[c] += 1
    wall = 1e3 * doc["per_example_s"] * batch
    classes["outside ONNX Runtime's nodes (framework)"] = max(0.0, wall - sum(classes.values()))
    return wall, dict(classes), {k: v / runs for k, v in counts.items()}, set()


def resolve(target):
    if os.path.isdir(target):
        return target
    cache = os.environ.get("TENSORD_CORPUS_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "tensord-bench"))
    found = sorted(glob.glob(os.path.join(cache, "corpus", "*", glob.escape(target) + "_b*")))
    found = [f for f in found if os.path.isdir(f)]
    if not found:
        sys.exit(f"{target}: not a folder and not an exported corpus key under {cache}/corpus "
                 "(bench/corpus.py export --models KEY)")
    return found[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--examples", type=int, default=16, help="timed runs per round")
    p.add_argument("--warmup", type=int, default=4, help="untimed runs per round")
    p.add_argument("--threads", type=int, default=0, help="both sides (default: all cores)")
    p.add_argument("--tensord", default=os.path.join(os.path.dirname(HERE), "build", "tensord"))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.rounds < 1 or a.examples < 1 or a.warmup < 0:
        p.error("--rounds and --examples must be >= 1, --warmup >= 0")
    folder = resolve(a.target)
    x = np.load(os.path.join(folder, "input.npy"), mmap_mode="r")
    batch = int(x.shape[0]) if x.ndim else 1
    td, ort = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            td.append(run_tensord(a.tensord, folder, batch, a))
            ort.append(run_ort(folder, batch, a, tmp))

    def med(side, key):
        return statistics.median(r[1].get(key, 0.0) for r in side)

    keys = set().union(*(r[1] for r in td + ort))
    rows = []
    for k in keys:
        t, o = med(td, k), med(ort, k)
        n_t = statistics.median(r[2].get(k, 0) for r in td)
        n_o = statistics.median(r[2].get(k, 0) for r in ort)
        rows.append({"class": k, "tensord_ms": t, "onnxruntime_ms": o, "tensord_calls": n_t,
                     "onnxruntime_calls": n_o, "tensord_own_kernel": any(k in r[3] for r in td)})
    rows.sort(key=lambda r: r["onnxruntime_ms"] - r["tensord_ms"])
    wall_t = statistics.median(r[0] for r in td)
    wall_o = statistics.median(r[0] for r in ort)
    if a.json:
        print(json.dumps({"model": a.target, "batch": batch, "rounds": a.rounds,
                          "tensord_ms": wall_t, "onnxruntime_ms": wall_o, "classes": rows}))
        return
    print(f"{a.target} (batch {batch}), ms per run, medians of {a.rounds} alternating rounds, "
          f"both sides profiling")
    print(f"{'class':44s} {'tensord':>9s} {'ORT':>9s} {'diff':>8s}  calls/run")
    for r in rows:
        if r["tensord_ms"] < 0.005 and r["onnxruntime_ms"] < 0.005:
            continue
        name = r["class"] + (" *" if r["tensord_own_kernel"] else "")
        print(f"{name:44s} {r['tensord_ms']:9.3f} {r['onnxruntime_ms']:9.3f} "
              f"{r['tensord_ms'] - r['onnxruntime_ms']:+8.3f}  {r['tensord_calls']:g} / "
              f"{r['onnxruntime_calls']:g}")
    print(f"{'wall':44s} {wall_t:9.3f} {wall_o:9.3f} {wall_t - wall_o:+8.3f}  "
          f"({wall_t / wall_o:.2f}x)")
    if any(r["tensord_own_kernel"] for r in rows):
        print("* (some of) tensord's time in this class on a kernel of its own in a region")


if __name__ == "__main__":
    main()
