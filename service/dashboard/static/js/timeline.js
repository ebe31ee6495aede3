// A schedule's per-sEU timeline as the cost model simulates one thread block
// (``TimelinePublic``): one lane per sEU, one colour per sTask, each bar an sTask instance.
import { chartFailed, el, fmtLatency, getJSON, plot } from "./common.js";

export const LANE_NAMES = {
  tma: "TMA",
  lsu: "LSU (cp.async)",
  tensor_core: "Tensor cores",
  cuda_core: "CUDA cores",
  sfu: "SFU",
};

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

/** Where in the block each instance runs. The cost model numbers an instance by its loop
 * iteration, a prologue sTask's (run once, before the loop) -1 and an epilogue sTask's
 * (once, after it) the count of iterations it simulated (scheduler_search/cost_model/
 * simulate.py): neither is an iteration, so neither is shown as one (``load_c[-1]``). */
export function placeOf(entries) {
  const trips = Math.max(0, ...entries.map((e) => e.iteration));
  const inLoop = new Set(entries.filter((e) => e.iteration >= 0 && e.iteration < trips).map((e) => e.stask));
  return (entry) => {
    if (entry.iteration < 0) return { label: `${entry.stask} (prologue)`, hover: "prologue: once, before the loop" };
    if (trips > 0 && entry.iteration === trips && !inLoop.has(entry.stask)) {
      return { label: `${entry.stask} (epilogue)`, hover: "epilogue: once, after the loop" };
    }
    return { label: `${entry.stask}[${entry.iteration}]`, hover: `loop iteration ${entry.iteration}` };
  };
}

function showSummary(summary, data) {
  summary.replaceChildren();
  const items = [
    [data.calibrated ? "predicted (calibrated)" : "predicted (cost model)", fmtLatency(data.predicted_us)],
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

/** Draw the timeline as horizontal bars, one lane per sEU, one colour per sTask. */
export async function drawTimeline(node, summary, data) {
  const stasks = [...new Set(data.entries.map((e) => e.stask))];
  const colours = stackColours(stasks);
  const place = placeOf(data.entries);
  const laneLabel = (unit) => LANE_NAMES[unit] || unit;
  const span = Math.max(...data.entries.map((e) => e.end_us), 1e-9);
  const traces = stasks.map((stask) => {
    const mine = data.entries.filter((e) => e.stask === stask);
    const places = mine.map(place);
    return {
      type: "bar",
      orientation: "h",
      name: stask,
      y: mine.map((e) => laneLabel(e.unit)),
      x: mine.map((e) => Math.max(e.end_us - e.start_us, span * 1e-4)),
      base: mine.map((e) => e.start_us),
      text: mine.map((e, i) => (e.end_us - e.start_us > span * 0.035 ? places[i].label : "")),
      textposition: "inside",
      insidetextanchor: "middle",
      customdata: mine.map((e, i) => [e.role, places[i].hover, e.start_us.toFixed(3), e.end_us.toFixed(3)]),
      hovertemplate: `<b>${stask}</b> · %{customdata[0]} · %{customdata[1]}` +
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
    xaxis: { title: { text: "µs from the block's start (cost model)" }, zeroline: false, range: [0, span * 1.02] },
    yaxis: { type: "category", categoryorder: "array", categoryarray: [...lanes].reverse(), automargin: true },
    legend: { orientation: "h", y: -0.25, title: { text: "sTask " } },
    uniformtext: { minsize: 9, mode: "hide" },
    height: 120 + 52 * lanes.length,
  });
  if (summary) showSummary(summary, data);
}

/** Fetch a timeline and start drawing it (plotly.js may still be on its way: the caller
 * goes on meanwhile); a schedule without one says why in ``empty``. */
export async function loadTimeline(url, node, summary, empty) {
  const box = node.closest("figure") || node;
  let data;
  try {
    data = await getJSON(url);
  } catch (error) {
    box.hidden = true;
    empty.hidden = false;
    if (error.status !== 404 || !empty.textContent.trim()) empty.textContent = error.message;
    return null;
  }
  empty.hidden = true;
  box.hidden = false;
  drawTimeline(node, summary, data).catch((error) => {
    chartFailed(node, `Could not draw the timeline: ${error.message}`);
  });
  return data;
}
