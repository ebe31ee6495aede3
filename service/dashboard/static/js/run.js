// The run page: convergence charts, live progress over server-sent events, the winning
// schedule's timeline, parameter importance, the trials table, the kernel source, cancel.
// Invalid points (rejected before measuring; older runs stored them as trials) are left
// out of the charts and the table until asked for.
import {
  chartFailed, el, estimateMark, fmtDuration, fmtLatency, fmtParams, getJSON, loadSource, plot,
  statusColour,
} from "./common.js";
import { loadTimeline } from "./timeline.js";

const page = document.getElementById("run-page");
const runId = Number(page.dataset.runId);
const api = `/v1/runs/${runId}`;
const $ = (id) => document.getElementById(id);
const INVALID = "invalid";
const simulated = page.dataset.simulated === "true";
// A range run finds one kernel per bucket (its table is linked) and no winning schedule.
const rangeRun = page.dataset.kind === "range";
const estimateNote = page.dataset.estimateNote;
// A run stops at whichever budget runs out first; a budget of seconds alone has no trials
// budget to show (the server's cap is no plan of the user's).
const budgetTrials = Number(page.dataset.budgetTrials) || null;
const budgetSeconds = Number(page.dataset.budgetSeconds) || null;
const latencyAxis = simulated ? "estimated latency (µs, cost model)" : "latency (µs)";

