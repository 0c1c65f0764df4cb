"""The HTML, CSS and script of ``whatif.html`` (filled in by :mod:`sim.sweep.whatif`).

The script reads ``DATA`` (see ``sim.sweep.whatif.page_data``) and redraws on every change:
no server, no network. Element ids (``view``, ``metric``, ``xkey``, ``color``,
``chart-main``, ``chart-knee``, ``points``) are what the browser tests drive.
"""

PAGE_TEMPLATE = r"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%%TITLE%%</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em 2em;max-width:1300px;color:#212529}
h1{font-size:1.5em;margin-bottom:.2em} .lead{color:#495057;margin-top:0}
.controls{display:flex;flex-wrap:wrap;gap:.6em 1.4em;align-items:center;margin:.6em 0}
.controls label{font-size:14px;font-weight:600} select{font-size:14px;margin-left:.3em;max-width:32em}
.fixed{background:#f1f3f5;padding:.5em .8em;border-radius:6px}
.fixed label{font-weight:normal} .fixed output{font-weight:600;margin-left:.3em}
.why{color:#1864ab;margin:.2em 0} .failed{color:#c92a2a;font-size:13px}
table{border-collapse:collapse;font-size:12px} td,th{padding:2px 8px;border-bottom:1px solid #e9ecef;text-align:left}
tr.err td{color:#c92a2a} tr.inview td{background:#fff9db}
</style>
%%PLOTLYJS%%
</head><body>
<h1>%%TITLE%%</h1>
<p class="lead" id="lead"></p>
<div class="controls">
  <label>View <select id="view"></select></label>
  <label>Metric <select id="metric"></select></label>
  <label>X axis <select id="xkey"></select></label>
  <label>Lines <select id="color"></select></label>
</div>
<p class="why" id="why"></p>
<div class="controls fixed" id="fixed"></div>
<div id="chart-main" class="chart"></div>
<p class="failed" id="failed"></p>
<div id="chart-knee" class="chart"></div>
<h2>All points</h2>
<p class="lead">Highlighted rows are the points drawn above. Failed points keep their error.</p>
<table id="points"></table>
<script>
const DATA = %%DATA%%;
const $ = (id) => document.getElementById(id);
const AXES = Object.fromEntries(DATA.axes.map((a) => [a.key, a]));
const LABEL = Object.fromEntries(DATA.metrics.map((m) => [m.key, m.label]));
LABEL[""] = "(no metric: every point failed)";
const THROUGHPUT = "throughput.requests_per_s";
const state = {x: DATA.axes[0].key, color: "", metric: DATA.metrics.length ? DATA.metrics[0].key : "", fixed: {}};
DATA.axes.forEach((a) => { state.fixed[a.key] = a.values[0]; });

function option(sel, value, text, disabled) {
  const o = document.createElement("option");
  o.value = value; o.textContent = text; o.disabled = !!disabled;
  sel.appendChild(o);
}

function describe(row) {
  return DATA.axes.map((a) => a.key + " = " + row.v[a.key]).join("<br>");
}

function numericValue(axis, label) {
  return axis.num[axis.values.indexOf(label)];
}

function fixedControls() {
  const box = $("fixed");
  box.innerHTML = "";
  const others = DATA.axes.filter((a) => a.key !== state.x && a.key !== state.color);
  box.style.display = others.length ? "flex" : "none";
  if (others.length) box.appendChild(document.createTextNode("Other parameters fixed at:"));
  others.forEach((a) => {
    const label = document.createElement("label");
    label.textContent = a.key;
    let input;
    if (a.numeric && a.values.length > 1) {
      input = document.createElement("input");
      input.type = "range"; input.min = 0; input.max = a.values.length - 1; input.step = 1;
      input.value = a.values.indexOf(state.fixed[a.key]);
      const out = document.createElement("output");
      out.textContent = state.fixed[a.key];
      input.oninput = () => { state.fixed[a.key] = a.values[+input.value]; out.textContent = state.fixed[a.key]; draw(); };
      label.appendChild(input); label.appendChild(out);
    } else {
      input = document.createElement("select");
      a.values.forEach((v) => option(input, v, v));
      input.value = state.fixed[a.key];
      input.onchange = () => { state.fixed[a.key] = input.value; draw(); };
      label.appendChild(input);
    }
    input.dataset.key = a.key;
    box.appendChild(label);
  });
}

function inView(row) {
  return DATA.axes.every((a) => a.key === state.x || a.key === state.color || row.v[a.key] === state.fixed[a.key]);
}

function groups(rows) {
  const colorAxis = AXES[state.color];
  const names = colorAxis ? colorAxis.values : [""];
  const xAxis = AXES[state.x];
  return names.map((name) => {
    const mine = rows.filter((r) => !colorAxis || r.v[state.color] === name);
    mine.sort((p, q) => xAxis.values.indexOf(p.v[state.x]) - xAxis.values.indexOf(q.v[state.x]));
    return {name: colorAxis ? state.color + " = " + name : LABEL[state.metric], rows: mine};
  });
}

function mainTraces(gs) {
  const xAxis = AXES[state.x];
  return gs.map((g) => {
    const ok = g.rows.filter((r) => r.m[state.metric] !== undefined);
    const x = ok.map((r) => (xAxis.numeric ? numericValue(xAxis, r.v[state.x]) : r.v[state.x]));
    const t = {name: g.name, x: x, y: ok.map((r) => r.m[state.metric]), text: ok.map(describe),
               hovertemplate: "%{y:.4g}<br>%{text}<extra></extra>"};
    return xAxis.numeric ? Object.assign(t, {type: "scatter", mode: "lines+markers"}) : Object.assign(t, {type: "bar"});
  });
}

function logAxis(axis) {
  const v = axis.num.filter((n) => n !== null);
  return axis.numeric && Math.min(...v) > 0 && Math.max(...v) / Math.min(...v) >= 16;
}

function drawKnee(gs) {
  const xAxis = AXES[state.x];
  const box = $("chart-knee");
  if (!xAxis.numeric || state.metric === THROUGHPUT || !LABEL[THROUGHPUT]) {
    Plotly.purge(box); box.style.display = "none"; return;
  }
  box.style.display = "block";
  const traces = gs.map((g) => {
    const ok = g.rows.filter((r) => r.m[state.metric] !== undefined && r.m[THROUGHPUT] !== undefined);
    return {name: g.name, type: "scatter", mode: "lines+markers+text", textposition: "top center",
            x: ok.map((r) => r.m[THROUGHPUT]), y: ok.map((r) => r.m[state.metric]),
            text: ok.map((r) => r.v[state.x]), customdata: ok.map(describe),
            hovertemplate: "%{y:.4g} at %{x:.3g} req/s<br>%{customdata}<extra></extra>"};
  });
  const slo = sloShapes(gs.flatMap((g) => g.rows), "y");
  Plotly.react(box, traces, {
    shapes: slo.shapes, annotations: slo.annotations,
    title: {text: "The same points against achieved throughput (labels: " + state.x + ")"},
    xaxis: {title: {text: LABEL[THROUGHPUT]}}, yaxis: {title: {text: LABEL[state.metric]}},
    height: 420, margin: {t: 50}}, {responsive: true});
}

function drawTable(rows) {
  const keys = DATA.axes.map((a) => a.key);
  const head = "<tr>" + keys.map((k) => "<th>" + k + "</th>").join("") + "<th>status</th><th>" +
    LABEL[state.metric] + "</th><th>error</th></tr>";
  const body = DATA.rows.map((r) => {
    const cls = (r.status !== "ok" ? "err " : "") + (inView(r) ? "inview" : "");
    const val = r.m[state.metric];
    return "<tr class='" + cls + "'>" + keys.map((k) => "<td>" + r.v[k] + "</td>").join("") +
      "<td>" + r.status + "</td><td>" + (val === undefined ? "" : (+val).toPrecision(4)) + "</td><td>" +
      (r.error || "").replace(/</g, "&lt;") + "</td></tr>";
  }).join("");
  $("points").innerHTML = head + body;
}

function sloShapes(rows, axis) {
  // The SLO as a dashed line on a TTFT or TPOT chart, when every point in view shares it.
  const key = state.metric.startsWith("ttft_s.") ? "slo.ttft_s" : state.metric.startsWith("tpot_s.") ? "slo.tpot_s" : null;
  if (!key) return {shapes: [], annotations: []};
  const vals = [...new Set(rows.map((r) => r.m[key]).filter((v) => v !== undefined))];
  if (vals.length !== 1) return {shapes: [], annotations: []};
  const y = vals[0];
  return {shapes: [{type: "line", xref: "paper", x0: 0, x1: 1, yref: axis, y0: y, y1: y,
                    line: {dash: "dash", color: "#e03131", width: 2}}],
          annotations: [{xref: "paper", x: 1, xanchor: "right", yref: axis, y: y, yanchor: "bottom",
                         text: "SLO " + key.slice(4) + " = " + y + " s", showarrow: false,
                         font: {color: "#e03131"}}]};
}

function draw() {
  $("metric").value = state.metric; $("xkey").value = state.x; $("color").value = state.color;
  fixedControls();
  const rows = DATA.rows.filter(inView);
  const gs = groups(rows);
  const xAxis = AXES[state.x];
  const slo = sloShapes(rows, "y");
  Plotly.react("chart-main", mainTraces(gs), {
    shapes: slo.shapes, annotations: slo.annotations,
    title: {text: LABEL[state.metric] + " against " + state.x},
    xaxis: {title: {text: state.x}, type: xAxis.numeric ? (logAxis(xAxis) ? "log" : "linear") : "category"},
    yaxis: {title: {text: LABEL[state.metric]}, rangemode: "tozero"},
    barmode: "group", height: 480, margin: {t: 50}, legend: {orientation: "h", y: -0.2}}, {responsive: true});
  const failed = rows.filter((r) => r.status !== "ok");
  $("failed").textContent = failed.length ? failed.length + " point(s) in this view failed and are not drawn: " +
    failed.map((r) => DATA.axes.map((a) => r.v[a.key]).join(", ") + ": " + r.error).join("; ") : "";
  drawKnee(gs);
  drawTable(rows);
}

function applyPreset(value) {
  const p = DATA.presets[+value];
  if (value === "" || !p || !p.x) { $("why").textContent = "Choose the metric, the x axis and the lines."; return; }
  state.x = p.x; state.color = p.color || "";
  if (LABEL[p.metric]) state.metric = p.metric;
  $("why").textContent = p.why;
  draw();
}

function setup() {
  const counts = {};
  DATA.rows.forEach((r) => { counts[r.status] = (counts[r.status] || 0) + 1; });
  $("lead").textContent = DATA.rows.length + " simulations of " + DATA.scenario + " (" +
    Object.entries(counts).map(([k, n]) => n + " " + k).join(", ") + "), varying " +
    DATA.axes.map((a) => a.key + " over " + a.values.join(", ")).join("; ") +
    ". Pick a view, or a metric, an x axis and a parameter drawn as lines; set the others with the controls.";
  option($("view"), "", "custom: choose below");
  DATA.presets.forEach((p, i) => option($("view"), String(i), p.x ? p.name : p.name + " (" + p.why + ")", !p.x));
  DATA.metrics.forEach((m) => option($("metric"), m.key, m.label));
  DATA.axes.forEach((a) => option($("xkey"), a.key, a.key));
  option($("color"), "", "(none: one line)");
  DATA.axes.forEach((a) => option($("color"), a.key, a.key));
  $("view").onchange = () => applyPreset($("view").value);
  $("metric").onchange = () => { state.metric = $("metric").value; draw(); };
  $("xkey").onchange = () => {
    state.x = $("xkey").value;
    if (state.color === state.x) state.color = "";
    $("view").value = ""; applyPreset(""); draw();
  };
  $("color").onchange = () => {
    state.color = $("color").value === state.x ? "" : $("color").value;
    $("view").value = ""; applyPreset(""); draw();
  };
  const first = DATA.presets.findIndex((p) => p.x);
  if (DATA.axes.length > 1) state.color = DATA.axes[1].key;
  if (first >= 0) { $("view").value = String(first); applyPreset(String(first)); } else { applyPreset(""); draw(); }
}
setup();
</script>
</body></html>
"""
