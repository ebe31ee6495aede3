// The runs list: filters apply on change; the table refreshes itself every few seconds
// (the server renders it: /runs/table takes the page's query).
const box = document.getElementById("runs-table");
const form = document.getElementById("runs-filters");
const indicator = document.getElementById("live-indicator");
const every = Number(box.dataset.refreshMs) || 2000;

form.addEventListener("change", () => form.submit());

let busy = false;
async function refresh() {
  if (busy || document.hidden) return;
  busy = true;
  try {
    const response = await fetch(`/runs/table?${box.dataset.query}`);
    if (response.ok) {
      box.innerHTML = await response.text();
      indicator.classList.remove("stale");
      box.dataset.refreshed = String(Date.now());
    } else {
      indicator.classList.add("stale");
    }
  } catch {
    indicator.classList.add("stale");
  } finally {
    busy = false;
  }
}

setInterval(refresh, every);
document.addEventListener("visibilitychange", refresh);
