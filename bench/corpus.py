"""The corpus: every torchvision classification, segmentation and video model under 150 MB of
float32 weights, plus modules of our own for patterns torchvision lacks, each exported at the
opsets users meet (11, 13 and 17 by default), for judging tensord on "any model at any opset"
(issue 31). Built from the local (Debian) PyTorch and torchvision at run time, as
bench/model_set.py is; the exports are cached under a folder keyed by the torch version.

usage: /usr/bin/python3 bench/corpus.py list [--quick]
       /usr/bin/python3 bench/corpus.py export [--cache DIR] [--models a@o13,b@o11] [--quick]
       /usr/bin/python3 bench/corpus.py torch --name NAME@oN --batch-size B ...   (the PyTorch peer)

An entry is `NAME@oOPSET` (e.g. `mobilenet_v3_small@o11`); each has one input, one output and
one batch size (1 for most; the issue's own shapes for the rest). The folder layout is
model_set.py's (model.onnx, test_data_set_0/, input.npy, expected.npy, expected_fp32.npy), in
CACHE/corpus/torch-VERSION/NAME@oN_bB. The golden (PyTorch eager in float64, rounded to float32)
is computed once per model and shared by its opsets (CACHE/.../_golden/NAME_bB).

Own modules (what torchvision lacks): a dilated causal Conv1d stack (TCN), an encoder-decoder
transformer with cross-attention and source padding masks, a VAE decoder (ConvTranspose with
output_padding, LeakyReLU), scatter/gather message passing (Gather + ScatterElements add; at
opsets 16/17, since before 16 the exporter's scatter_add drops duplicate indices), an
EmbeddingBag classifier, GRU and LSTM over padded batches with sequence_lens
(pack_padded_sequence), and a BERT-style encoder with a padding mask and LayerNorm written
out as ReduceMean/Sub/Pow/Sqrt/Div (HuggingFace's old form) at opsets 11, 14 and 17; plus the
custom models of model_set.py. Two are exported without the exporter's constant folding, as
training-mode and hand-made exports come: a TCN with weight_norm (weights computed from g and
v in the graph) and ResNet-18 with float16 weights Cast to float (BatchNormalization kept).
ResNet-18 and MobileNetV2 are also there all in float16 (`_half`: input, weights and output;
the golden is float64 on the float16 values, so an output within float16's rounding of it
passes).
MobileNetV3 at opsets 11 and 13 exports HardSwish as
x * HardSigmoid(x).

`corpus-quick` (QUICK below) is the subset run in CI and by `bench/compare.py --set
corpus-quick`: small models that carry the forms the issue names (HardSigmoid*x, decomposed
LayerNorm, dilated Conv1d, ...), a few minutes on two cores.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OPSETS = (11, 13, 17)


def _model_set():
    sys.path.insert(0, HERE)
    try:
        import model_set as ms  # bench/model_set.py
    finally:
        sys.path.pop(0)
    return ms


ms = _model_set()


# ---- inputs ----

def _image(size=224):
    return lambda batch, rng: rng.standard_normal((batch, 3, size, size)).astype(np.float32)


def _video(frames=8, size=112):
    return lambda batch, rng: rng.standard_normal(
        (batch, 3, frames, size, size)).astype(np.float32)


def _float(*shape):
    return lambda batch, rng: rng.standard_normal((batch,) + shape).astype(np.float32)


def _padded_tokens(vocab, seq, min_len):
    """Token ids (B, seq) in 1..vocab-1, each row padded with 0 after a length in
    [min_len, seq] (the first row full, so the exported length is the padded one)."""
    def make(batch, rng):
        x = rng.integers(1, vocab, (batch, seq)).astype(np.int64)
        for i in range(1, batch):
            x[i, int(rng.integers(min_len, seq + 1)):] = 0
        return x
    return make


def _src_tgt_tokens(vocab, src, tgt):
    """(B, src + tgt) ids: a source padded with 0 at its end (row 0 full) and a target."""
    def make(batch, rng):
        x = _padded_tokens(vocab, src, src // 2)(batch, rng)
        return np.concatenate([x, rng.integers(1, vocab, (batch, tgt)).astype(np.int64)], 1)
    return make


# ---- torchvision ----

def _tv(name, **kw):
    def build(torch):
        import torchvision
        return getattr(torchvision.models, name)(**kw)
    return build


def _video_tv(name):
    def build(torch):
        import torchvision.models.video as v
        return getattr(v, name)()
    return build


# ---- own modules ----

def _tcn(torch):
    nn = torch.nn

    class CausalBlock(nn.Module):
        def __init__(self, c, d):
            super().__init__()
            self.pad = 2 * d
            self.c1 = nn.Conv1d(c, c, 3, dilation=d)
            self.c2 = nn.Conv1d(c, c, 3, dilation=d)

        def forward(self, x):
            y = torch.relu(self.c1(nn.functional.pad(x, (self.pad, 0))))
            y = torch.relu(self.c2(nn.functional.pad(y, (self.pad, 0))))
            return torch.relu(x + y)

    class Tcn(nn.Module):  # (B, 8 channels, 400 steps) -> (B, 8, 400), dilations 1..16
        def __init__(self, c=64):
            super().__init__()
            self.inp = nn.Conv1d(8, c, 1)
            self.blocks = nn.Sequential(*[CausalBlock(c, d) for d in (1, 2, 4, 8, 16)])
            self.out = nn.Conv1d(c, 8, 1)

        def forward(self, x):
            return self.out(self.blocks(self.inp(x)))
    return Tcn()


def _tcn_weightnorm(torch):
    """The TCN with weight normalisation on every convolution, as the TCN paper's code writes
    it (weight = g * v / ||v||): exported unfolded (Model.fold False), the weights are graph
    math on initializers (Div, Mul, ReduceL2 or Pow/ReduceSum/Sqrt)."""
    model = _tcn(torch)
    for m in list(model.modules()):
        if isinstance(m, torch.nn.Conv1d):
            torch.nn.utils.weight_norm(m)
    return model


def _fp16_weights(name):
    """A torchvision model whose Conv and Linear weights are stored as float16 and cast to the
    input's float type in forward (what weight-compressing converters write): exported
    unfolded, each weight is a Cast of a float16 initializer, BatchNormalization kept."""
    def build(torch):
        nn = torch.nn

        class AsInput(nn.Module):  # a float16 tensor cast to the dtype of `ref` (float32 or
            def __init__(self):   # float64 after model.double(): the golden's run)
                super().__init__()
                self.register_buffer("ref", torch.zeros(()))

            def forward(self, w):
                return w.to(self.ref.dtype)

        model = _tv(name)(torch)
        for m in list(model.modules()):
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                for p in ("weight", "bias"):
                    if getattr(m, p, None) is not None:
                        with torch.no_grad():
                            half = getattr(m, p).detach().half()
                        delattr(m, p)
                        m.register_parameter(p, nn.Parameter(half, requires_grad=False))
                        nn.utils.parametrize.register_parametrization(m, p, AsInput(),
                                                                      unsafe=True)
        return model
    return build


def _attention(torch, d, heads):
    nn = torch.nn

    class Attention(nn.Module):  # q from x, k/v from m; additive mask (B, 1, Tq|1, Tk)
        def __init__(self):
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

        def forward(self, x, m, mask):
            b, t, _ = x.shape
            s = m.shape[1]
            h = heads
            q = self.q(x).reshape(b, t, h, d // h).transpose(1, 2)
            k, v = self.kv(m).reshape(b, s, 2, h, d // h).permute(2, 0, 3, 1, 4)
            a = (q @ k.transpose(-2, -1)) / (d // h) ** 0.5 + mask
            return self.o((a.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
    return Attention()


def _encdec(torch):
    nn = torch.nn
    d, heads, src_len = 128, 4, 32

    class EncLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = _attention(torch, d, heads)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

        def forward(self, x, mask):
            x = self.n1(x + self.att(x, x, mask))
            return self.n2(x + self.ff(x))

    class DecLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_att, self.cross = _attention(torch, d, heads), _attention(torch, d, heads)
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

        def forward(self, y, mem, causal, mask):
            y = self.n1(y + self.self_att(y, y, causal))
            y = self.n2(y + self.cross(y, mem, mask))
            return self.n3(y + self.ff(y))

    class EncDec(nn.Module):  # (B, 32 source + 24 target ids) -> (B, 24, vocab) logits
        def __init__(self, vocab=2000, tgt_len=24):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(0.02 * torch.randn(1, src_len + tgt_len, d))
            self.enc = nn.ModuleList([EncLayer() for _ in range(2)])
            self.dec = nn.ModuleList([DecLayer() for _ in range(2)])
            self.head = nn.Linear(d, vocab)
            self.register_buffer("causal", torch.triu(
                torch.full((tgt_len, tgt_len), float("-inf")), 1)[None, None])

        def forward(self, x):
            src, tgt = x[:, :src_len], x[:, src_len:]
            pad = (src == 0)[:, None, None, :]  # (B, 1, 1, S): padded keys masked out
            mask = torch.zeros(pad.shape, dtype=torch.float32).masked_fill(pad, float("-inf"))
            m = self.emb(src) + self.pos[:, :src_len]
            for layer in self.enc:
                m = layer(m, mask)
            y = self.emb(tgt) + self.pos[:, src_len:]
            for layer in self.dec:
                y = layer(y, m, self.causal, mask)
            return self.head(y)
    return EncDec()


def _vae_decoder(torch):
    nn = torch.nn

    class VaeDecoder(nn.Module):  # latent (B, 64) -> (B, 3, 64, 64)
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 256 * 4 * 4)
            layers, prev = [], 256
            for ch in (128, 64, 32, 16):
                layers += [nn.ConvTranspose2d(prev, ch, 3, stride=2, padding=1, output_padding=1),
                           nn.BatchNorm2d(ch), nn.LeakyReLU(0.2)]
                prev = ch
            self.up = nn.Sequential(*layers)
            self.out = nn.Conv2d(prev, 3, 3, padding=1)

        def forward(self, z):
            return torch.sigmoid(self.out(self.up(self.fc(z).reshape(-1, 256, 4, 4))))
    return VaeDecoder()


def _message_passing(torch):
    nn = torch.nn
    nodes, edges, d = 256, 2048, 64

    class MessagePassing(nn.Module):  # node features (1, 256, 64) -> (1, 10) graph logits
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(3)
            self.register_buffer("src", torch.randint(0, nodes, (edges,), generator=g))
            self.register_buffer("dst", torch.randint(0, nodes, (edges,), generator=g))
            deg = torch.zeros(nodes).index_add_(0, self.dst, torch.ones(edges)).clamp(min=1)
            self.register_buffer("inv_deg", (1 / deg)[:, None])
            self.msg = nn.ModuleList([nn.Linear(d, d) for _ in range(3)])
            self.upd = nn.ModuleList([nn.Linear(d, d) for _ in range(3)])
            self.fc = nn.Linear(d, 10)

        def forward(self, x):
            h = x[0]
            for msg, upd in zip(self.msg, self.upd):
                m = msg(h).index_select(0, self.src)  # gather along edges
                agg = torch.zeros_like(h).scatter_add(
                    0, self.dst[:, None].expand(-1, d), m) * self.inv_deg
                h = torch.relu(upd(h) + agg)
            return self.fc(h.mean(0, keepdim=True))
    return MessagePassing()


def _embedding_bag(torch):
    nn = torch.nn

    class BagClassifier(nn.Module):  # (B, 64) ids -> 20 logits; bags of a fixed length
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(20000, 128, mode="mean")
            self.fc = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 20))

        def forward(self, x):
            return self.fc(self.bag(x))
    return BagClassifier()


def _rnn_lens(kind):
    def build(torch):
        nn = torch.nn

        class RnnLens(nn.Module):  # padded ids (B, 50) -> 5 logits from the last valid step
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(5000, 64, padding_idx=0)
                self.rnn = getattr(nn, kind)(64, 96, num_layers=2, batch_first=True)
                self.fc = nn.Linear(96, 5)

            def forward(self, x):
                lengths = (x != 0).sum(1)
                packed = nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths, batch_first=True,
                                                           enforce_sorted=False)
                _, h = self.rnn(packed)
                h = h[0] if kind == "LSTM" else h
                return self.fc(h[-1])
        return RnnLens()
    return build


def _bert_ln(torch):
    nn = torch.nn
    d, heads, seq = 256, 4, 128

    class LayerNorm(nn.Module):  # written out, as BERT code before opset 17 exports it
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
            self.bias = nn.Parameter(0.1 * torch.randn(d))

        def forward(self, x):
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return self.weight * ((x - u) / torch.sqrt(s + 1e-12)) + self.bias

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.att, self.n1, self.n2 = _attention(torch, d, heads), LayerNorm(), LayerNorm()
            self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, mask):
            x = self.n1(x + self.att(x, x, mask))
            return self.n2(x + self.ff2(nn.functional.gelu(self.ff1(x))))

    class Bert(nn.Module):  # padded ids (B, 128) -> 2 logits (pooled first token)
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8000, d)
            self.pos = nn.Parameter(0.02 * torch.randn(1, seq, d))
            self.norm = LayerNorm()
            self.layers = nn.ModuleList([Layer() for _ in range(4)])
            self.pool = nn.Linear(d, d)
            self.fc = nn.Linear(d, 2)

        def forward(self, x):
            keep = (x != 0).to(torch.float32)[:, None, None, :]
            mask = (1.0 - keep) * -10000.0
            h = self.norm(self.emb(x) + self.pos)
            for layer in self.layers:
                h = layer(h, mask)
            return self.fc(torch.tanh(self.pool(h[:, 0])))
    return Bert()


# ---- the corpus ----

class Model:
    """One model: builder(torch) -> module, make_input(batch, rng), its batch, the pattern it
    stands for, the opsets it is exported at, the calibration batch for BatchNorm."""

    def __init__(self, builder, make_input, what, batch=1, opsets=OPSETS, calib=4, fold=True,
                 half=False):
        self.builder, self.make_input, self.what = builder, make_input, what
        self.batch, self.opsets, self.calib = batch, opsets, calib
        self.fold = fold  # the exporter's do_constant_folding: False keeps weight math
        # half: the whole model in float16 (input, output, weights; _to_float16), as
        # float16 converters write it. Its parameters and input are rounded to float16 first,
        # so the golden (float64 on those values) is the float16 model's exact result.
        self.half = half
        if half:
            self.make_input = lambda b, rng: make_input(b, rng).astype(np.float16).astype(
                np.float32)


def _torchvision():
    img, m = _image(), {}
    # Classification: every torchvision 0.14 model whose float32 weights are under 150 MB
    # (alexnet 244 MB, the VGGs, ViT-B, ResNet-101/152, the wide and 101-layer ResNeXts,
    # RegNet 8-128 GF, ConvNeXt-S/B/L, EfficientNet-B6/B7/V2-M/L, Swin-S/B are over).
    for n, what in [
            ("resnet18", "basic residual blocks"), ("resnet34", "basic residual blocks"),
            ("resnet50", "bottleneck residual blocks"),
            ("resnext50_32x4d", "grouped 3x3 bottlenecks"),
            ("mobilenet_v2", "inverted residuals, ReLU6 (Clip)"),
            ("mobilenet_v3_small", "HardSwish/HardSigmoid, SE; x*HardSigmoid(x) before opset 14"),
            ("mobilenet_v3_large", "HardSwish/HardSigmoid, SE; x*HardSigmoid(x) before opset 14"),
            ("mnasnet0_5", "5x5 depthwise"), ("mnasnet0_75", "5x5 depthwise"),
            ("mnasnet1_0", "5x5 depthwise"), ("mnasnet1_3", "5x5 depthwise"),
            ("shufflenet_v2_x0_5", "channel shuffle"), ("shufflenet_v2_x1_0", "channel shuffle"),
            ("shufflenet_v2_x1_5", "channel shuffle"), ("shufflenet_v2_x2_0", "channel shuffle"),
            ("squeezenet1_0", "Fire modules"), ("squeezenet1_1", "Fire modules"),
            ("densenet121", "dense Concat"), ("densenet161", "dense Concat"),
            ("densenet169", "dense Concat"), ("densenet201", "dense Concat"),
            ("efficientnet_b0", "SiLU (x*Sigmoid(x)), SE"), ("efficientnet_b1", "SiLU, SE"),
            ("efficientnet_b2", "SiLU, SE"), ("efficientnet_b3", "SiLU, SE"),
            ("efficientnet_b4", "SiLU, SE"), ("efficientnet_b5", "SiLU, SE, 30M parameters"),
            ("efficientnet_v2_s", "fused MBConv, SiLU"),
            ("regnet_x_400mf", "grouped conv"), ("regnet_x_800mf", "grouped conv"),
            ("regnet_x_1_6gf", "grouped conv"), ("regnet_x_3_2gf", "grouped conv"),
            ("regnet_y_400mf", "grouped conv + SE"), ("regnet_y_800mf", "grouped conv + SE"),
            ("regnet_y_1_6gf", "grouped conv + SE"), ("regnet_y_3_2gf", "grouped conv + SE"),
            ("convnext_tiny", "7x7 depthwise, channels-last LayerNorm"),
            ("swin_t", "shifted windows (Roll), LayerNorm")]:
        m[n] = Model(_tv(n), img, what)
    # Swin-V2-T is left out: PyTorch 1.13 cannot export it (aten::zero) at any opset; MaxViT-T
    # needs Einsum (opset 12+).
    m["maxvit_t"] = Model(_tv("maxvit_t"), img, "MBConv + block/grid attention",
                          opsets=(13, 17))
    m["googlenet"] = Model(_tv("googlenet", aux_logits=False, init_weights=True), img,
                           "Inception branches + Concat")
    m["inception_v3"] = Model(_tv("inception_v3", aux_logits=False, init_weights=True),
                              _image(299), "Inception v3, 299x299, asymmetric kernels")
    # Segmentation (deeplabv3_resnet50 168 MB and the ResNet-101 ones are over).
    m["fcn_resnet50"] = Model(ms._seg("fcn_resnet50"), img, "dilated ResNet-50 FCN head")
    m["lraspp_mobilenet_v3"] = Model(ms._seg("lraspp_mobilenet_v3_large"), img,
                                     "LR-ASPP: SE gating, bilinear Resize")
    m["deeplabv3_mobilenet_v3"] = Model(ms._seg("deeplabv3_mobilenet_v3_large"), img,
                                        "ASPP (dilated convs), bilinear Resize")
    # Video (short clips; S3D and MViT need their own sizes).
    for n, what in [("r3d_18", "3-D convolutions"), ("mc3_18", "mixed 3-D/2-D convolutions"),
                    ("r2plus1d_18", "(2+1)-D factorised convolutions")]:
        m[n] = Model(_video_tv(n), _video(), what, calib=2)
    m["s3d"] = Model(_video_tv("s3d"), _video(16, 224), "separable 3-D Inception", calib=2)
    m["mvit_v1_b"] = Model(_video_tv("mvit_v1_b"), _video(16, 224),
                           "multiscale vision transformer (pooling attention)", calib=2)
    m["mvit_v2_s"] = Model(_video_tv("mvit_v2_s"), _video(16, 224),
                           "MViT v2: relative positions, residual pooling", calib=2)
    return m


def _own():
    m = {
        "tcn": Model(_tcn, _float(8, 400), "dilated causal Conv1d stack (1..16), residual adds",
                     batch=4),
        "tcn_weightnorm": Model(_tcn_weightnorm, _float(8, 400),
                                "the TCN with weight_norm, exported unfolded (weights as graph "
                                "math on initializers)", batch=4, fold=False),
        "resnet18_fp16w": Model(_fp16_weights("resnet18"), _image(),
                                "ResNet-18 with float16 weights Cast to float, exported unfolded "
                                "(BatchNormalization kept)", fold=False),
        "resnet18_half": Model(_tv("resnet18"), _image(), "ResNet-18 all in float16 (input, "
                               "weights, output)", fold=False, half=True),
        "mobilenet_v2_half": Model(_tv("mobilenet_v2"), _image(), "MobileNetV2 all in float16",
                                   fold=False, half=True),
        "encdec_transformer": Model(_encdec, _src_tgt_tokens(2000, 32, 24),
                                    "encoder-decoder: cross-attention, source padding mask",
                                    batch=2),
        "vae_decoder": Model(_vae_decoder, _float(64), "ConvTranspose output_padding, LeakyReLU",
                             batch=4),
        "message_passing": Model(_message_passing, _float(256, 64),
                                 "Gather + ScatterElements(add) message passing",
                                 opsets=(16, 17)),
        "embedding_bag": Model(_embedding_bag, lambda b, rng: rng.integers(
            0, 20000, (b, 64)).astype(np.int64), "EmbeddingBag (mean) + MLP", batch=8),
        "gru_seqlens": Model(_rnn_lens("GRU"), _padded_tokens(5000, 50, 10),
                             "2-layer GRU with sequence_lens (packed padded batch)", batch=4),
        "lstm_seqlens": Model(_rnn_lens("LSTM"), _padded_tokens(5000, 50, 10),
                              "2-layer LSTM with sequence_lens (packed padded batch)", batch=4),
        "bert_ln": Model(_bert_ln, _padded_tokens(8000, 128, 32),
                         "BERT-style encoder: padding mask, LayerNorm as ReduceMean/Sub/Pow/Sqrt",
                         batch=2, opsets=(11, 14, 17)),
    }
    # model_set.py's own modules (not its torchvision ones, listed above already).
    for n in ("unet", "gru_audio", "m5_audio", "lstm_classifier", "transformer_encoder",
              "causal_decoder", "mlp_mixer", "vit_tiny"):
        builder, make_input, _, what = ms.MODELS[n]
        m[n] = Model(builder, make_input, what)
    return m


MODELS = {**_torchvision(), **_own()}
# NAME@oN -> (the model's name, the opset)
CORPUS = {f"{n}@o{o}": (n, o) for n, mdl in MODELS.items() for o in mdl.opsets}
# Entries also checked in their QDQ form (quantize_qdq) by the quick gate.
QUICK_QDQ = ["mobilenet_v2@o13", "bert_ln@o17"]
# The quick subset (CI, `--set corpus-quick`): small models carrying the forms issue 31 names.
QUICK = ["mobilenet_v3_small@o11", "mobilenet_v3_small@o13", "mobilenet_v3_small@o17",
         "bert_ln@o14", "tcn@o17", "efficientnet_b0@o13", "squeezenet1_1@o11",
         "shufflenet_v2_x0_5@o13", "vae_decoder@o13", "message_passing@o16",
         "lstm_seqlens@o13", "encdec_transformer@o17", "tcn_weightnorm@o13",
         "resnet18_fp16w@o17", "mobilenet_v2_half@o13"]


def batch_of(key):
    return MODELS[CORPUS[key][0]].batch


def cache_root(cache):
    """CACHE/corpus/torch-VERSION: exports depend on the exporter's version."""
    import torch
    return os.path.join(cache, "corpus", "torch-" + torch.__version__.split("+")[0])


