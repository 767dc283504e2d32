"""The PyTorch peer of `tensord bench --vs torch` (and bench/compare.py).

usage: /usr/bin/python3 bench/peers/torch.py --model FILE.onnx [--network NAME]
           --input NAME=FILE.npy [...] [--examples N] [--batch-size B] [--warmup W]
           [--threads T] [--outputs DIR]

PyTorch does not run ONNX files, so the peer builds the network the file holds in PyTorch
(--network: mobilenet_v2 or resnet50 from torchvision, imdb_lstm as Keras' example, or a
torchvision ResNet 18/34/101/152; without --network it is recognised from the file: tensord's
zoo metadata or weight names, else the op counts of a torch.onnx.export'ed file) and loads the file's weights into it:
  - by name, when the initializers are named as torchvision's state_dict keys (tensord's zoo
    names its parameters that way; an ONNX LSTM's W/R/B are converted to torch's layout);
  - else by position, for files exported from torchvision with torch.onnx.export: the Conv
    nodes in graph order are torchvision's Conv2d modules in order, each BatchNorm folded into
    its Conv by the exporter (the peer sets the BatchNorm to the identity plus the folded bias);
    Gemm/Linear, LSTM and the embedding likewise.
When neither fits, it runs random weights, says so in "note" and writes no outputs (they would
not be comparable). The model is torch.jit.trace'd, frozen and optimize_for_inference'd and
run under torch.inference_mode() with torch.set_num_threads(T) (default: the machine's cores),
plaidbench's way: W/B untimed batches, then N/B timed ones. compile_s = building the model,
loading the weights, the jit passes and the first run (plus the two runs after it during which
TorchScript's profiling executor optimises the graph: PyTorch's compile step).

Prints ONE JSON line on stdout: {"peer":"torch","version":..,"available":true,"threads":..,
"network":..,"compile_s":..,"execution_s":..,"per_example_s":..,"examples":N,"batch_size":B,
"warmup":W,"weights":"by name"|"by position"|"random","outputs":{"output":"DIR/output.npy"}}
or {"peer":"torch","available":false,"reason":".."} (exit 0) when PyTorch/torchvision are missing
or the network has no PyTorch equivalent. Bad usage or input: one line on stderr, exit 2; a
failure while running: exit 1.
"""
import os
import sys

# This file is named torch.py: keep its own folder off the import path so that `import torch`
# finds PyTorch, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

PEER = "torch"
NETWORKS = ("mobilenet_v2", "resnet50", "imdb_lstm")
# torchvision ResNets recognised in torch.onnx.export'ed files by their Conv count (the zoo has
# only resnet50); their weights are loaded by position like any torchvision export.
TORCHVISION_RESNETS = {20: "resnet18", 36: "resnet34", 104: "resnet101", 155: "resnet152"}
KNOWN = NETWORKS + tuple(TORCHVISION_RESNETS.values())
JIT_PROFILING_RUNS = 2  # runs after the first one before TorchScript's graph is optimised


class UsageError(Exception):
    pass


class ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    p = ArgParser(prog="torch.py", description="PyTorch peer of `tensord bench --vs torch`",
                  add_help=True)
    p.add_argument("--model", required=True, help="the ONNX file the other peers run")
    p.add_argument("--network", default="", help=", ".join(KNOWN))
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    p.add_argument("--examples", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--warmup", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--outputs", default="", help="directory for NAME.npy outputs")
    a = p.parse_args(argv)
    if a.examples < 1 or a.batch_size < 1 or a.warmup < 0 or a.threads < 0:
        raise UsageError("--examples and --batch-size must be >= 1, --warmup and --threads >= 0")
    if a.examples % a.batch_size:
        raise UsageError(f"--examples {a.examples} is not divisible by --batch-size {a.batch_size}")
    inputs = []
    for spec in a.input:
        name, eq, path = spec.partition("=")
        if not eq or not name:
            raise UsageError(f"--input must be NAME=FILE.npy, got '{spec}'")
        inputs.append((name, path))
    a.input = inputs
    a.threads = a.threads or os.cpu_count() or 1
    return a


def unavailable(reason):
    print(json.dumps({"peer": PEER, "available": False, "reason": reason}), flush=True)
    sys.exit(0)


