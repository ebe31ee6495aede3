// A cached schedule: its per-sEU timeline and its kernel source.
import { loadSource } from "./common.js";
import { loadTimeline } from "./timeline.js";

const page = document.getElementById("schedule-page");
const api = `/v1/schedules/${page.dataset.scheduleId}`;

async function main() {
  await Promise.all([
    loadTimeline(`${api}/timeline`, document.getElementById("timeline"),
      document.getElementById("timeline-summary"), document.getElementById("timeline-empty")),
    loadSource(`${api}/source`),
  ]);
  document.body.dataset.ready = "true";
}

main();
