// traincast web UI: plain JavaScript over /api/v1; plots with plotly.js served from the plotly Python package.
"use strict";

const $ = (sel, el) => (el || document).querySelector(sel);
const $$ = (sel, el) => Array.from((el || document).querySelectorAll(sel));

function dur(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "-";
  if (!Number.isFinite(s)) return "never";
  s = Math.max(s, 0);
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " us";
  if (s < 1) return (s * 1e3).toFixed(1) + " ms";
  if (s < 120) return s.toFixed(2) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 3 * 86400) { const m = Math.round(s / 60); return Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " m"; }
  return (s / 86400).toFixed(1) + " d";
}
const usd = (x) => (x === null || x === undefined) ? "-" : "$" + x.toLocaleString(undefined, {minimumFractionDigits: 2, maximumFractionDigits: 2});
const gib = (b) => (b / 1073741824).toFixed(2) + " GiB";
const esc = (t) => String(t).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

function setStatus(text, error) {
  const el = $("#status");
  if (!el) return;
  el.textContent = text;
  el.classList.toggle("error", !!error);
}

async function api(path, body) {
  const opts = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const r = await fetch("/api/v1" + path, opts);
  const data = await r.json().catch(() => ({detail: r.statusText}));
  if (!r.ok) {
    let msg = data.detail;
    if (Array.isArray(msg)) msg = msg.map((e) => (e.loc || []).filter((x) => x !== "body").join(".") + ": " + e.msg).join("; ");
    throw new Error(msg || ("HTTP " + r.status));
  }
  return data;
}

// the model part of a request: a zoo name, or the uploaded Hugging Face config
async function modelChoice(form) {
  const file = $("#hf_config", form).files[0];
  if (file) {
    let cfg;
    try { cfg = JSON.parse(await file.text()); } catch (e) { throw new Error(file.name + " is not JSON"); }
    return {hf_config: cfg};
  }
  return {model: $("#model", form).value};
}
const num = (form, name) => { const v = form.elements[name].value.trim(); return v === "" ? null : Number(v); };
const str = (form, name) => { const v = form.elements[name].value.trim(); return v === "" ? null : v; };
const checked = (form, name) => $$(`input[name=${name}]:checked`, form).map((e) => e.value);
const plotCfg = {responsive: true, displaylogo: false};

// ----------------------------------------------------------------------------------------------- plan
let lastPlan = null, lastPlanReq = null;

async function runPlan(ev) {
  ev.preventDefault();
  const form = ev.target, btn = $("#plan-go");
  try {
    const req = Object.assign(await modelChoice(form), {
      batch_size: num(form, "batch_size"), epochs: num(form, "epochs"), dataset_size: num(form, "dataset_size"),
      precision: str(form, "precision"), gpus: str(form, "gpus"), deadline: str(form, "deadline"), budget: num(form, "budget"),
    });
    const types = checked(form, "gpu_types");
    if (types.length) req.gpu_types = types;
    btn.disabled = true;
    setStatus("forecasting every configuration…");
    const t0 = performance.now();
    const res = await api("/plan", req);
    lastPlan = res; lastPlanReq = req;
    setStatus(res.configurations.length + " configurations in " + ((performance.now() - t0) / 1000).toFixed(1) + " s");
    showPlan(res);
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    btn.disabled = false;
  }
}

