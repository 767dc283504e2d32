"""No reference kernels on a hot path (issue 31): for every model of bench/corpus.py's quick
subset, `tensord bench --profile` must show no oneDNN primitive in a `ref` implementation in
any region, no region convolution on oneDNN's gemm kernel, and no reference kernel (a cpu kernel named "reference", summed over the nodes of
one op) above 5% of the model's step time. The outputs must also PASS against PyTorch's
float64 golden (except the QDQ forms of corpus.QUICK_QDQ: int8 quantization moves the output
by whole steps, so only their profile is checked).

usage: test_corpus_reference.py [--sanitized] TENSORD [ENTRY...]     (default: corpus.QUICK)
--sanitized (a sanitizer build): the reference kernels' shares are printed but do not fail, as
instrumented loops and memcpy are several times slower there while oneDNN's JIT code is not
(a 2% memcpy Split measured 7.6% under ASan); correctness and ref primitives still fail.
The exports are cached in $TENSORD_CORPUS_CACHE (default ~/.cache/tensord-bench) under
corpus/torch-VERSION. Exit 77 (skip) without PyTorch/torchvision/onnx.
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench")
MAX_REFERENCE_SHARE = 0.05

try:
    import torch  # noqa: F401
    import torchvision  # noqa: F401
    import onnx  # noqa: F401
except ImportError as e:
    print(f"SKIP: PyTorch/torchvision/onnx not installed ({e})")
    sys.exit(77)

sys.path.insert(0, BENCH)
import corpus  # noqa: E402  (bench/corpus.py)


def check(tensord, key, sanitized=False, qdq=False):
    """The problems of one entry (empty: it passes) and its profile summary. qdq: the entry's
    QDQ form (corpus.quantize_qdq), whose output is not compared with the float golden."""
    cache = os.environ.get("TENSORD_CORPUS_CACHE", corpus.default_cache())
    root = corpus.cache_root(cache)
    folder = corpus.export_qdq(root, key) if qdq else corpus.export(root, key)
    batch = corpus.batch_of(key)
    cmd = [tensord, "bench", "--model", os.path.join(folder, "model.onnx"), "--data",
           os.path.join(folder, "test_data_set_0"), "--batch-size", str(batch), "--examples",
           str(4 * batch), "--warmup", str(batch), "--json", "--profile"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"tensord bench failed (exit {p.returncode}): {p.stderr.strip()[-500:]}"], ""
    problems = []
    if not qdq and not (doc.get("correctness") or {}).get("pass"):
        problems.append(f"outputs FAIL against the golden: {doc.get('correctness')}")
    prof = doc.get("profile")
    if not prof:
        return problems + ["no profile in `tensord bench --profile --json`"], ""
    for r in prof["onednn_ref_primitives"]:
        problems.append(f"oneDNN ref implementation: {r}")
    # A region's convolutions on oneDNN's gemm kernel (im2col), which it picks where its direct
    # kernels lack a form (AVX2: a dilation above 2): the TCN's ran at 2-4x their direct speed.
    # The plan's description counts them ("N conv on oneDNN's gemm kernel").
    for row in prof["steps"]:
        m = re.search(r"(\d+) conv on oneDNN's gemm kernel", row["step"])
        if m:
            problems.append(f"{m.group(1)} convolution(s) on oneDNN's gemm kernel in "
                            f"{row['step'][:80]}... (the region: {100 * row['share']:.1f}% "
                            "of the time)")
    for row in prof["steps"]:
        if row["kind"] == "reference" and row["share"] > MAX_REFERENCE_SHARE:
            if sanitized:
                print(f"     (sanitizer build, not failed) reference kernel {row['step']}: "
                      f"{100 * row['share']:.1f}%")
                continue
            problems.append(f"reference kernel {row['step']}: {100 * row['share']:.1f}% of the "
                            f"time ({row['calls']} calls)")
    summary = (f"reference kernels {100 * prof['reference_share']:.1f}%, regions with oneDNN "
               f"ref primitives {100 * prof['onednn_ref_share']:.1f}%, "
               f"{1e3 * doc['per_example_s']:.2f} ms/example")
    return problems, summary


def main(argv):
    sanitized = "--sanitized" in argv
    argv = [a for a in argv if a != "--sanitized"]
    if len(argv) < 2:
        print(__doc__)
        return 2
    # The whole quick subset (12 small models, the forms issue 31 names; a minute or two on
    # two cores once exported).
    tensord, keys = argv[1], argv[2:] or corpus.QUICK
    jobs = [(k, False) for k in keys] + ([(k, True) for k in corpus.QUICK_QDQ]
                                          if not argv[2:] else [])
    failed = 0
    for key, qdq in jobs:
        problems, summary = check(tensord, key, sanitized, qdq)
        label = key + (" (QDQ form)" if qdq else "")
        print(f"{'FAIL' if problems else 'ok  '} {label}: {summary}", flush=True)
        for pr in problems:
            print(f"     {pr}")
        failed += bool(problems)
    print(f"{failed} of {len(jobs)} models with reference kernels on a hot path")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
