import glob, json
def runs(paths):
    out = {}
    for p in paths:
        try:
            d = json.load(open(p))
        except Exception:
            continue
        for r in d['runs']:
            out[(r['model'], r['batch'])] = r['tensord']
    return out
cpu = runs(['/tmp/h-table-out/unseen_cpu_large.json'])
ocl = runs(['/tmp/h-table-out/unseen_opencl.json'] + sorted(glob.glob('/tmp/h-table-out/ocl_large/*.json')))
def cell(t):
    if not t:
        return "not run"
    if not t.get('available'):
        return "n/a (%s)" % t.get('reason')
    v = t.get('vs_torch_eager', {})
    dev = "" if t.get('device') in ('cpu:0', 'opencl:0') else " [%s]" % t.get('device')
    return "%s %.1e%s" % ("PASS" if v.get('pass') else "**FAIL**", v.get('max_error_of_scale', float('nan')), dev)
models = []
for (m, b) in cpu:
    if m not in models:
        models.append(m)
print("| model | batch | cpu:0 | opencl:0 |")
print("| --- | ---: | --- | --- |")
for m in models:
    for b in sorted(b for (mm, b) in cpu if mm == m):
        print("| %s | %d | %s | %s |" % (m, b, cell(cpu.get((m, b))), cell(ocl.get((m, b)))))
n = lambda d: sum(1 for t in d.values() if t.get('vs_torch_eager', {}).get('pass'))
print("\ncpu PASS %d/%d, opencl PASS %d/%d" % (n(cpu), len(cpu), n(ocl), len(ocl)))