# ---- the ONNX file: initializers (with Identity/Constant aliases) and nodes ----

class OnnxFile:
    def __init__(self, path):
        import onnx
        from onnx import numpy_helper
        try:
            model = onnx.load(path)
        except FileNotFoundError:
            raise UsageError(f"cannot read model {path}: no such file")
        except Exception as e:  # protobuf DecodeError and friends
            raise UsageError(f"cannot load model {path}: not an ONNX model ({type(e).__name__})")
        g = model.graph
        if not g.node:
            raise UsageError(f"cannot load model {path}: the graph has no nodes")
        self.metadata = {p.key: p.value for p in model.metadata_props}
        self.values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.init_names = [t.name for t in g.initializer]
        self.nodes = list(g.node)
        for n in self.nodes:
            if n.op_type == "Constant" and n.output:
                for attr in n.attribute:
                    if attr.name == "value":
                        self.values[n.output[0]] = numpy_helper.to_array(attr.t)
            elif n.op_type == "Identity" and n.input and n.input[0] in self.values:
                self.values[n.output[0]] = self.values[n.input[0]]
        consts = set(self.values)
        self.graph_inputs = [i.name for i in g.input if i.name not in consts]
        self.graph_outputs = [o.name for o in g.output]

    def value(self, name):
        return self.values.get(name) if name else None

    def ops(self, op_type):
        return [n for n in self.nodes if n.op_type == op_type]

    def count(self, op_type):
        return sum(1 for n in self.nodes if n.op_type == op_type)


def infer_network(f):
    """The network an ONNX file holds, from its metadata, weight names or op counts."""
    for key in ("network", "tensord.network"):
        if f.metadata.get(key) in KNOWN + ("mobilenet",):
            return f.metadata[key]
    names = set(f.init_names)
    if "lstm.W" in names or "lstm.weight_ih_l0" in names:
        return "imdb_lstm"
    if "features.18.0.weight" in names:
        return "mobilenet_v2"
    if "layer4.2.conv3.weight" in names:
        return "resnet50"
    if any(n.startswith("conv_dw_13") for n in names):
        return "mobilenet"
    convs, lstms = f.count("Conv"), f.count("LSTM")
    if lstms == 1 and convs == 0 and f.count("Gather") >= 1:
        return "imdb_lstm"
    if convs == 52 and (f.count("Clip") >= 35 or f.count("Relu") >= 35):
        return "mobilenet_v2"
    if convs == 53 and f.count("Relu") >= 49 and f.count("MaxPool") == 1:
        return "resnet50"
    if convs == 27 and f.count("Clip") + f.count("Relu") >= 27:
        return "mobilenet"
    if convs in TORCHVISION_RESNETS and f.count("MaxPool") == 1 and f.count("Relu") >= convs - 3:
        return TORCHVISION_RESNETS[convs]
    return ""


# ---- the PyTorch models ----

def build_model(torch, name):
    import torchvision
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2()
    if name == "resnet50":
        return torchvision.models.resnet50()
    if name in TORCHVISION_RESNETS.values():
        return getattr(torchvision.models, name)()

    class ImdbLstm(torch.nn.Module):
        """Keras' imdb_lstm example: Embedding(20000, 128) -> LSTM(128) -> Dense(1) -> sigmoid
        (as tests/models/test_zoo_vs_torch.py)."""

        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(20000, 128)
            self.lstm = torch.nn.LSTM(128, 128, batch_first=True)
            self.dense = torch.nn.Linear(128, 1)

        def forward(self, tokens):
            out, _ = self.lstm(self.embedding(tokens))
            return torch.sigmoid(self.dense(out[:, -1, :]))

    return ImdbLstm()


def onnx_lstm_to_torch(w, r, b):
    """ONNX LSTM W/R/B [1, 4H, .] (gates i, o, f, c) -> torch weight_ih/hh, bias_ih/hh
    (gates i, f, g, o), as tests/models/test_zoo_vs_torch.py."""
    def reorder(m):
        i, o, f, c = np.split(m, 4, axis=0)
        return np.concatenate([i, f, c, o], axis=0)

    wb, rb = np.split(b[0], 2)
    return {"lstm.weight_ih_l0": reorder(w[0]), "lstm.weight_hh_l0": reorder(r[0]),
            "lstm.bias_ih_l0": reorder(wb), "lstm.bias_hh_l0": reorder(rb)}


