// The status page served at GET / by `tensord serve --http`: one self-contained HTML page
// (its own CSS and JS, nothing loaded from elsewhere) that renders the status JSON embedded in
// it, then refreshes from /api/status every 2 s. Charts are drawn on canvases; each chart's
// element carries data-samples (the points drawn), devices are rows with data-device, for
// tests and scripts that read the DOM.
#include "rpc/http_server.h"

namespace tensord::rpc {

const char* const kStatusPageHtml = R"TENSORD_PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tensord status</title>
<style>
:root { --bg:#f6f7f9; --fg:#1d2330; --muted:#6a7385; --card:#fff; --line:#e2e5ea;
        --bar:#3b82f6; --bar2:#a5c4fb; --ok:#16a34a; --bad:#dc2626; --warn:#d97706; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#12151b; --fg:#e6e9ef; --muted:#8b93a5; --card:#1b2029; --line:#2b313d;
          --bar:#60a5fa; --bar2:#2c4a78; }
}
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
       background:var(--bg); color:var(--fg); }
header { display:flex; align-items:baseline; gap:16px; flex-wrap:wrap; padding:14px 20px;
         border-bottom:1px solid var(--line); background:var(--card); }
header h1 { font-size:18px; margin:0; }
header .meta { color:var(--muted); }
.pill { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; color:#fff; }
.pill.ok { background:var(--ok); } .pill.bad { background:var(--bad); }
main { padding:16px 20px; display:grid; gap:16px; grid-template-columns:repeat(auto-fit,minmax(420px,1fr)); }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px; min-width:0; overflow-x:auto; }
section.wide { grid-column:1/-1; }
h2 { font-size:13px; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); margin:0 0 8px; }
table { width:100%; border-collapse:collapse; font-variant-numeric:tabular-nums; }
th, td { text-align:left; padding:4px 6px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { color:var(--muted); font-weight:500; font-size:12px; }
td.num, th.num { text-align:right; }
td.msg { white-space:normal; word-break:break-word; }
td.wrap { white-space:normal; }
.state-ready { color:var(--ok); } .state-unavailable { color:var(--bad); }
.bar { position:relative; height:16px; min-width:140px; background:var(--line); border-radius:4px; overflow:hidden; }
.bar .reserved { position:absolute; inset:0 auto 0 0; background:var(--bar2); }
.bar .used { position:absolute; inset:0 auto 0 0; background:var(--bar); }
.bar span { position:absolute; right:6px; top:0; font-size:11px; line-height:16px; }
.chart { position:relative; }
.chart canvas { width:100%; height:170px; display:block; }
.legend { display:flex; gap:14px; flex-wrap:wrap; font-size:12px; color:var(--muted); margin-top:4px; }
.legend i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; vertical-align:-1px; }
.empty { color:var(--muted); font-style:italic; }
.kv { display:grid; grid-template-columns:repeat(auto-fit,minmax(130px,1fr)); gap:8px; }
.kv div { border:1px solid var(--line); border-radius:6px; padding:6px 8px; }
.kv b { display:block; font-size:18px; font-variant-numeric:tabular-nums; }
.kv small { color:var(--muted); }
#err { color:var(--bad); }
</style>
</head>
<body data-rendered="0">
<header>
  <h1>tensord</h1>
  <span id="state" class="pill bad">loading</span>
  <span class="meta" id="meta"></span>
  <span class="meta" id="err"></span>