function showPlan(res) {
  $("#plan-result").hidden = false;
  // judged by the expected wall clock with failures, restarts and checkpoints (wall_s; null: never finishes)
  const wall = (c) => c.wall_s === null ? Infinity : c.wall_s;
  const cfgs = res.configurations.slice().sort((a, b) => wall(a) - wall(b));
  const pick = (c) => c ? `${c.gpus}x ${esc(c.device)} on ${esc(c.instance)}: ${dur(c.wall_s)}, ${usd(c.wall_cost_usd)}` : "none";
  $("#plan-summary").innerHTML =
    `<p><b>fastest</b> ${pick(res.fastest)}</p><p><b>cheapest</b> ${pick(res.cheapest)}</p>` +
    `<p><b>cheapest within deadline and budget</b> ${pick(res.cheapest_feasible)}</p>`;
  const group = (pred, name, color, symbol) => {
    const cs = cfgs.filter(pred).filter((c) => c.wall_cost_usd !== null);
    return {x: cs.map((c) => c.wall_s / 3600), y: cs.map((c) => c.wall_cost_usd), customdata: cs.map((c) => cfgs.indexOf(c)),
            text: cs.map((c) => `${c.gpus}x ${c.device}<br>${c.instance} x${c.instances}<br>${dur(c.wall_s)}, ${usd(c.wall_cost_usd)}${c.reason ? "<br>" + c.reason : ""}`),
            hoverinfo: "text", mode: "markers", type: "scatter", name, marker: {color, symbol, size: 9}};
  };
  const front = res.pareto_front.slice().sort((a, b) => wall(a) - wall(b));
  const traces = [
    group((c) => !c.feasible, "infeasible", "#b8bfcc", "x"),
    group((c) => c.feasible && !c.pareto, "feasible", "#7f9cf5", "circle"),
    group((c) => c.pareto, "Pareto front", "#d9480f", "diamond"),
    {x: front.map((c) => c.wall_s / 3600), y: front.map((c) => c.wall_cost_usd), mode: "lines", type: "scatter",
     name: "front", hoverinfo: "skip", line: {color: "#d9480f", width: 1.5, dash: "dot"}, showlegend: false},
  ];
  const layout = {margin: {l: 60, r: 10, t: 10, b: 50}, xaxis: {title: {text: "expected wall clock with failures (hours)"}, type: "log"},
                  yaxis: {title: {text: "cost (USD)"}, type: "log"}, legend: {orientation: "h", y: -0.2}, hovermode: "closest"};
  if (res.deadline_s) layout.shapes = [{type: "line", x0: res.deadline_s / 3600, x1: res.deadline_s / 3600, yref: "paper", y0: 0, y1: 1, line: {color: "#b42318", dash: "dash"}}];
  Plotly.newPlot("plan-plot", traces, layout, plotCfg);
  $("#plan-plot").on("plotly_click", (d) => { const i = d.points[0].customdata; if (i !== undefined) forecastOf(cfgs[i], i); });
  const head = "<tr><th>instance</th><th>GPU</th><th>GPUs</th><th>batch/GPU</th><th>iteration</th><th>training</th><th>wall clock (goodput)</th><th>cost</th><th>front</th><th>status</th></tr>";
  $("#plan-table").innerHTML = head + cfgs.map((c, i) =>
    `<tr class="clickable ${c.pareto ? "front" : ""} ${c.feasible ? "" : "infeasible"}" data-i="${i}"><td>${esc(c.instance)} x${c.instances}</td><td>${esc(c.device)}</td>` +
    `<td>${c.gpus}</td><td>${c.per_gpu_batch}</td><td>${dur(c.iteration_s)}</td><td>${dur(c.total_s)}</td>` +
    `<td>${c.wall_s === null ? "never" : dur(c.wall_s) + " (" + (100 * c.goodput).toFixed(0) + "%)"}</td><td>${usd(c.wall_cost_usd)}</td>` +
    `<td>${c.pareto ? "yes" : ""}</td><td class="${c.feasible ? "ok" : "bad"}">${esc(c.reason || "ok")}</td></tr>`).join("");
  $$("#plan-table tr.clickable").forEach((tr) => tr.addEventListener("click", () => forecastOf(cfgs[+tr.dataset.i], +tr.dataset.i)));
}

async function forecastOf(c, i) {
  $$("#plan-table tr.sel").forEach((tr) => tr.classList.remove("sel"));
  const tr = $(`#plan-table tr[data-i="${i}"]`);
  if (tr) tr.classList.add("sel");
  const q = lastPlanReq;
  const req = {instance: c.instance, gpus: c.gpus, batch_size: q.batch_size, epochs: q.epochs, dataset_size: q.dataset_size, precision: q.precision};
  if (q.hf_config) req.hf_config = q.hf_config; else req.model = q.model;
  setStatus("forecast of " + c.gpus + "x " + c.device + "…");
  try {
    const f = await api("/forecast", req);
    setStatus("");
    showForecast(f);
  } catch (e) { setStatus(e.message, true); }
}