def state_keys(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def weights_by_name(f, model):
    """The state_dict from initializers named as its keys, or None when they do not all match."""
    weights = dict(f.values)
    if "lstm.W" in weights and "lstm.R" in weights and "lstm.B" in weights:
        weights.update(onnx_lstm_to_torch(weights.pop("lstm.W"), weights.pop("lstm.R"),
                                          weights.pop("lstm.B")))
    want = state_keys(model)
    got = {}
    for k, shape in want.items():
        v = weights.get(k)
        if v is None or tuple(v.shape) != shape:
            return None
        got[k] = v
    return got


def weights_by_position(f, model, torch):
    """The state_dict from a torch.onnx.export'ed file (BatchNorm folded into Conv), by the order
    of Conv / Gemm / LSTM / Gather nodes. None when anything does not line up."""
    want = state_keys(model)
    mods = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    got = {}
    convs = f.ops("Conv")
    linears = [n for n in f.nodes if n.op_type in ("Gemm", "MatMul")]
    ci = li = 0
    for i, (name, m) in enumerate(mods):
        if isinstance(m, torch.nn.Conv2d):
            if ci >= len(convs):
                return None
            node = convs[ci]
            ci += 1
            w = f.value(node.input[1])
            b = f.value(node.input[2]) if len(node.input) > 2 else None
            if w is None or tuple(w.shape) != tuple(m.weight.shape):
                return None
            got[name + ".weight"] = w
            bn = mods[i + 1] if i + 1 < len(mods) else None
            if m.bias is not None:
                if b is None:
                    return None
                got[name + ".bias"] = b
            elif bn is not None and isinstance(bn[1], torch.nn.BatchNorm2d):
                c = w.shape[0]
                got[bn[0] + ".weight"] = np.ones(c, np.float32)
                got[bn[0] + ".bias"] = b if b is not None else np.zeros(c, np.float32)
                got[bn[0] + ".running_mean"] = np.zeros(c, np.float32)
                got[bn[0] + ".running_var"] = np.full(c, 1.0 - bn[1].eps, np.float32)
            elif b is not None:
                return None
        elif isinstance(m, torch.nn.Linear):
            if li >= len(linears):
                return None
            node = linears[li]
            li += 1
            w = f.value(node.input[1])
            if w is None:
                return None
            trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
            if node.op_type == "MatMul" or not trans_b:
                w = w.T
            bias = f.value(node.input[2]) if node.op_type == "Gemm" and len(node.input) > 2 \
                else None
            if bias is None and node.op_type == "MatMul":  # MatMul + Add(bias)
                out = node.output[0]
                for n in f.nodes:
                    if n.op_type == "Add" and out in n.input:
                        other = [x for x in n.input if x != out]
                        bias = f.value(other[0]) if other else None
                        break
            got[name + ".weight"] = w
            if m.bias is not None:
                if bias is None:
                    return None
                got[name + ".bias"] = bias.reshape(-1)
        elif isinstance(m, torch.nn.Embedding):
            tables = [f.value(n.input[0]) for n in f.ops("Gather")]
            tables = [t for t in tables
                      if t is not None and tuple(t.shape) == tuple(m.weight.shape)]
            if len(tables) != 1:
                return None
            got[name + ".weight"] = tables[0]
        elif isinstance(m, torch.nn.LSTM):
            lstms = f.ops("LSTM")
            if len(lstms) != 1 or len(lstms[0].input) < 4:
                return None
            w, r, b = (f.value(x) for x in lstms[0].input[1:4])
            if w is None or r is None or b is None:
                return None
            got.update({k.replace("lstm.", name + ".", 1): v
                        for k, v in onnx_lstm_to_torch(w, r, b).items()})
    if ci != len(convs) or set(got) != set(want):
        return None
    for k, shape in want.items():
        if tuple(np.shape(got[k])) != shape:
            return None
    return got


def load_weights(f, model, torch):
    state = weights_by_name(f, model)
    how = "by name"
    if state is None:
        state = weights_by_position(f, model, torch)
        how = "by position"
    if state is None:
        return "random"
    model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()},
                          strict=False)
    return how


