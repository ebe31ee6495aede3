// Shared helpers of the dashboard's pages: fetching JSON, formatting, drawing a chart in
// place of its placeholder, and a schedule's kernel source (its timeline is timeline.js).
// Charts use plotly.js, served by pipetune from the installed plotly package (window.Plotly).

export const STATUS_COLOURS = {
  ok: "#2e8b57",
  invalid: "#9aa3ad",
  render_error: "#a0522d",
  compile_error: "#d9822b",
  launch_error: "#c0392b",
  wrong_result: "#8e44ad",
  timeout: "#e67e22",
  crash: "#b03a2e",
};

const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
const FONT = { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12 };

export function statusColour(status) {
  return STATUS_COLOURS[status] || "#555";
}

// A logged-in page's CSRF token (its <meta>): the server refuses a session's writes
// without it.
export function csrfHeaders() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? { "X-CSRF-Token": meta.content } : {};
}

export async function getJSON(url, options = {}) {
  const method = (options.method || "GET").toUpperCase();
  const headers = { Accept: "application/json", ...(method === "GET" ? {} : csrfHeaders()) };
  const response = await fetch(url, { ...options, headers: { ...headers, ...options.headers } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    const error = new Error(detail || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

export function fmtLatency(us) {
  if (us === null || us === undefined) return "—";
  return us >= 1000 ? `${(us / 1000).toFixed(3)} ms` : `${us.toFixed(2)} µs`;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${String(Math.floor(seconds % 60)).padStart(2, "0")} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

export function fmtParams(params) {
  return Object.entries(params || {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

export function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  if (text !== null) node.textContent = text;
  return node;
}

/** Resolve once plotly.js (a deferred classic script) has run. */
export function plotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  return new Promise((resolve) => {
    const wait = () => (window.Plotly ? resolve(window.Plotly) : setTimeout(wait, 20));
    wait();
  });
}

/** Draw a chart in ``node``, in place of the placeholder it shows until then. */
export async function plot(node, traces, layout) {
  const Plotly = await plotly();
  const base = { font: FONT, margin: { l: 60, r: 20, t: 30, b: 44 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff" };
  node.querySelector(":scope > .chart-placeholder")?.remove();
  await Plotly.react(node, traces, { ...base, ...layout }, PLOT_CONFIG);
  node.dataset.drawn = "true";
}

/** Say in a chart's placeholder why it is not drawn (the chart keeps its place). */
export function chartFailed(node, message) {
  const holder = node.querySelector(":scope > .chart-placeholder");
  if (!holder) return;
  holder.classList.add("failed");
  holder.textContent = message;
}

/** The "est." mark of a cost-model figure, its note on hover (ESTIMATE_NOTE). */
export function estimateMark(note) {
  return el("abbr", { class: "est", title: note }, "est.");
}

// ----- kernel source --------------------------------------------------------------------------
let sourceUrl = null;

export async function loadSource(url) {
  const pre = document.getElementById("kernel-source");
  const copy = document.getElementById("copy-source");
  const download = document.getElementById("download-source");
  const origin = document.getElementById("source-origin");
  const response = await fetch(url);
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    pre.classList.add("placeholder");
    const detail = typeof body.detail === "string" ? body.detail : "";
    pre.firstElementChild.textContent = response.status !== 404
      ? `Could not load the source: ${detail || response.status}`
      : /^not generated yet/i.test(detail)
        ? `N${detail.slice(1)}.`
        : `Not generated yet. ${detail}`.trim();
    copy.disabled = true;
    download.classList.add("disabled");
    origin.textContent = "";
    return false;
  }
  const text = await response.text();
  const disposition = response.headers.get("Content-Disposition") || "";
  const filename = (disposition.match(/filename="([^"]+)"/) || [null, "kernel.cu"])[1];
  pre.classList.remove("placeholder");
  pre.firstElementChild.textContent = text;
  if (sourceUrl) URL.revokeObjectURL(sourceUrl);
  sourceUrl = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  download.href = sourceUrl;
  download.download = filename;
  download.classList.remove("disabled");
  copy.disabled = false;
  copy.onclick = async () => {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      const area = el("textarea");
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    copy.textContent = "Copied";
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  };
  origin.textContent = response.headers.get("X-Pipetune-Source") === "stored"
    ? `${filename} · the stored kernel`
    : `${filename} · generated now from the sProgram by pipetune's code generator (no kernel was stored for it)`;
  return true;
}