def build(torch, name):
    """The model, seeded, its BatchNorm statistics from a calibration batch, in eval mode."""
    mdl = MODELS[name]
    torch.manual_seed(0)
    model = mdl.builder(torch)
    g = torch.Generator().manual_seed(1)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        with torch.no_grad():
            for m in bns:
                m.weight.copy_(0.5 + torch.rand(m.num_features, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.num_features, generator=g))
                m.reset_running_stats()
                m.momentum = None
            model.train()
            model(torch.from_numpy(mdl.make_input(mdl.calib, np.random.default_rng(1234))))
    if mdl.half:  # every weight and statistic a float16 value (kept in float32 here)
        # BatchNormalization folded into the convolutions first (the exporter folds it in
        # float32 otherwise, and the float16 file's weights would not be the golden's).
        from torch.fx.experimental.optimization import fuse
        model = fuse(model.eval())
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                if t.is_floating_point():
                    t.copy_(t.half().float())
    return model.eval()


def _to_float16(path):
    """The ONNX file at path made a float16 model, as float16 converters write one: float
    initializers and Constant values, the graph's float inputs and outputs, and Casts to
    float become float16 (the values were float16 ones already: Model.half)."""
    import onnx
    from onnx import TensorProto, numpy_helper
    m = onnx.load(path)
    g = m.graph
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT:
            a = numpy_helper.to_array(init).astype(np.float16)
            g.initializer[i].CopyFrom(numpy_helper.from_array(a, init.name))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    del g.value_info[:]
    for n in g.node:
        for at in n.attribute:
            if n.op_type == "Constant" and at.name == "value" and at.t.data_type == TensorProto.FLOAT:
                at.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(at.t).astype(np.float16), at.t.name))
            if n.op_type == "Cast" and at.name == "to" and at.i == TensorProto.FLOAT:
                at.i = TensorProto.FLOAT16
    onnx.save(m, path)