</header>
<main>
  <section class="wide">
    <h2>Devices</h2>
    <table id="devices"><thead><tr>
      <th>Device</th><th>Kind</th><th>Model</th><th>Memory (used / reserved / total)</th>
      <th class="num">Tensors</th><th class="num">Graphs</th><th class="num">Ops</th>
      <th class="num">Queue</th><th class="num">Avg wait</th><th class="num">Busy</th><th class="num">CPU fallbacks</th>
    </tr></thead><tbody></tbody></table>
  </section>
  <section class="wide">
    <h2>Totals</h2>
    <div class="kv" id="totals"></div>
  </section>
  <section>
    <h2>Throughput</h2>
    <div class="chart" id="chart-throughput" data-samples="0"><canvas></canvas><div class="legend"></div></div>
  </section>
  <section>
    <h2>Latency (all calls but Attach)</h2>
    <div class="chart" id="chart-latency" data-samples="0"><canvas></canvas><div class="legend"></div></div>
  </section>
  <section>
    <h2>Data moved</h2>
    <div class="chart" id="chart-bytes" data-samples="0"><canvas></canvas><div class="legend"></div></div>
  </section>
  <section>
    <h2>Device busy</h2>
    <div class="chart" id="chart-busy" data-samples="0"><canvas></canvas><div class="legend"></div></div>
  </section>
  <section>
    <h2>Sessions <span id="session-count"></span></h2>
    <table id="sessions"><thead><tr>
      <th>Tenant</th><th class="num">Memory</th><th class="num">In flight</th><th class="num">Regions</th><th class="num">Region bytes</th>
      <th class="num">Age</th><th class="num">Idle</th>
    </tr></thead><tbody></tbody></table>
  </section>
  <section class="wide">
    <h2>Models <span id="model-count"></span></h2>
    <table id="models"><thead><tr>
      <th>Model</th><th>State</th><th>Device</th><th>Inputs</th><th>Outputs</th><th class="num">Weights</th>
    </tr></thead><tbody></tbody></table>
  </section>
  <section class="wide" id="methods-section">
    <h2>Calls by method</h2>
    <table id="methods"><thead><tr>
      <th>Method</th><th class="num">Calls</th><th class="num">Errors</th><th class="num">In flight</th>
      <th class="num">Mean</th><th class="num">p50</th><th class="num">p99</th>
    </tr></thead><tbody></tbody></table>
  </section>
  <section class="wide">
    <h2>Recent errors</h2>
    <table id="errors"><thead><tr><th>Time</th><th>Method</th><th>Code</th><th>Message</th></tr></thead><tbody></tbody></table>
  </section>
</main>
<script>
"use strict";
const INITIAL = /*TENSORD_INITIAL_STATUS*/null;
const COLORS = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#ec4899", "#14b8a6", "#64748b"];

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function bytes(n) {
  if (n == null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = Math.abs(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (n < 0 ? "-" : "") + (i ? v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) : v) + " " + u[i];
}
function num(n, d) {
  if (n == null) return "";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return d == null ? String(Math.round(n * 100) / 100) : n.toFixed(d);
}
function ms(v) { return v == null || v < 0 ? "" : v < 1 ? (v * 1000).toFixed(0) + " µs" : v < 1000 ? v.toFixed(v < 10 ? 2 : 1) + " ms" : (v / 1000).toFixed(2) + " s"; }
function dur(s) { return s < 60 ? s.toFixed(0) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h"; }
function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {class: "empty", colspan: cols}, empty))]));
}

// A line chart of `series` ([{name, values, color}]) over times `t` (ms), drawn on the canvas.
function chart(id, t, series, fmt, floor) {
  const box = document.getElementById(id);
  const canvas = box.querySelector("canvas");
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 400, h = canvas.clientHeight || 170;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const css = getComputedStyle(document.body);
  const muted = css.getPropertyValue("--muted").trim(), line = css.getPropertyValue("--line").trim();
  const L = 64, R = 8, T = 8, B = 20;
  let max = 0;
  for (const s of series) for (const v of s.values) if (v != null && isFinite(v)) max = Math.max(max, v);
  // Four ticks on a 1-2-2.5-5 step that covers the largest value (a floor keeps a near-idle
  // series from stretching noise over the whole height), labelled with as many decimals as
  // the step needs: never four labels that read the same.
  max = Math.max(max, floor || 0);
  if (!(max > 0)) max = floor || 1;
  const raw = max / 4, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((k) => k * mag).find((k) => k >= raw * 0.999);
  max = step * 4;
  const now = t.length ? t[t.length - 1] : Date.now();
  const span = Math.max(60000, t.length ? now - t[0] : 60000);
  const x = (ti) => L + (w - L - R) * (1 - (now - ti) / span);
  const y = (v) => T + (h - T - B) * (1 - v / max);
  g.font = "11px system-ui,sans-serif"; g.fillStyle = muted; g.strokeStyle = line; g.lineWidth = 1;
  const ticks = [];
  for (let i = 0; i <= 4; i++) {
    const v = step * i, yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(L, yy); g.lineTo(w - R, yy); g.stroke();
    g.textAlign = "right"; g.fillText(fmt(v, step), L - 6, yy + 4);
    ticks.push(fmt(v, step));
  }
  box.dataset.ticks = ticks.join("|");
  g.textAlign = "left"; g.fillText("-" + dur(span / 1000), L, h - 5);
  g.textAlign = "right"; g.fillText("now", w - R, h - 5);
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 1.6; g.beginPath();
    let pen = false;
    s.values.forEach((v, i) => {
      if (v == null || !isFinite(v)) { pen = false; return; }
      const px = x(t[i]), py = y(v);
      if (pen) g.lineTo(px, py); else g.moveTo(px, py);
      pen = true;
    });
    g.stroke();
  }
  box.dataset.samples = String(t.length);
  box.querySelector(".legend").replaceChildren(...series.map((s) => {
    const last = s.values.length ? s.values[s.values.length - 1] : null;
    return el("span", {}, el("i", {style: "background:" + s.color}), s.name + (last == null ? "" : " " + fmt(last)));
  }));
}