function showForecast(f) {
  $("#forecast").hidden = false;
  $("#forecast-title").textContent = `${f.model} on ${f.gpus}x ${f.device}` + (f.instance ? ` (${f.instance})` : "") + `, ${f.precision}`;
  const parts = [["forward", f.forward_s], ["backward", f.backward_s], ["optimizer", f.optimizer_s],
                 ["communication (exposed)", f.communication_s], ["fixed per step", f.overhead_s]];
  Plotly.newPlot("forecast-plot", [{type: "bar", orientation: "h", y: parts.map((p) => p[0]), x: parts.map((p) => p[1] * 1e3),
    text: parts.map((p) => dur(p[1])), textposition: "auto", marker: {color: ["#2757c9", "#5b7fe0", "#9ab0ee", "#d9480f", "#b8bfcc"]}}],
    {margin: {l: 150, r: 10, t: 30, b: 40}, title: {text: "one iteration: " + dur(f.iteration_s), font: {size: 14}},
     xaxis: {title: {text: "ms"}}, yaxis: {autorange: "reversed"}}, plotCfg);
  const rows = [["batch (global / per GPU)", `${f.global_batch} / ${f.per_gpu_batch}`], ["iteration", dur(f.iteration_s)],
    ["steps per epoch", f.steps_per_epoch.toLocaleString()], ["epoch", dur(f.epoch_s)], [`total (${f.epochs} epochs)`, dur(f.total_s)],
    ["price", f.usd_per_hour === null ? "-" : usd(f.usd_per_hour) + "/h"], ["cost", usd(f.cost_usd)],
    ...(f.wall_clock ? [["wall clock with failures", f.wall_clock.wall_s === null ? "never finishes" :
      `${dur(f.wall_clock.wall_s)} (goodput ${(100 * f.wall_clock.goodput).toFixed(1)}%, ${f.wall_clock.interruptions.toFixed(1)} interruptions)`],
      ["cost with failures", usd(f.wall_clock.cost_usd)]] : []),
    ["model FLOP/s per GPU (MFU)", `${f.model_tflops_per_gpu.toFixed(1)} TFLOP/s` +
      (f.mfu === null ? "" : ` (${(100 * f.mfu).toFixed(1)}% of the ${f.model_peak_name} peak)`)],
    ["peak memory per GPU", `${gib(f.peak_memory_bytes)} of ${gib(f.memory_capacity_bytes)}` + (f.fits_in_memory ? "" : " OUT OF MEMORY")],
    ["bottleneck", f.bottleneck], ["predictor", f.predictor]];
  $("#forecast-table").innerHTML = rows.map((r) => `<tr><th>${esc(r[0])}</th><td>${esc(r[1])}</td></tr>`).join("") +
    (f.notes || []).map((n) => `<tr><td colspan="2" class="hint">note: ${esc(n)}</td></tr>`).join("");
}

// ----------------------------------------------------------------------------------------------- jobs
let selectedJob = null;

async function refreshJobs() {
  let jobs;
  try { jobs = await api("/jobs"); } catch (e) { $("#updated").textContent = "refresh failed: " + e.message; return; }
  $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  const head = "<tr><th>job</th><th>model</th><th>hardware</th><th>progress</th><th>step</th><th>remaining</th><th>band</th><th>cost so far</th><th>to go</th><th>loss</th><th>last record</th></tr>";
  if (!jobs.length) { $("#jobs-table").innerHTML = "<tr><td>no jobs yet: track(..., server=URL) or POST /api/v1/jobs/{job}/metrics</td></tr>"; return; }
  $("#jobs-table").innerHTML = head + jobs.map((j) => {
    const p = j.progress === null ? null : Math.min(1, Math.max(0, j.progress));
    return `<tr class="clickable ${j.name === selectedJob ? "sel" : ""}" data-job="${esc(j.name)}"><td>${esc(j.name)}</td><td>${esc(j.model || "-")}</td><td>${esc(j.hardware || "-")}</td>` +
      `<td>${p === null ? "-" : `<span class="bar"><i style="width:${(p * 100).toFixed(1)}%"></i></span> ${(p * 100).toFixed(1)}%`}</td>` +
      `<td>${j.last_step === null ? "-" : j.last_step.toLocaleString()}${j.total_steps ? " / " + j.total_steps.toLocaleString() : ""}</td>` +
      `<td class="remaining">${dur(j.remaining_s)}</td><td>${j.low_s === null ? "-" : dur(j.low_s) + " – " + dur(j.high_s)}</td>` +
      `<td>${usd(j.cost_so_far_usd)}</td><td>${usd(j.cost_to_go_usd)}</td><td>${j.last_loss === null ? "-" : j.last_loss.toPrecision(4)}</td>` +
      `<td>${new Date(j.updated_s * 1000).toLocaleTimeString()}</td></tr>`;
  }).join("");
  $$("#jobs-table tr.clickable").forEach((tr) => tr.addEventListener("click", () => { selectedJob = tr.dataset.job; refreshJobs(); }));
  if (!selectedJob && jobs.length) selectedJob = jobs[0].name;
  if (selectedJob) showCurve(selectedJob);
}

