// Shared helpers of the dashboard's pages: fetching JSON, formatting, and the two drawings
// every schedule has (its per-sEU timeline and its kernel source). Charts use plotly.js,
// served by pipetune from the installed plotly package (window.Plotly).

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

export const LANE_NAMES = {
  tma: "TMA",
  lsu: "LSU (cp.async)",
  tensor_core: "Tensor cores",
  cuda_core: "CUDA cores",
  sfu: "SFU",
};

const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
const FONT = { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12 };

export function statusColour(status) {
  return STATUS_COLOURS[status] || "#555";
}

export async function getJSON(url, options = {}) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, ...options });
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

export async function plot(node, traces, layout) {
  const Plotly = await plotly();
  const base = { font: FONT, margin: { l: 60, r: 20, t: 30, b: 44 }, paper_bgcolor: "#fff", plot_bgcolor: "#fff" };
  await Plotly.react(node, traces, { ...base, ...layout }, PLOT_CONFIG);
  node.dataset.drawn = "true";
}

// ----- the timeline ---------------------------------------------------------------------------
const FAMILIES = [
  [/^load|^tma|^copy/, ["#1f77b4", "#4f9fd8", "#7fb8e6", "#2a5d8f", "#9cc9ee", "#3d7ab8", "#1b4f72"]],
  [/^mma|^wgmma|^gemm/, ["#e4572e", "#f28e2b", "#c44e1f", "#f6a96c"]],
  [/^store|^epilogue/, ["#7b3fa0", "#a36fc4"]],
];
const OTHERS = ["#2e8b57", "#59a14f", "#8cd17d", "#b6992d", "#499894", "#86bcb6", "#e15759", "#79706e"];

function stackColours(stasks) {
  const used = new Map();
  const counters = new Map();
  for (const name of stasks) {
    let palette = OTHERS;
    for (const [pattern, colours] of FAMILIES) if (pattern.test(name)) palette = colours;
    const index = counters.get(palette) || 0;
    counters.set(palette, index + 1);
    used.set(name, palette[index % palette.length]);
  }
  return used;
}

/** Draw the cost model's per-sEU timeline (``TimelinePublic``) as horizontal bars, one
 * lane per sEU, one colour per sTask. */
export async function drawTimeline(node, summary, data) {
  const stasks = [...new Set(data.entries.map((e) => e.stask))];
  const colours = stackColours(stasks);
  const laneLabel = (unit) => LANE_NAMES[unit] || unit;
  const span = Math.max(...data.entries.map((e) => e.end_us), 1e-9);
  const traces = stasks.map((stask) => {
    const mine = data.entries.filter((e) => e.stask === stask);
    return {
      type: "bar",
      orientation: "h",
      name: stask,
      y: mine.map((e) => laneLabel(e.unit)),
      x: mine.map((e) => Math.max(e.end_us - e.start_us, span * 1e-4)),
      base: mine.map((e) => e.start_us),
      text: mine.map((e) => (e.end_us - e.start_us > span * 0.035 ? `${stask}[${e.iteration}]` : "")),
      textposition: "inside",
      insidetextanchor: "middle",
      customdata: mine.map((e) => [e.role, e.iteration, e.start_us.toFixed(3), e.end_us.toFixed(3)]),
      hovertemplate: `<b>${stask}</b> · %{customdata[0]} · iteration %{customdata[1]}` +
        "<br>%{customdata[2]}–%{customdata[3]} µs<extra>%{y}</extra>",
      marker: {
        color: colours.get(stask),
        // Odd consumer warpgroups paler: pingpong consumers take turns on one sEU.
        opacity: mine.map((e) => (/[13]$/.test(e.role) ? 0.7 : 1)),
        line: { color: "#fff", width: 0.5 },
      },
    };
  });
  const lanes = data.lanes.map(laneLabel);
  // Every lane is drawn, even one this schedule leaves idle (an idle SFU is information).
  traces.push({ type: "scatter", mode: "markers", y: lanes, x: lanes.map(() => 0), showlegend: false,
    hoverinfo: "skip", marker: { opacity: 0 } });
  await plot(node, traces, {
    barmode: "overlay",
    bargap: 0.25,
    xaxis: { title: { text: "µs from the block's start" }, zeroline: false, range: [0, span * 1.02] },
    yaxis: { type: "category", categoryorder: "array", categoryarray: [...lanes].reverse(), automargin: true },
    legend: { orientation: "h", y: -0.25, title: { text: "sTask " } },
    uniformtext: { minsize: 9, mode: "hide" },
    height: 120 + 52 * lanes.length,
  });
  if (summary) {
    summary.replaceChildren();
    const items = [
      ["predicted", fmtLatency(data.predicted_us)],
      ["bound", data.bound],
      ["tile", Object.entries(data.tile).map(([k, v]) => `${k}=${v}`).join(" ")],
      ["tiles", String(data.tiles)],
      ["per tile", fmtLatency(data.tile_us)],
      ["stages", Object.entries(data.stages).map(([k, v]) => `${k}: ${v}`).join(", ") || "—"],
      ["warps", `${data.roles.producer_warps ?? 0} producer warp(s), ${data.roles.consumer_warpgroups ?? 0} consumer warpgroup(s)`],
      ...Object.entries(data.unit_utilisation).map(([unit, u]) => [`${LANE_NAMES[unit] || unit} busy`, `${(u * 100).toFixed(0)}%`]),
    ];
    for (const [label, value] of items) {
      const item = el("span", { class: "kv" });
      item.append(el("b", {}, label), document.createTextNode(` ${value}`));
      summary.append(item);
    }
  }
}

export async function loadTimeline(url, node, summary, empty) {
  const box = node.closest("figure") || node;
  try {
    const data = await getJSON(url);
    empty.hidden = true;
    box.hidden = false;
    await drawTimeline(node, summary, data);
    return data;
  } catch (error) {
    box.hidden = true;
    empty.hidden = false;
    if (error.status !== 404 || !empty.textContent.trim()) empty.textContent = error.message;
    return null;
  }
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