let last = null;
function render(st) {
  last = st;
  const state = document.getElementById("state");
  state.textContent = st.ready ? "ready" : "not ready";
  state.className = "pill " + (st.ready ? "ok" : "bad");
  state.title = st.ready_reason || "";
  document.getElementById("meta").textContent =
    "v" + st.version + " · gRPC " + st.address + " · up " + dur(st.uptime_s) + " · " +
    st.sessions.open + " session" + (st.sessions.open === 1 ? "" : "s");

  fill(document.querySelector("#devices tbody"), st.devices.map((d) => {
    const total = d.memory_total_bytes || 1;
    const used = Math.min(100, 100 * d.memory_used_bytes / total);
    const reserved = Math.min(100, 100 * d.memory_reserved_bytes / total);
    const bar = el("div", {class: "bar", title: bytes(d.memory_used_bytes) + " used, " + bytes(d.memory_reserved_bytes) + " reserved, peak " + bytes(d.memory_peak_bytes)},
      el("div", {class: "reserved", style: "width:" + reserved + "%"}),
      el("div", {class: "used", style: "width:" + used + "%"}),
      el("span", {}, bytes(d.memory_used_bytes) + " / " + bytes(d.memory_reserved_bytes) + " / " + bytes(d.memory_total_bytes)));
    const wait = d.queue_tasks ? d.queue_wait_s / d.queue_tasks * 1000 : null;
    const busy = st.samples.busy.length ? st.samples.busy[st.samples.busy.length - 1][st.devices.indexOf(d)] : null;
    return el("tr", {class: "device", "data-device": d.name},
      el("td", {}, el("b", {}, d.name)), el("td", {}, d.kind), el("td", {title: d.vendor + " · " + d.backend}, d.model),
      el("td", {}, bar), el("td", {class: "num"}, num(d.tensors)), el("td", {class: "num"}, num(d.graphs)),
      el("td", {class: "num"}, num(d.ops)), el("td", {class: "num"}, num(d.queue_depth)),
      el("td", {class: "num"}, ms(wait)), el("td", {class: "num"}, busy == null ? "" : (busy * 100).toFixed(0) + "%"),
      el("td", {class: "num"}, num(d.cpu_fallback_nodes)));
  }), "no devices", 11);

  const tt = st.totals, bm = tt.bytes_moved;
  const kv = [["calls", num(tt.rpcs)], ["call errors", num(tt.rpc_errors)], ["graphs", num(tt.graphs)],
              ["ops", num(tt.ops)], ["compiles", num(tt.compiles)], ["cache hits", num(tt.cache_hits)],
              ["executables cached", num(tt.executables_cached)], ["models loaded", num(tt.models_loaded)],
              ["host → device", bytes(bm.host_to_device)], ["device → host", bytes(bm.device_to_host)],
              ["peer + staged", bytes(bm.peer + bm.staged)],
              ["shared memory in / out", bytes(bm.shared_memory_in) + " / " + bytes(bm.shared_memory_out)]];
  document.getElementById("totals").replaceChildren(...kv.map(([k, v]) => el("div", {}, el("b", {}, v), el("small", {}, k))));

  const s = st.samples;
  chart("chart-throughput", s.t, [
    {name: "calls/s", values: s.rpc_per_s, color: COLORS[0]},
    {name: "graphs/s", values: s.graphs_per_s, color: COLORS[1]},
    {name: "errors/s", values: s.errors_per_s, color: COLORS[3]}], (v, step) => step != null && step < 1 ? String(+v.toFixed(2)) : num(v, v < 10 ? 1 : 0));
  chart("chart-latency", s.t, [
    {name: "p50", values: s.latency_p50_ms, color: COLORS[0]},
    {name: "p99", values: s.latency_p99_ms, color: COLORS[3]},
    {name: "mean", values: s.latency_mean_ms, color: COLORS[2]}], ms);
  chart("chart-bytes", s.t, [
    {name: "in (to devices)", values: s.bytes_in_per_s, color: COLORS[0]},
    {name: "out (to hosts)", values: s.bytes_out_per_s, color: COLORS[1]},
    {name: "between devices", values: s.bytes_between_per_s, color: COLORS[4]}], (v) => bytes(v) + "/s");
  chart("chart-busy", s.t, st.devices.map((d, i) => ({
    name: d.name + " busy", values: s.busy.map((row) => row[i] == null ? null : row[i] * 100), color: COLORS[i % COLORS.length]})),
    (v) => String(+v.toFixed(3)) + "%", 1);  // at least 0-1%: ticks 0, 0.25, 0.5, 0.75, 1%

  document.getElementById("session-count").textContent = "(" + st.sessions.open + ")";
  fill(document.querySelector("#sessions tbody"), st.sessions.list.map((x) => el("tr", {class: "session"},
    el("td", {}, x.tenant || "(no token)"), el("td", {class: "num"}, bytes(x.bytes)), el("td", {class: "num"}, x.in_flight),
    el("td", {class: "num"}, x.regions), el("td", {class: "num"}, bytes(x.region_bytes || 0)),
    el("td", {class: "num"}, dur(x.age_s)), el("td", {class: "num"}, dur(x.idle_s)))),
    "no sessions open", 7);
  fill(document.querySelector("#methods tbody"), st.methods.filter((m) => m.count || m.in_flight).map((m) => el("tr", {},
    el("td", {}, m.name), el("td", {class: "num"}, num(m.count)), el("td", {class: "num"}, num(m.errors)),
    el("td", {class: "num"}, m.in_flight), el("td", {class: "num"}, ms(m.mean_ms)),
    el("td", {class: "num"}, ms(m.p50_ms)), el("td", {class: "num"}, ms(m.p99_ms)))), "no calls yet", 7);
  const models = st.models || [];
  document.getElementById("model-count").textContent = "(" + models.length + ")";
  const values = (vs) => vs.map((v) => v.name + " " + v.dtype + "[" + v.shape.map((d) => d < 0 ? "?" : d).join(", ") + "]").join(", ");
  fill(document.querySelector("#models tbody"), models.map((m) => el("tr", {class: "model", "data-model": m.name, "data-state": m.state},
    el("td", {}, el("b", {}, m.name)), el("td", {class: "state-" + m.state, title: m.reason || ""}, m.state),
    el("td", {}, m.device || ""),
    ...(m.ready ? [el("td", {class: "wrap"}, values(m.inputs)), el("td", {class: "wrap"}, values(m.outputs)),
                   el("td", {class: "num"}, bytes(m.weight_bytes))]
                : [el("td", {class: "msg", colspan: 3}, m.reason || "")]))),
    "no named models (tensord serve --models DIR)", 6);
  fill(document.querySelector("#errors tbody"), st.recent_errors.slice().reverse().slice(0, 20).map((e) => el("tr", {},
    el("td", {}, new Date(e.unix_ms).toLocaleTimeString()), el("td", {}, e.method), el("td", {}, e.code),
    el("td", {class: "msg"}, e.message))), "no errors", 4);
  // Whether a section's content is wider than the section (scrolls): for tests of the layout.
  for (const sec of document.querySelectorAll("section"))
    sec.dataset.overflow = sec.scrollWidth > sec.clientWidth + 1 ? "1" : "0";
  document.body.dataset.rendered = String(Number(document.body.dataset.rendered) + 1);
}

// /api/status beside the page, without the credentials of a URL like http://tenant:TOKEN@host/
// (fetch() refuses a URL that carries them): they go in an Authorization header instead, and
// a browser that keeps them elsewhere sends its own (credentials: same-origin).
const API = (() => {
  const u = new URL(location.href);
  const auth = u.username || u.password
    ? "Basic " + btoa(decodeURIComponent(u.username) + ":" + decodeURIComponent(u.password)) : null;
  return {url: u.origin + u.pathname.replace(/[^/]*$/, "") + "api/status", auth};
})();
async function refresh() {
  try {
    const r = await fetch(API.url, {cache: "no-store", credentials: "same-origin",
                                    headers: API.auth ? {Authorization: API.auth} : {}});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    document.getElementById("err").textContent = "";
  } catch (e) {
    document.getElementById("err").textContent = "refresh failed: " + e.message;
    const state = document.getElementById("state");
    state.textContent = "unreachable"; state.className = "pill bad";
  }
}
if (INITIAL) render(INITIAL);
window.addEventListener("resize", () => { if (last) render(last); });
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)TENSORD_PAGE";

}  // namespace tensord::rpc
