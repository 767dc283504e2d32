#!/usr/bin/env python3
"""PyTorch's side of scripts/gpu-check.sh, on the same GPU: ms per example of MobileNetV2 and
ResNet-50 (torchvision, random weights: no download) in eager fp32 at the given batch sizes, and
the GB/s PyTorch's own copies reach (host->device from pinned and pageable memory, device->host,
device->device). Prints one JSON object. Never downloads anything.

    gpu_check_torch.py [--batches 1,64] [--seconds 10] [--device cuda:0]
"""
import argparse
import json
import sys
import time


def bench_net(torch, make, batch, device, budget_s):
    model = make().eval().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    with torch.inference_mode():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        # Calibrate: about budget_s seconds of timed runs, at least 5.
        t0 = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t0, 1e-5)
        n = max(5, min(200, int(budget_s / one)))
        t0 = time.perf_counter()
        for _ in range(n):
            model(x)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return {"batch": batch, "runs": n, "ms_per_example": dt / n / batch * 1e3}


def bandwidth(torch, device, nbytes=256 << 20, reps=10):
    out = {}
    n = nbytes // 4
    pinned = torch.empty(n, dtype=torch.float32).pin_memory()
    pageable = torch.empty(n, dtype=torch.float32)
    dev = torch.empty(n, dtype=torch.float32, device=device)
    dev2 = torch.empty(n, dtype=torch.float32, device=device)

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        return nbytes * reps / (time.perf_counter() - t0) / 1e9

    out["h2d_pinned_gbs"] = timed(lambda: dev.copy_(pinned, non_blocking=True))
    out["h2d_pageable_gbs"] = timed(lambda: dev.copy_(pageable))
    out["d2h_pinned_gbs"] = timed(lambda: pinned.copy_(dev, non_blocking=True))
    out["d2h_pageable_gbs"] = timed(lambda: pageable.copy_(dev))
    out["d2d_gbs"] = timed(lambda: dev2.copy_(dev))
    if torch.cuda.device_count() > 1:
        other = torch.empty(n, dtype=torch.float32, device="cuda:1")
        out["peer_gbs"] = timed(lambda: other.copy_(dev))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per net and batch")
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    res = {"available": False}
    try:
        import torch
    except ImportError as e:
        res["reason"] = f"no PyTorch: {e}"
        print(json.dumps(res))
        return 0
    res["torch"] = torch.__version__
    res["cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        res["reason"] = "torch.cuda.is_available() is False"
        print(json.dumps(res))
        return 0
    res["available"] = True
    res["gpu"] = torch.cuda.get_device_name(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    res["copies"] = bandwidth(torch, a.device)
    try:
        import torchvision
        nets = {"mobilenet_v2": lambda: torchvision.models.mobilenet_v2(weights=None),
                "resnet50": lambda: torchvision.models.resnet50(weights=None)}
        res["torchvision"] = torchvision.__version__
    except ImportError as e:
        nets = {}
        res["nets_reason"] = f"no torchvision: {e}"
    res["nets"] = {}
    for name, make in nets.items():
        res["nets"][name] = [bench_net(torch, make, int(b), a.device, a.seconds / 2)
                             for b in a.batches.split(",")]
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