def _golden(root, name, batch):
    """root/_golden/NAME_bB/{input,expected,expected_fp32}.npy, computed once per model."""
    folder = os.path.join(root, "_golden", f"{name}_b{batch}")
    files = [os.path.join(folder, f) for f in ("input.npy", "expected.npy", "expected_fp32.npy")]
    if not all(os.path.exists(f) for f in files):
        import torch
        model = build(torch, name)
        x = MODELS[name].make_input(batch, np.random.default_rng(batch))
        y, y32 = ms.eager_outputs(torch, model, x)
        if MODELS[name].half:  # the model's input is float16 (float16 values already)
            x = x.astype(np.float16)
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(dir=os.path.dirname(folder))
        for f, v in zip(files, (x, y, y32)):
            np.save(os.path.join(tmp, os.path.basename(f)), v)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    return [np.load(f) for f in files]


def export(root, key, batch=None):
    """root/KEY_bB/{model.onnx, input.npy, expected.npy, expected_fp32.npy,
    test_data_set_0/*.pb}; reused when already there.

    The export runs in a child process: PyTorch's exporter can take all the machine's memory
    (MViT-v2-S at opset 13 passed 20 GB) and the kernel's OOM killer then ended the whole
    benchmark with it. A failed export leaves KEY_bB.failed with the reason, and later runs
    skip the model at once (delete the file to try again)."""
    name, _ = CORPUS[key]
    batch = batch or MODELS[name].batch
    folder = os.path.join(root, f"{key}_b{batch}")
    done = [os.path.join(folder, p) for p in ("model.onnx", "input.npy", "expected.npy",
                                               "expected_fp32.npy", "test_data_set_0/output_0.pb")]
    if all(os.path.exists(p) for p in done):
        return folder
    marker = folder + ".failed"
    if os.path.exists(marker):
        with open(marker) as f:
            raise RuntimeError(f.read().strip() + f" (an earlier run; delete {marker} to retry)")
    os.makedirs(root, exist_ok=True)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "export-one", root, key,
                        str(batch)], capture_output=True, text=True)
    if p.returncode == 0 and all(os.path.exists(q) for q in done):
        return folder
    if p.returncode < 0:
        why = (f"the exporter was killed by signal {-p.returncode}"
               + (" (out of memory?)" if -p.returncode == 9 else ""))
    else:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        why = lines[-1][:400] if lines else f"the exporter exited with {p.returncode}"
    with open(marker, "w") as f:
        f.write(why + "\n")
    raise RuntimeError(why)