def safe_name(name):
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return s if s not in ("", ".", "..") else "output"


def main(argv):
    args = parse_args(argv)
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        unavailable(f"python3-onnx is not installed ({e}); the torch peer reads the ONNX file's "
                    "weights with it")

    f = OnnxFile(args.model)
    network = args.network or infer_network(f)
    if not network:
        unavailable(
            "PyTorch cannot run ONNX files, so the torch peer only compares networks it can "
            "rebuild in PyTorch: the zoo's mobilenet_v2, resnet50 and imdb_lstm (as `tensord "
            "bench NETWORK` or their --export'ed files) and torchvision's MobileNetV2 and ResNets "
            f"(18/34/50/101/152) exported with torch.onnx.export; {os.path.basename(args.model)} is none of them "
            "(--vs onnxruntime runs any ONNX file)")
    if network == "mobilenet":
        unavailable("mobilenet (v1, Keras applications) has no torchvision equivalent")
    if network not in KNOWN:
        raise UsageError(f"unknown --network '{network}' (known: {', '.join(KNOWN)})")

    feeds = {}
    for name, path in args.input:
        if name in feeds:
            raise UsageError(f"input '{name}' given twice")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"--input {name}: cannot read {path} as .npy ({e})")
    if len(feeds) != 1:
        raise UsageError(f"the {network} network takes one input; got {len(feeds)} --input")
    (in_name, x), = feeds.items()
    if f.graph_inputs and in_name not in f.graph_inputs:
        raise UsageError(f"the model has no input named '{in_name}' "
                         f"(inputs: {', '.join(f.graph_inputs)})")
    want_dtype = np.int64 if network == "imdb_lstm" else np.float32
    if x.dtype != want_dtype:
        raise UsageError(f"--input {in_name}: {network} takes {np.dtype(want_dtype).name}, "
                         f"got {x.dtype.name}")

    try:  # after the checks of the input, which need no PyTorch (fast errors)
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        unavailable(f"PyTorch/torchvision are not installed ({e}; apt install python3-torch "
                    "python3-torchvision)")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = build_model(torch, network).eval()
    how = load_weights(f, model, torch)
    xt = torch.from_numpy(np.ascontiguousarray(x))
    try:
        with torch.no_grad():  # tracing needs grad mode off, not inference tensors
            traced = torch.jit.trace(model, (xt,), check_trace=False)
            jit = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        with torch.inference_mode():
            # TorchScript's profiling executor specialises the graph over the first runs;
            # they are its compile step, so they count in compile_s.
            first = jit(xt)
            for _ in range(JIT_PROFILING_RUNS):
                jit(xt)
    except RuntimeError as e:
        raise UsageError(f"cannot run {network} on --input {in_name} {list(x.shape)}: "
                         f"{str(e).splitlines()[0]}")
    t1 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(args.warmup // args.batch_size):
            jit(xt)
        t2 = time.perf_counter()
        for _ in range(args.examples // args.batch_size):
            jit(xt)
        t3 = time.perf_counter()

    result = {
        "peer": PEER, "version": torch.__version__.split("+")[0], "available": True,
        "threads": args.threads, "network": network, "compile_s": t1 - t0,
        "execution_s": t3 - t2, "per_example_s": (t3 - t2) / args.examples,
        "examples": args.examples, "batch_size": args.batch_size, "warmup": args.warmup,
        "weights": how,
    }
    if how == "random":
        result["note"] = (f"the ONNX file's weights do not map onto torch's {network}; ran "
                          "random weights, so no outputs are written")
    elif args.outputs:
        os.makedirs(args.outputs, exist_ok=True)
        out_name = f.graph_outputs[0] if f.graph_outputs else "output"
        path = os.path.join(args.outputs, safe_name(out_name) + ".npy")
        np.save(path, first.contiguous().numpy())
        result["outputs"] = {out_name: path}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UsageError as e:
        print(f"torch peer: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # a failure while running
        print(f"torch peer: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              file=sys.stderr)
        sys.exit(1)