async function showCurve(job) {
  let c;
  try { c = await api("/jobs/" + encodeURIComponent(job) + "/curve"); } catch (e) { return; }
  $("#job-detail").hidden = false;
  $("#job-title").textContent = "loss of " + job;
  const traces = [{x: c.steps, y: c.loss, mode: "markers", type: "scatter", name: "training loss", marker: {size: 4, color: "#2757c9"}}];
  if (c.fit && c.fit.steps) traces.push({x: c.fit.steps, y: c.fit.loss, mode: "lines", type: "scatter", name: "fit (" + c.fit.form + ")", line: {color: "#d9480f"}});
  const layout = {margin: {l: 60, r: 10, t: 10, b: 50}, xaxis: {title: {text: "step"}}, yaxis: {title: {text: "loss"}, type: "log"},
                  legend: {orientation: "h", y: -0.2}, uirevision: job};
  if (c.total_steps) layout.shapes = [{type: "line", x0: c.total_steps, x1: c.total_steps, yref: "paper", y0: 0, y1: 1, line: {color: "#5b6475", dash: "dot"}}];
  Plotly.react("loss-plot", traces, layout, plotCfg);
}

// -------------------------------------------------------------------------------------------- compare
async function runCompare(ev) {
  ev.preventDefault();
  const form = ev.target, btn = $("#compare-go");
  try {
    const req = Object.assign(await modelChoice(form), {gpus: num(form, "gpus"), batch_size: num(form, "batch_size"),
      epochs: num(form, "epochs"), dataset_size: num(form, "dataset_size"), precision: str(form, "precision"),
      gpu_types: checked(form, "gpu_types")});
    if (!req.gpu_types.length) throw new Error("choose at least one GPU type");
    btn.disabled = true;
    setStatus("forecasting…");
    const res = await api("/compare", req);
    setStatus("");
    const ok = res.filter((r) => r.forecast);
    $("#compare-result").hidden = false;
    Plotly.newPlot("compare-plot", [
      // one offset group each: bars on two y axes side by side, not drawn over each other
      {type: "bar", name: "total time (h)", x: ok.map((r) => r.gpu), y: ok.map((r) => r.forecast.total_s / 3600), offsetgroup: "time", marker: {color: "#2757c9"}},
      {type: "bar", name: "cost (USD)", x: ok.map((r) => r.gpu), y: ok.map((r) => r.forecast.cost_usd), yaxis: "y2", offsetgroup: "cost", marker: {color: "#d9480f"}},
    ], {barmode: "group", margin: {l: 60, r: 60, t: 10, b: 90}, yaxis: {title: {text: "hours"}},
        yaxis2: {title: {text: "USD"}, overlaying: "y", side: "right"}, legend: {orientation: "h", y: 1.12}}, plotCfg);
    $("#compare-table").innerHTML = "<tr><th>GPU</th><th>iteration</th><th>total</th><th>cost</th><th>memory</th><th>bound</th></tr>" +
      res.map((r) => r.forecast ? `<tr><td>${esc(r.gpu)}</td><td>${dur(r.forecast.iteration_s)}</td><td>${dur(r.forecast.total_s)}</td><td>${usd(r.forecast.cost_usd)}</td>` +
        `<td class="${r.forecast.fits_in_memory ? "ok" : "bad"}">${gib(r.forecast.peak_memory_bytes)}</td><td>${esc(r.forecast.bottleneck)}</td></tr>`
        : `<tr><td>${esc(r.gpu)}</td><td colspan="5" class="bad">${esc(r.error)}</td></tr>`).join("");
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    btn.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "plan") $("#plan-form").addEventListener("submit", runPlan);
  if (page === "compare") $("#compare-form").addEventListener("submit", runCompare);
  if (page === "jobs") {
    refreshJobs();
    setInterval(refreshJobs, 1000 * Number(document.body.dataset.refreshS || 2));
  }
});