def quantize_qdq(src, dst, scale=0.05, zero_point=128):
    """dst/{model.onnx, test_data_set_0}: the model at src quantized as ONNX Runtime's quantizer
    writes a QDQ model: before and after every Conv, Gemm and MatMul with a constant weight a
    uint8 QuantizeLinear -> DequantizeLinear pair (per tensor), int8 weights (per output
    channel, symmetric) and int32 biases through DequantizeLinear. The activation scale is one
    fixed value, not calibrated: the file is for timing and for the reference-kernel gate, and
    its output is not compared with a float golden (quantization moves it by whole steps)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(os.path.join(src, "model.onnx"))
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    nodes, new_inits, n = [], [], [0]

    def name(base):
        n[0] += 1
        return f"{base}_qdq{n[0]}"

    def const(value, base):
        new_inits.append(numpy_helper.from_array(value, name(base)))
        return new_inits[-1].name

    def pair(x, out=None):
        s, z = const(np.array(scale, np.float32), "s"), const(np.array(zero_point, np.uint8), "z")
        q = name(x + "_q")
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q]))
        nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [out or name(x + "_dq")]))
        return nodes[-1].output[0]

    for node in g.node:
        if node.op_type not in ("Conv", "Gemm", "MatMul") or len(node.input) < 2 or \
                node.input[1] not in inits:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
        axis = 0 if node.op_type == "Conv" or trans_b else 1
        if w.ndim < 2:
            nodes.append(node)
            continue
        ws = np.maximum(np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis)),
                        1e-8) / 127
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.round(w / ws.reshape(shape)), -127, 127).astype(np.int8)
        wdq = name("w_dq")
        nodes.append(helper.make_node(
            "DequantizeLinear", [const(wq, "wq"), const(ws.astype(np.float32), "ws"),
                                 const(np.zeros(ws.shape, np.int8), "wz")], [wdq], axis=axis))
        inputs = [pair(node.input[0]), wdq]
        if len(node.input) > 2 and node.input[2] in inits and node.op_type == "Conv":
            bs = (scale * ws).astype(np.float32)
            b = numpy_helper.to_array(inits[node.input[2]])
            bdq = name("b_dq")
            nodes.append(helper.make_node(
                "DequantizeLinear", [const(np.round(b / bs).astype(np.int32), "bq"),
                                     const(bs, "bs"), const(np.zeros(bs.shape, np.int32), "bz")],
                [bdq], axis=0))
            inputs.append(bdq)
        elif len(node.input) > 2:
            inputs.append(node.input[2])
        raw = name(node.output[0] + "_float")
        q = helper.make_node(node.op_type, inputs, [raw], name=node.name)
        q.attribute.extend(node.attribute)
        nodes.append(q)
        pair(raw, node.output[0])
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(dst))
    try:
        onnx.save(m, os.path.join(tmp, "model.onnx"))
        shutil.copytree(os.path.join(src, "test_data_set_0"), os.path.join(tmp, "test_data_set_0"))
        shutil.copy(os.path.join(src, "input.npy"), os.path.join(tmp, "input.npy"))
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def export_qdq(root, key):
    """root/KEY_qdq_bB: the QDQ form (quantize_qdq) of a corpus entry, made once."""
    src = export(root, key)
    dst = src.replace(f"{key}_b", f"{key}_qdq_b")
    if not os.path.exists(os.path.join(dst, "model.onnx")):
        quantize_qdq(src, dst)
    return dst


def _export_here(root, key, batch):
    from onnx import numpy_helper
    name, opset = CORPUS[key]
    folder = os.path.join(root, f"{key}_b{batch}")
    import torch
    x, y, y32 = _golden(root, name, batch)
    model = build(torch, name)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=root)
    try:
        half = MODELS[name].half
        torch.onnx.export(model, torch.from_numpy(x.astype(np.float32) if half else x),
                          os.path.join(tmp, "model.onnx"),
                          opset_version=opset, input_names=["input"], output_names=["output"],
                          do_constant_folding=MODELS[name].fold)
        if half:
            _to_float16(os.path.join(tmp, "model.onnx"))
        os.makedirs(os.path.join(tmp, "test_data_set_0"))
        with open(os.path.join(tmp, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "input").SerializeToString())
        np.save(os.path.join(tmp, "input.npy"), x)
        ms.write_goldens(tmp, y, y32)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def default_cache():
    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                        "tensord-bench")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="the entries (NAME@oOPSET), their batch and pattern")
    ls.add_argument("--quick", action="store_true", help="only the quick subset")
    e = sub.add_parser("export", help="export entries into the cache")
    e.add_argument("--cache", default=default_cache(), help="(CACHE/corpus/torch-VERSION/...)")
    e.add_argument("--models", default="", help="comma list of NAME@oN or NAME (all its opsets)")
    e.add_argument("--quick", action="store_true", help="the quick subset")
    t = sub.add_parser("torch", help="the PyTorch peer for one entry (one JSON line)")
    t.add_argument("--name", required=True)
    t.add_argument("--batch-size", type=int, default=1)
    t.add_argument("--examples", type=int, default=64)
    t.add_argument("--warmup", type=int, default=8)
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--outputs", default="")
    t.add_argument("--model", default="", help="ignored (the peers' common arguments)")
    t.add_argument("--input", action="append", default=[], help="ignored (see --model)")
    if argv[:1] == ["export-one"]:  # export(): ROOT KEY BATCH, in a process of its own
        _export_here(argv[1], argv[2], int(argv[3]))
        return 0
    a = p.parse_args(argv)
    if a.cmd == "list":
        keys = QUICK if a.quick else list(CORPUS)
        for k in keys:
            mdl = MODELS[CORPUS[k][0]]
            print(f"{k:32} batch {mdl.batch}  {mdl.what}")
        print(f"{len({CORPUS[k][0] for k in keys})} models, {len(keys)} model-opset pairs",
              file=sys.stderr)
        return 0
    if a.cmd == "torch":
        if a.name not in CORPUS:
            p.error(f"unknown entry '{a.name}' (see `corpus.py list`)")
        name = CORPUS[a.name][0]
        return ms.torch_peer(a, build_fn=lambda torch: build(torch, name),
                             make_input=MODELS[name].make_input) or 0
    keys = []
    for n in ([k for k in a.models.split(",") if k] or (QUICK if a.quick else list(CORPUS))):
        if n in CORPUS:
            keys.append(n)
        elif n in MODELS:
            keys += [f"{n}@o{o}" for o in MODELS[n].opsets]
        else:
            p.error(f"unknown entry '{n}' (see `corpus.py list`)")
    root = cache_root(a.cache)
    failed = 0
    for k in keys:
        t0 = time.time()
        try:
            folder = export(root, k)
            print(f"{k}: {folder} ({time.time() - t0:.0f} s)", flush=True)
        except Exception as ex:  # one exporter failure does not stop the rest
            failed += 1
            print(f"{k}: export failed: {type(ex).__name__}: {str(ex)[:300]}", file=sys.stderr,
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
