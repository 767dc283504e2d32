"""Two tensord builds on the same models, interleaved: is the new one as fast as the old?

usage: /usr/bin/python3 bench/ab.py OLD_TENSORD NEW_TENSORD [--set zoo|unseen] [--models a,b]
           [--rounds 3] [--examples N] [--warmup W] [--cache DIR] [--json]

For each model (the zoo's networks, or bench/model_set.py's unseen set exported by
bench/compare.py into its cache folder, batch 1), runs `tensord bench` of OLD and of NEW in turn,
OLD NEW NEW OLD OLD NEW ... (the order alternates), --rounds times each, and prints the median ms/example of each and the
ratio NEW / OLD, then the geometric mean of the ratios and the worst. Pairing the runs keeps the
ratio meaningful when the machine's speed drifts. Correctness is bench's own check (skipped
with --no-check on the zoo to keep rounds short: it is the same graph for both).
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys


def run(binary, args, timeout):
    out = subprocess.run([binary, "bench", *args, "--json", "--no-check"], capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{binary} bench {' '.join(args)}: exit {out.returncode}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout[out.stdout.index("{"):])["per_example_s"] * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--set", choices=("zoo", "unseen"), default="zoo")
    p.add_argument("--models", default="")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--examples", type=int, default=64)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--cache", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tensord-bench"))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    jobs = []  # (name, bench args)
    if a.set == "zoo":
        for m in (a.models.split(",") if a.models else ["mobilenet_v2", "resnet50"]):
            jobs.append((m, [m, "-n", str(a.examples), "--warmup", str(a.warmup)]))
    else:
        # bench/compare.py --set unseen keeps <cache>/unseen/<model>_b<batch>/model.onnx
        found = sorted(glob.glob(os.path.join(a.cache, "unseen", "*_b1", "model.onnx")))
        if not found:
            sys.exit(f"ab.py: no unseen models under {a.cache}/unseen: run "
                     "bench/compare.py --set unseen once to export them")
        wanted = set(a.models.split(",")) if a.models else None
        for f in found:
            name = os.path.basename(os.path.dirname(f))[:-3]
            if wanted and name not in wanted:
                continue
            jobs.append((name, ["-m", f, "-n", str(a.examples), "--warmup", str(a.warmup)]))

    rows = []
    for name, args in jobs:
        old, new = [], []
        try:
            for i in range(a.rounds):
                # ABBA: whichever runs second in a pair ran about 5% faster or slower in an
                # A/A check on a 2-vCPU VM; alternating the order cancels that.
                if i % 2 == 0:
                    old.append(run(a.old, args, a.timeout))
                    new.append(run(a.new, args, a.timeout))
                else:
                    new.append(run(a.new, args, a.timeout))
                    old.append(run(a.old, args, a.timeout))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            rows.append({"model": name, "error": str(e)})
            continue
        mo, mn = statistics.median(old), statistics.median(new)
        rows.append({"model": name, "old_ms": mo, "new_ms": mn, "ratio": mn / mo,
                     "old_runs": old, "new_runs": new})
        if not a.json:
            print(f"{name:32s} old {mo:9.3f} ms  new {mn:9.3f} ms  new/old {mn / mo:6.3f}",
                  flush=True)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    summary = {}
    if ratios:
        summary = {"geomean_new_over_old": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                   "worst_new_over_old": max(ratios), "best_new_over_old": min(ratios),
                   "models": len(ratios)}
    if a.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
    else:
        for r in rows:
            if "error" in r:
                print(f"{r['model']:32s} failed: {r['error']}")
        if summary:
            print(f"geometric mean new/old {summary['geomean_new_over_old']:.3f}, "
                  f"worst {summary['worst_new_over_old']:.3f}, best "
                  f"{summary['best_new_over_old']:.3f} over {summary['models']} models")


if __name__ == "__main__":
    main()