const state = {
  status: page.dataset.status,
  startedAt: null,
  trials: { number: [], t_s: [], latency_us: [], status: [] },
  best: { number: [], t_s: [], latency_us: [] },
  bestValue: Infinity,
  bestHash: null,
  bestShown: null,
  sourceHash: null,
  lastNumber: -1,
  measured: 0,
  trialsDone: 0,
  statuses: new Set(),
  invalidStored: 0,
  showInvalid: false,
};
const LEGEND_TOP = { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" };
const active = () => state.status === "queued" || state.status === "running";

// ----- convergence ------------------------------------------------------------------------------
/** The trials for the charts (drawn by drawConvergence, once plotly.js is there). */
async function loadConvergence() {
  let data;
  try {
    data = await getJSON(`${api}/convergence`);
  } catch (error) {
    for (const id of ["chart-trials", "chart-time"]) chartFailed($(id), `Could not load the trials: ${error.message}`);
    return false;
  }
  state.trials = data.trials;
  state.best = data.best;
  state.measured = data.measured;
  state.bestValue = data.best.latency_us.length ? Math.min(...data.best.latency_us) : Infinity;
  state.lastNumber = data.count ? data.trials.number[data.trials.number.length - 1] : -1;
  Object.keys(data.statuses).forEach((s) => state.statuses.add(s));
  showInvalidCount(data.statuses[INVALID] || 0);
  $("convergence-note").textContent = data.downsampled
    ? `${data.count} trials; the charts show ${data.trials.number.length} of them (every improvement kept).`
    : "";
  refreshStatusFilter();
  return true;
}

function withFinalStep(best, x, lastX) {
  // The best-so-far line runs on to the latest trial (or second), not just to the last improvement.
  const xs = [...best[x]];
  const ys = [...best.latency_us];
  if (ys.length && lastX > xs[xs.length - 1]) {
    xs.push(lastX);
    ys.push(ys[ys.length - 1]);
  }
  return [xs, ys];
}

async function drawConvergence() {
  const t = state.trials;
  const byStatus = new Map();
  t.number.forEach((n, i) => {
    const s = t.status[i];
    if (s === INVALID && !state.showInvalid) return;
    if (!byStatus.has(s)) byStatus.set(s, { x: [], y: [], strip: [] });
    if (t.latency_us[i] !== null) byStatus.get(s).x.push(n), byStatus.get(s).y.push(t.latency_us[i]);
    else byStatus.get(s).strip.push(n);
  });
  const traces = [];
  for (const [status, points] of byStatus) {
    const colour = statusColour(status);
    if (points.x.length) {
      traces.push({ type: "scatter", mode: "markers", name: status, x: points.x, y: points.y,
        marker: { color: colour, size: 6, opacity: 0.75 }, legendgroup: status,
        hovertemplate: `trial %{x}<br>${status} %{y:.3f} µs${simulated ? " (estimate)" : ""}<extra></extra>` });
    }
    if (points.strip.length) {
      traces.push({ type: "scatter", mode: "markers", name: status, x: points.strip,
        y: points.strip.map(() => status), yaxis: "y2", legendgroup: status, showlegend: !points.x.length,
        marker: { color: colour, size: 5, symbol: "line-ns-open" },
        hovertemplate: `trial %{x}: ${status}<extra></extra>` });
    }
  }
  const lastNumber = t.number.length ? t.number[t.number.length - 1] : 0;
  const [bx, by] = withFinalStep(state.best, "number", lastNumber);
  traces.push({ type: "scatter", mode: "lines", name: "best so far", x: bx, y: by,
    line: { color: "#111", width: 2, shape: "hv" }, hovertemplate: "best after trial %{x}: %{y:.3f} µs<extra></extra>" });
  const hasStrip = [...byStatus.values()].some((p) => p.strip.length);
  await plot($("chart-trials"), traces, {
    xaxis: { title: { text: "trial" }, anchor: hasStrip ? "y2" : "y", zeroline: false },
    yaxis: { title: { text: latencyAxis }, type: "log", domain: hasStrip ? [0.3, 1] : [0, 1] },
    yaxis2: { domain: [0, 0.2], type: "category", visible: hasStrip, title: { text: "no latency", font: { size: 10 } } },
    legend: LEGEND_TOP,
    height: 380,
  });

  const measured = t.number.map((_, i) => i).filter((i) => t.latency_us[i] !== null);
  const lastT = t.t_s.length ? Math.max(...t.t_s) : 0;
  const [tx, ty] = withFinalStep(state.best, "t_s", lastT);
  await plot($("chart-time"), [
    { type: "scatter", mode: "markers", name: "measured", x: measured.map((i) => t.t_s[i]),
      y: measured.map((i) => t.latency_us[i]), marker: { color: "#9ab", size: 5, opacity: 0.6 },
      hovertemplate: "%{x:.1f} s: %{y:.3f} µs<extra></extra>" },
    { type: "scatter", mode: "lines", name: "best so far", x: tx, y: ty,
      line: { color: "#111", width: 2, shape: "hv" }, hovertemplate: "%{x:.1f} s: best %{y:.3f} µs<extra></extra>" },
  ], {
    xaxis: { title: { text: "seconds since the run started" }, zeroline: false },
    yaxis: { title: { text: latencyAxis }, type: "log" },
    legend: LEGEND_TOP,
    height: 380,
  });
}

let redrawTimer = null;
function scheduleRedraw() {
  if (redrawTimer) return;
  redrawTimer = setTimeout(() => { redrawTimer = null; drawConvergence(); }, 400);
}

function secondsSinceStart(createdAt) {
  if (!state.startedAt || !createdAt) return 0;
  return Math.max(0, (Date.parse(createdAt) - state.startedAt) / 1000);
}

function addTrial(trial) {
  if (trial.number <= state.lastNumber) return;
  state.lastNumber = trial.number;
  const t = state.trials;
  const seconds = secondsSinceStart(trial.created_at);
  t.number.push(trial.number);
  t.t_s.push(seconds);
  t.latency_us.push(trial.latency_us);
  t.status.push(trial.status);
  if (!state.statuses.has(trial.status)) { state.statuses.add(trial.status); refreshStatusFilter(); }
  if (trial.status === INVALID) showInvalidCount(state.invalidStored + 1);
  if (trial.latency_us !== null) {
    state.measured += 1;
    if (trial.latency_us < state.bestValue) {
      state.bestValue = trial.latency_us;
      state.best.number.push(trial.number);
      state.best.t_s.push(seconds);
      state.best.latency_us.push(trial.latency_us);
    }
  }
  scheduleRedraw();
  scheduleTrialsRefresh();
}

// ----- progress and status ----------------------------------------------------------------------
function elapsedSeconds() {
  return state.startedAt ? (Date.now() - state.startedAt) / 1000 : 0;
}

/** The bar: the larger of the trials and the time fractions (whichever budget binds). */
function showBar(elapsed) {
  if (state.status === "succeeded") return;
  const fractions = [];
  if (budgetTrials) fractions.push(state.trialsDone / budgetTrials);
  if (budgetSeconds) {
    fractions.push(elapsed / budgetSeconds);
    $("elapsed").textContent = fmtDuration(elapsed);
  }
  $("progress-bar").style.width = `${Math.min(100, 100 * Math.max(0, ...fractions))}%`;
}

function showProgress(p) {
  state.trialsDone = p.trials_done;
  $("trials-done").textContent = p.trials_done;
  $("invalid-count").textContent = p.invalid;
  $("run-phase").textContent = p.phase;
  if (!rangeRun) $("best-latency").textContent = fmtLatency(p.best_latency_us);
  showBar(elapsedSeconds());
}

function showRun(run) {
  state.status = run.status;
  state.trialsDone = run.trials_done;
  page.dataset.status = run.status;
  if (run.started_at) state.startedAt = Date.parse(run.started_at);
  const badge = $("run-status");
  badge.textContent = run.status;
  badge.className = `badge status-${run.status}`;
  $("cancel-button").hidden = !active();
  if (!rangeRun) $("best-latency").textContent = fmtLatency(run.best ? run.best.latency_us : null);
  $("run-phase").textContent = run.phase;
  if (run.status === "succeeded") $("progress-bar").style.width = "100%";
  if (run.stop_reason) $("run-end").textContent = `stopped: ${run.stop_reason}`;
  if (run.error) { $("run-error").textContent = run.error; $("run-error").hidden = false; }
  if (!active() && run.started_at) {
    const end = run.finished_at ? Date.parse(run.finished_at) : Date.now();
    $("run-duration").textContent = fmtDuration((end - state.startedAt) / 1000);
    showBar((end - state.startedAt) / 1000);
  }
  const hash = run.best ? run.best.schedule_hash : null;
  if (hash && hash !== state.bestHash) {
    state.bestHash = hash;
    state.bestShown = run.best.latency_us;
    scheduleScheduleRefresh();
  }
}

setInterval(() => {
  if (!active() || !state.startedAt) return;
  $("run-duration").textContent = fmtDuration(elapsedSeconds());
  if (budgetSeconds) showBar(elapsedSeconds());
}, 1000);

// ----- the winning schedule: timeline and kernel source ---------------------------------------
let scheduleTimer = null;
let lastScheduleLoad = 0;
function scheduleScheduleRefresh() {
  // At most one reload every 3 s while a run keeps improving.
  if (scheduleTimer) return;
  const wait = Math.max(0, 3000 - (Date.now() - lastScheduleLoad));
  scheduleTimer = setTimeout(async () => {
    scheduleTimer = null;
    lastScheduleLoad = Date.now();
    await loadSchedule();
  }, wait);
}

async function loadSchedule() {
  if (rangeRun) return;
  const empty = $("timeline-empty");
  const data = await loadTimeline(`${api}/timeline`, $("timeline"), $("timeline-summary"), empty);
  if (!data) return;
  $("schedule-hash").textContent = data.schedule_hash.slice(0, 16);
  if (data.schedule_hash !== state.sourceHash) {
    state.sourceHash = data.schedule_hash;
    await loadSource(`${api}/source`);
  }
}

// ----- parameter importance -----------------------------------------------------------------------
let importanceAt = -1;
async function loadImportance(force = false) {
  if (!force && state.measured === importanceAt) return;
  importanceAt = state.measured;
  const data = await getJSON(`${api}/importance`).catch(() => null);
  const empty = $("importance-empty");
  const node = $("importance");
  if (!data || !data.available) {
    node.querySelector(":scope > .chart-placeholder")?.remove();
    node.hidden = true;
    empty.hidden = false;
    empty.textContent = data ? `Not yet: ${data.reason}.` : "Importance is unavailable.";
    return;
  }
  node.hidden = false;
  empty.hidden = true;
  $("importance-note").textContent =
    `Which search choices explain the latency: ${data.method} over ${data.complete_trials} measured trials.`;
  const items = [...data.data].reverse();
  await plot(node, [{ type: "bar", orientation: "h", x: items.map((d) => d.importance),
    y: items.map((d) => d.param), marker: { color: "#4f7cac" },
    hovertemplate: "%{y}: %{x:.3f}<extra></extra>" }], {
    xaxis: { title: { text: "importance (sums to 1)" }, range: [0, Math.max(...items.map((d) => d.importance)) * 1.05] },
    yaxis: { automargin: true },
    height: 90 + 22 * items.length,
    margin: { l: 150, r: 20, t: 10, b: 44 },
  });
}

// ----- invalid points ---------------------------------------------------------------------------
function showInvalidCount(count) {
  state.invalidStored = count;
  for (const node of document.querySelectorAll(".invalid-stored")) node.textContent = count;
  for (const node of document.querySelectorAll(".invalid-toggle")) node.hidden = count === 0;
}

for (const box of document.querySelectorAll(".show-invalid")) {
  box.addEventListener("change", () => {
    state.showInvalid = box.checked;
    for (const other of document.querySelectorAll(".show-invalid")) other.checked = box.checked;
    if (!state.showInvalid && table.status === INVALID) table.status = "";
    refreshStatusFilter();
    table.offset = 0;
    drawConvergence();
    loadTrials();
  });
}

// ----- trials table -----------------------------------------------------------------------------
const table = { order: "number", status: "", offset: 0, limit: 50 };

function refreshStatusFilter() {
  const select = $("trials-status");
  const wanted = [...state.statuses].filter((s) => state.showInvalid || s !== INVALID).sort();
  select.replaceChildren(el("option", { value: "" }, "all"),
    ...wanted.map((status) => el("option", { value: status }, status)));
  select.value = table.status;
}

function latencyCell(trial) {
  const td = el("td", { class: "num" }, fmtLatency(trial.latency_us));
  if (trial.simulated && trial.latency_us !== null) td.append(estimateMark(estimateNote));
  return td;
}

async function loadTrials() {
  const query = new URLSearchParams({ order: table.order, limit: table.limit, offset: table.offset,
    invalid: state.showInvalid ? "show" : "hide" });
  if (table.status) query.set("status", table.status);
  let data;
  try {
    data = await getJSON(`/runs/${runId}/trials?${query}`);
  } catch (error) {
    chartFailed($("trials-table").querySelector("tbody td") || $("trials-table"), `Could not load the trials: ${error.message}`);
    return;
  }
  const body = $("trials-table").querySelector("tbody");
  body.replaceChildren(...data.data.map((t) => {
    const row = el("tr", { "data-number": t.number });
    row.append(
      el("td", {}, String(t.number)),
      (() => { const td = el("td"); td.append(el("span", { class: `badge status-${t.status}` }, t.status)); return td; })(),
      el("td", { class: "small" }, t.source),
      latencyCell(t),
      el("td", { class: "num small" }, fmtLatency(t.predicted_us)),
      el("td", { class: "params" }, fmtParams(t.params)),
      el("td", { class: "error-cell", title: t.error || "" }, t.error ? (t.error.length > 90 ? `${t.error.slice(0, 90)}…` : t.error) : ""),
    );
    return row;
  }));
  const hidden = !state.showInvalid && !table.status && state.invalidStored
    ? ` (${state.invalidStored} invalid hidden)` : "";
  $("trials-count").textContent = `${data.count} trial(s)${table.status ? ` with status ${table.status}` : ""}${hidden}`;
  const pager = $("trials-pager");
  pager.replaceChildren(el("span", {}, data.count ? `${table.offset + 1}–${Math.min(data.count, table.offset + table.limit)} of ${data.count}` : "no trials yet"));
  if (table.offset > 0) {
    const prev = el("button", { type: "button" }, "← previous");
    prev.onclick = () => { table.offset = Math.max(0, table.offset - table.limit); loadTrials(); };
    pager.append(prev);
  }
  if (table.offset + table.limit < data.count) {
    const next = el("button", { type: "button" }, "next →");
    next.onclick = () => { table.offset += table.limit; loadTrials(); };
    pager.append(next);
  }
  for (const th of $("trials-table").querySelectorAll("th[data-sort]")) {
    const key = th.dataset.sort;
    th.classList.toggle("asc", table.order === key);
    th.classList.toggle("desc", table.order === `-${key}`);
  }
}

for (const th of $("trials-table").querySelectorAll("th[data-sort]")) {
  th.addEventListener("click", () => {
    const key = th.dataset.sort;
    table.order = table.order === key ? `-${key}` : key;
    table.offset = 0;
    loadTrials();
  });
}
$("trials-status").addEventListener("change", (event) => {
  table.status = event.target.value;
  table.offset = 0;
  loadTrials();
});

let trialsTimer = null;
function scheduleTrialsRefresh() {
  if (trialsTimer) return;
  trialsTimer = setTimeout(() => { trialsTimer = null; loadTrials(); }, 2000);
}

// ----- cancel -----------------------------------------------------------------------------------
$("cancel-button").addEventListener("click", async () => {
  if (!window.confirm(`Cancel run #${runId}? Its trials and best so far are kept.`)) return;
  try {
    showRun(await getJSON(api, { method: "DELETE" }));
  } catch (error) {
    window.alert(`Could not cancel: ${error.message}`);
  }
});

// ----- live events ------------------------------------------------------------------------------
function follow() {
  const events = new EventSource(`${api}/events?after=${state.lastNumber}`);
  events.addEventListener("status", (e) => showRun(JSON.parse(e.data)));
  events.addEventListener("trial", (e) => addTrial(JSON.parse(e.data)));
  events.addEventListener("progress", (e) => {
    const progress = JSON.parse(e.data);
    showProgress(progress);
    if (progress.best_latency_us !== null && progress.best_latency_us !== state.bestShown) {
      state.bestShown = progress.best_latency_us; // a new winner: redraw its timeline
      scheduleScheduleRefresh();
    }
    // Recomputed as the run grows by a quarter (10, 13, 16, 20, ...): it reads every trial.
    if (state.measured >= Math.max(10, 1.25 * importanceAt)) loadImportance();
  });
  events.addEventListener("end", async (e) => {
    events.close();
    const run = JSON.parse(e.data);
    showRun(run);
    document.body.dataset.runEnded = "true";
    // A run cancelled before its first measurement has no schedule to show (its timeline 404s).
    await Promise.all([loadTrials(), loadImportance(true), run.best && loadSchedule(), drawConvergence()]);
  });
  page.dataset.live = "true";
}

async function main() {
  const run = await getJSON(api);
  if (!run.best && !rangeRun) {
    // Until a first schedule is measured (the live events bring it).
    $("timeline").closest("figure").hidden = true;
    $("timeline-empty").hidden = false;
    const pre = $("kernel-source");
    pre.classList.add("placeholder");
    pre.firstElementChild.textContent = "Not generated yet: no schedule has been measured.";
  }
  showRun(run); // loads the winning schedule's timeline and source, if there is one
  const loaded = await loadConvergence();
  if (active()) follow();
  // The table needs no plotly.js: it fills in while the charts wait behind their placeholders.
  await Promise.all([loaded && drawConvergence(), loadTrials(), loadImportance(true)]);
  document.body.dataset.ready = "true";
}

main();
