"""A public set of models nobody here tuned for: PyTorch models of many families exported to
ONNX, each with an input and PyTorch's output, for judging tensord next to its peers.

usage: /usr/bin/python3 bench/model_set.py list
       /usr/bin/python3 bench/model_set.py export [--cache DIR] [--models a,b] [--batches large|1|1,8]
       /usr/bin/python3 bench/model_set.py torch --name NAME --batch-size B [--examples N]
           [--warmup W] [--threads T] [--outputs DIR]      (the PyTorch peer, one JSON line)

Every model is built with seeded weights (torch.manual_seed(0)), its BatchNorm layers given the
statistics of a calibration batch (as a trained network's: folding BatchNorm changes the
weights), exported with torch.onnx.export at opset 17 (the newest the Debian PyTorch 1.13
exporter writes) and saved in the ONNX test layout:

    DIR/NAME_bB/model.onnx
    DIR/NAME_bB/test_data_set_0/input_0.pb, output_0.pb   (the input, the golden output)
    DIR/NAME_bB/input.npy, expected.npy                   (the same, for the peers)
    DIR/NAME_bB/expected_fp32.npy                         (PyTorch eager in float32)

The golden output is PyTorch eager in float64 (the same module and weights, model.double(), the
input cast to double), rounded once to float32: eager float32 differs from it by float32
rounding, which on elements near zero is beyond plaidbench's tolerance (atol 1e-6), so a
float32 golden fails an exact float32 runtime as often as PyTorch itself run again would.
The float32 eager output is kept beside it and compare.py reports against both.

Each model has one input and one output (token ids for the language models, images, audio
frames or waveforms for the others), batch 1 and a larger batch of its own (`large`). The set
covers: torchvision classification (ResNet-18, MobileNetV3, EfficientNet-B0, ShuffleNetV2,
SqueezeNet, DenseNet-121, RegNetY, MnasNet, GoogLeNet, ConvNeXt-T, AlexNet), segmentation heads
(LR-ASPP, DeepLabV3 on MobileNetV3), a U-Net, audio (Conv1d + bidirectional GRU; M5 on raw
waveforms), an Embedding + LSTM classifier, a transformer encoder, a causal decoder, an
MLP-Mixer and a small ViT.

`bench/compare.py --set unseen` runs all of them next to ONNX Runtime and PyTorch.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

OPSET = 17


# ---- the models ----

def _tv(name, **kw):
    def build(torch):
        import torchvision
        return getattr(torchvision.models, name)(**kw)
    return build


def _seg(name):
    def build(torch):
        import torchvision

        class Out(torch.nn.Module):  # the segmentation models return a dict
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        kw = {"weights_backbone": None} if name != "x" else {}
        return Out(getattr(torchvision.models.segmentation, name)(num_classes=21, **kw))
    return build


def _unet(torch):
    nn = torch.nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, c=(32, 64, 128, 256)):
            super().__init__()
            self.down = nn.ModuleList()
            prev = 3
            for ch in c:
                self.down.append(block(prev, ch))
                prev = ch
            self.pool = nn.MaxPool2d(2)
            self.mid = block(c[-1], c[-1] * 2)
            self.up = nn.ModuleList()
            self.dec = nn.ModuleList()
            prev = c[-1] * 2
            for ch in reversed(c):
                self.up.append(nn.ConvTranspose2d(prev, ch, 2, stride=2))
                self.dec.append(block(ch * 2, ch))
                prev = ch
            self.head = nn.Conv2d(prev, 2, 1)

        def forward(self, x):
            skips = []
            for d in self.down:
                x = d(x)
                skips.append(x)
                x = self.pool(x)
            x = self.mid(x)
            for up, dec, s in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), s], 1))
            return self.head(x)
    return UNet()


def _gru_audio(torch):
    nn = torch.nn

    class GruAudio(nn.Module):  # (B, 40 mel bins, 200 frames) -> 12 keyword logits
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv1d(40, 128, 5, padding=2), nn.BatchNorm1d(128), nn.ReLU(),
                nn.Conv1d(128, 128, 5, stride=2, padding=2), nn.BatchNorm1d(128), nn.ReLU())
            self.gru = nn.GRU(128, 128, num_layers=2, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(256, 12)

        def forward(self, x):
            h = self.conv(x).transpose(1, 2)
            y, _ = self.gru(h)
            return self.fc(y.mean(1))
    return GruAudio()


def _m5(torch):
    nn = torch.nn

    class M5(nn.Module):  # raw 16 kHz waveform, 1 s -> 35 classes
        def __init__(self, c=64):
            super().__init__()
            layers, prev = [], 1
            for i, (ch, k, s) in enumerate([(c, 80, 4), (c, 3, 1), (2 * c, 3, 1), (2 * c, 3, 1)]):
                layers += [nn.Conv1d(prev, ch, k, stride=s), nn.BatchNorm1d(ch), nn.ReLU(),
                           nn.MaxPool1d(4)]
                prev = ch
            self.f = nn.Sequential(*layers)
            self.fc = nn.Linear(prev, 35)

        def forward(self, x):
            return self.fc(self.f(x).mean(-1))
    return M5()


def _lstm_classifier(torch):
    nn = torch.nn

    class LstmClassifier(nn.Module):  # token ids (B, 100) -> 2 logits
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10000, 128)
            self.lstm = nn.LSTM(128, 128, num_layers=2, batch_first=True)
            self.fc = nn.Linear(128, 2)

        def forward(self, x):
            y, _ = self.lstm(self.emb(x))
            return self.fc(y[:, -1])
    return LstmClassifier()


class _Attention:
    @staticmethod
    def make(torch, d, heads, causal, seq):
        nn = torch.nn

        class Attention(nn.Module):  # written out as exporters of GPT-2/BERT-like code emit it
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(d, 3 * d)
                self.proj = nn.Linear(d, d)
                self.h = heads
                if causal:
                    self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

            def forward(self, x):
                b, t, _ = x.shape
                q, k, v = self.qkv(x).reshape(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
                a = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.h) ** 0.5)
                if causal:
                    a = a + self.mask[:t, :t]
                y = a.softmax(-1) @ v
                return self.proj(y.transpose(1, 2).reshape(b, t, d))
        return Attention()


def _block(torch, d, heads, ff, causal=False, seq=0, pre_norm=True):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = _Attention.make(torch, d, heads, causal, seq)
            self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

        def forward(self, x):
            if pre_norm:
                x = x + self.attn(self.n1(x))
                return x + self.mlp(self.n2(x))
            x = self.n1(x + self.attn(x))
            return self.n2(x + self.mlp(x))
    return Block()


def _encoder(torch):
    nn = torch.nn

    class Encoder(nn.Module):  # BERT-like, post-norm: token ids (B, 128) -> 4 logits
        def __init__(self, d=256, layers=4):
            super().__init__()
            self.emb = nn.Embedding(8000, d)
            self.pos = nn.Parameter(0.02 * torch.randn(1, 128, d))
            self.blocks = nn.Sequential(*[_block(torch, d, 4, 4 * d, pre_norm=False)
                                          for _ in range(layers)])
            self.fc = nn.Linear(d, 4)

        def forward(self, x):
            return self.fc(self.blocks(self.emb(x) + self.pos).mean(1))
    return Encoder()


def _decoder(torch):
    nn = torch.nn

    class Decoder(nn.Module):  # GPT-like, masked attention: token ids (B, 64) -> next-token logits
        def __init__(self, d=256, layers=4, vocab=4000, seq=64):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(0.02 * torch.randn(1, seq, d))
            self.blocks = nn.Sequential(*[_block(torch, d, 4, 4 * d, causal=True, seq=seq)
                                          for _ in range(layers)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, x):
            return self.head(self.norm(self.blocks(self.emb(x) + self.pos))[:, -1])
    return Decoder()


def _mixer(torch):
    nn = torch.nn

    class MixerBlock(nn.Module):
        def __init__(self, tokens, d):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
            self.ch = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.ch(self.n2(x))

    class Mixer(nn.Module):  # 224x224, 16x16 patches -> 1000 logits
        def __init__(self, d=256, depth=8):
            super().__init__()
            self.stem = nn.Conv2d(3, d, 16, stride=16)
            self.blocks = nn.Sequential(*[MixerBlock(196, d) for _ in range(depth)])
            self.norm = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 1000)

        def forward(self, x):
            x = self.stem(x).flatten(2).transpose(1, 2)
            return self.fc(self.norm(self.blocks(x)).mean(1))
    return Mixer()


def _vit(torch):
    nn = torch.nn

    class ViT(nn.Module):  # ViT-Tiny-like: 224x224, 16x16 patches, 6 blocks of width 192
        def __init__(self, d=192, depth=6):
            super().__init__()
            self.stem = nn.Conv2d(3, d, 16, stride=16)
            self.cls = nn.Parameter(0.02 * torch.randn(1, 1, d))
            self.pos = nn.Parameter(0.02 * torch.randn(1, 197, d))
            self.blocks = nn.Sequential(*[_block(torch, d, 3, 4 * d) for _ in range(depth)])
            self.norm = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 1000)

        def forward(self, x):
            x = self.stem(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.fc(self.norm(self.blocks(x))[:, 0])
    return ViT()


def _image(size=224):
    return lambda batch, rng: rng.standard_normal((batch, 3, size, size)).astype(np.float32)


def _tokens(vocab, seq):
    return lambda batch, rng: rng.integers(0, vocab, (batch, seq)).astype(np.int64)


# name -> (builder, input maker, the larger batch, the pattern it stands for)
MODELS = {
    "resnet18": (_tv("resnet18"), _image(), 8, "plain residual 3x3 convolutions"),
    "mobilenet_v3_small": (_tv("mobilenet_v3_small"), _image(), 8,
                           "depthwise conv + squeeze-excitation + HardSwish/HardSigmoid"),
    "efficientnet_b0": (_tv("efficientnet_b0"), _image(), 8, "depthwise conv + SE + SiLU"),
    "shufflenet_v2": (_tv("shufflenet_v2_x1_0"), _image(), 8,
                      "channel shuffle (Reshape/Transpose/Split/Concat)"),
    "squeezenet1_1": (_tv("squeezenet1_1"), _image(), 8, "Fire modules (1x1/3x3 expand + Concat)"),
    "densenet121": (_tv("densenet121"), _image(), 4, "BN+ReLU before conv, many Concats"),
    "regnet_y_400mf": (_tv("regnet_y_400mf"), _image(), 8, "grouped conv + squeeze-excitation"),
    "mnasnet0_5": (_tv("mnasnet0_5"), _image(), 8, "inverted residuals, 5x5 depthwise"),
    "googlenet": (_tv("googlenet", aux_logits=False, init_weights=True), _image(), 8,
                  "Inception: parallel branches + Concat, MaxPool"),
    "convnext_tiny": (_tv("convnext_tiny"), _image(), 4,
                      "7x7 depthwise, channels-last LayerNorm, GELU"),
    "alexnet": (_tv("alexnet"), _image(), 8, "large Linear layers, LRN-free AlexNet"),
    "lraspp_mobilenet_v3": (_seg("lraspp_mobilenet_v3_large"), _image(), 4,
                            "segmentation head: SE gating, bilinear Resize"),
    "deeplabv3_mobilenet_v3": (_seg("deeplabv3_mobilenet_v3_large"), _image(), 2,
                               "segmentation: ASPP (dilated convs), bilinear Resize"),
    "unet": (_unet, _image(128), 4, "U-Net: ConvTranspose, Concat skip connections, 128x128"),
    "gru_audio": (_gru_audio, lambda b, rng: rng.standard_normal((b, 40, 200)).astype(np.float32),
                  8, "Conv1d + bidirectional GRU"),
    "m5_audio": (_m5, lambda b, rng: rng.standard_normal((b, 1, 16000)).astype(np.float32), 8,
                 "1-D convolutions on raw audio, MaxPool1d"),
    "lstm_classifier": (_lstm_classifier, _tokens(10000, 100), 16, "Embedding + 2-layer LSTM"),
    "transformer_encoder": (_encoder, _tokens(8000, 128), 8,
                            "transformer encoder (MatMul, Softmax, post-LayerNorm, GELU)"),
    "causal_decoder": (_decoder, _tokens(4000, 64), 8,
                       "causal decoder (pre-LayerNorm, GELU, masked attention)"),
    "mlp_mixer": (_mixer, _image(), 8, "token-mixing MLP (Transpose + Linear + GELU + LayerNorm)"),
    "vit_tiny": (_vit, _image(), 8, "vision transformer: patch conv, class token, attention"),
}


def build(torch, name):
    """The model, seeded, its BatchNorm statistics from a calibration batch, in eval mode."""
    builder, make_input, _, _ = MODELS[name]
    torch.manual_seed(0)
    model = builder(torch)
    g = torch.Generator().manual_seed(1)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        with torch.no_grad():
            for m in bns:
                m.weight.copy_(0.5 + torch.rand(m.num_features, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.num_features, generator=g))
                m.reset_running_stats()
                m.momentum = None  # cumulative average: exactly the calibration batch's
            model.train()
            model(torch.from_numpy(make_input(8, np.random.default_rng(1234))))
    return model.eval()


def eager_outputs(torch, model, x):
    """PyTorch eager's output of model on x: (float64 run rounded to float32, float32 run).
    The float64 run is of a copy (model.double(), a floating input cast to double)."""
    import copy
    with torch.no_grad():
        y32 = model(torch.from_numpy(x)).numpy()
        x64 = torch.from_numpy(x)
        x64 = x64.double() if x64.is_floating_point() else x64
        y64 = copy.deepcopy(model).double()(x64).numpy()
    return y64.astype(y32.dtype), y32


def write_goldens(folder, y, y32):
    """folder/{test_data_set_0/output_0.pb, expected.npy} = y (the golden), expected_fp32.npy =
    y32 (eager float32)."""
    from onnx import numpy_helper
    with open(os.path.join(folder, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "output").SerializeToString())
    np.save(os.path.join(folder, "expected.npy"), y)
    np.save(os.path.join(folder, "expected_fp32.npy"), y32)


def export(cache, name, batch):
    """cache/NAME_bB/{model.onnx, input.npy, expected.npy, expected_fp32.npy,
    test_data_set_0/*.pb}; reused when already there (a folder from before the float64 golden
    gets its goldens recomputed, the ONNX file kept)."""
    from onnx import numpy_helper
    folder = os.path.join(cache, f"{name}_b{batch}")
    exported = [os.path.join(folder, p) for p in
                ("model.onnx", "input.npy", "test_data_set_0/input_0.pb")]
    if all(os.path.exists(p) for p in exported) and \
            os.path.exists(os.path.join(folder, "expected_fp32.npy")):
        return folder
    import torch
    model = build(torch, name)
    x = MODELS[name][1](batch, np.random.default_rng(batch))
    y, y32 = eager_outputs(torch, model, x)
    if all(os.path.exists(p) for p in exported):
        write_goldens(folder, y, y32)
        return folder
    os.makedirs(cache, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=cache)
    try:
        torch.onnx.export(model, torch.from_numpy(x), os.path.join(tmp, "model.onnx"),
                          opset_version=OPSET, input_names=["input"], output_names=["output"],
                          do_constant_folding=True)
        os.makedirs(os.path.join(tmp, "test_data_set_0"))
        with open(os.path.join(tmp, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "input").SerializeToString())
        np.save(os.path.join(tmp, "input.npy"), x)
        write_goldens(tmp, y, y32)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def batches_of(name, spec):
    """'large' (default): 1 and the model's larger batch; else a comma list."""
    if spec in ("", "large"):
        return [1, MODELS[name][2]]
    return [int(b) for b in spec.split(",") if b.strip()]


# ---- the PyTorch peer for the set ----

def torch_peer(a, build_fn=None, make_input=None):
    """PyTorch on the set's own module (the same seeded weights as the exported file): traced,
    frozen and optimize_for_inference'd like bench/peers/torch.py, eager where tracing fails;
    one JSON line as that peer prints. build_fn(torch) and make_input(batch, rng) default to
    this set's model a.name (bench/corpus.py passes its own)."""
    import torch
    torch.set_num_threads(a.threads or (os.cpu_count() or 1))
    t0 = time.perf_counter()
    model = build_fn(torch) if build_fn else build(torch, a.name)
    make_input = make_input or MODELS[a.name][1]
    x = torch.from_numpy(make_input(a.batch_size, np.random.default_rng(a.batch_size)))
    mode = "jit"
    try:
        with torch.no_grad():
            fn = torch.jit.optimize_for_inference(
                torch.jit.freeze(torch.jit.trace(model, (x,), check_trace=False)))
        with torch.inference_mode():
            first = fn(x)
            for _ in range(2):
                fn(x)
    except RuntimeError:
        mode, fn = "eager", model
        with torch.inference_mode():
            first = fn(x)
    t1 = time.perf_counter()
    with torch.inference_mode():
        for _ in range(a.warmup // a.batch_size):
            fn(x)
        t2 = time.perf_counter()
        for _ in range(a.examples // a.batch_size):
            fn(x)
        t3 = time.perf_counter()
    out = {"peer": "torch", "version": torch.__version__.split("+")[0], "available": True,
           "threads": torch.get_num_threads(), "network": a.name, "mode": mode,
           "compile_s": t1 - t0, "execution_s": t3 - t2, "per_example_s": (t3 - t2) / a.examples,
           "examples": a.examples, "batch_size": a.batch_size, "warmup": a.warmup,
           "weights": "the set's seeded module"}
    if a.outputs:
        os.makedirs(a.outputs, exist_ok=True)
        path = os.path.join(a.outputs, "output.npy")
        np.save(path, first.contiguous().numpy())
        out["outputs"] = {"output": path}
    print(json.dumps(out), flush=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the models, their larger batch and what each stands for")
    e = sub.add_parser("export", help="export the models (kept in the cache)")
    e.add_argument("--cache", default=os.path.join(os.environ.get(
        "XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tensord-bench", "unseen"))
    e.add_argument("--models", default="", help="comma list (default: all)")
    e.add_argument("--batches", default="large", help="'large' (1 and the model's own), or a list")
    t = sub.add_parser("torch", help="the PyTorch peer for one model (one JSON line)")
    t.add_argument("--name", required=True)
    t.add_argument("--batch-size", type=int, default=1)
    t.add_argument("--examples", type=int, default=64)
    t.add_argument("--warmup", type=int, default=8)
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--outputs", default="")
    t.add_argument("--model", default="", help="ignored (the peers' common arguments)")
    t.add_argument("--input", action="append", default=[], help="ignored (see --model)")
    a = p.parse_args(argv)
    if a.cmd == "list":
        for name, (_, _, big, what) in MODELS.items():
            print(f"{name:24} batch 1, {big:2}  {what}")
        return 0
    if a.cmd == "torch":
        if a.name not in MODELS:
            p.error(f"unknown model '{a.name}' (see `model_set.py list`)")
        torch_peer(a)
        return 0
    names = [n for n in a.models.split(",") if n] or list(MODELS)
    for n in names:
        if n not in MODELS:
            p.error(f"unknown model '{n}' (see `model_set.py list`)")
    failed = 0
    for n in names:
        for b in batches_of(n, a.batches):
            t0 = time.time()
            try:
                folder = export(a.cache, n, b)
                print(f"{n} batch {b}: {folder} ({time.time() - t0:.0f} s)", flush=True)
            except Exception as ex:  # one model's exporter failure does not stop the rest
                failed += 1
                print(f"{n} batch {b}: export failed: {type(ex).__name__}: {ex}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
