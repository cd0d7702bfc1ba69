// cronlease dashboard: live countdowns, a refresh of <main> every few
// seconds and a run's live output. The pages work without it; it only
// saves the reload.
"use strict";
(function () {
  const REFRESH_MS = 3000;
  const serverNow = Number(document.body.dataset.nowMs || 0);
  // Redis time minus this browser's clock, so countdowns follow Redis.
  const offset = serverNow > 0 ? serverNow - Date.now() : 0;

  function human(ms) {
    ms = Math.max(0, ms);
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.floor(ms % 60000 / 1000) + " s";
    if (ms < 86400000) return Math.floor(ms / 3600000) + " h " + Math.floor(ms % 3600000 / 60000) + " min";
    return Math.floor(ms / 86400000) + " d " + Math.floor(ms % 86400000 / 3600000) + " h";
  }

  function countdowns() {
    const now = Date.now() + offset;
    for (const el of document.querySelectorAll(".countdown[data-at-ms]")) {
      const left = Number(el.dataset.atMs) - now;
      el.textContent = left > 0 ? "in " + human(left) : "due now";
    }
  }

  // Whether the visitor is filling in a form inside `live` (the login
  // form): swapping it would wipe what they typed.
  function typing(live) {
    return [...live.querySelectorAll("input, textarea")].some(
      (el) => el.type !== "hidden" && (el === document.activeElement || el.value !== el.defaultValue)
    );
  }

  // Swaps in a fresh <main>, keeping open <details> open.
  async function refresh() {
    if (document.visibilityState !== "visible") return;
    const live = document.querySelector("main[data-live]");
    if (!live || typing(live)) return;
    try {
      const response = await fetch(location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main[data-live]");
      if (!fresh || typing(live)) return;
      const open = new Set([...live.querySelectorAll("details[open]")].map((d) => d.id));
      for (const d of fresh.querySelectorAll("details")) if (open.has(d.id)) d.open = true;
      // The live output panel keeps its stream and its lines while it
      // follows the same run.
      const following = live.querySelector("#live-output");
      live.replaceChildren(...fresh.childNodes);
      const slot = live.querySelector("#live-output");
      if (following && slot && following.dataset.src === slot.dataset.src) slot.replaceWith(following);
      liveOutput();
      // The footer's Redis time too, so it says how fresh the page is.
      const footer = document.querySelector("footer");
      const freshFooter = page.querySelector("footer");
      if (footer && freshFooter) footer.replaceWith(freshFooter);
      const now = Number(page.body.dataset.nowMs || 0);
      if (now > 0) document.body.dataset.nowMs = String(now);
      document.body.dataset.refreshedAt = String(Date.now());
      countdowns();
    } catch (_) {
      // The replica is restarting or unreachable: try again next time.
    }
  }

  // Follows the run's output (server-sent events) into the panel's <pre>,
  // keeping the newest MAX_LINES lines; closes at the run's end.
  const MAX_LINES = 1000;
  function liveOutput() {
    const panel = document.querySelector("#live-output");
    if (!panel || panel.dataset.following) return;
    panel.dataset.following = "1";
    const pre = panel.querySelector("pre");
    const state = panel.querySelector(".state");
    const events = new EventSource(panel.dataset.src);
    const add = (source) => (event) => {
      const line = document.createElement("span");
      line.className = "live-" + source;
      const marked = source === "stderr" || source === "cronlease";
      line.textContent = (marked ? "[" + source + "] " : "") + event.data + "\n";
      pre.append(line);
      while (pre.childElementCount > MAX_LINES) pre.firstElementChild.remove();
      pre.scrollTop = pre.scrollHeight;
    };
    for (const source of ["stdout", "stderr", "handler", "cronlease"]) {
      events.addEventListener(source, add(source));
    }
    const close = (text) => (event) => {
      events.close();
      if (state) state.textContent = event.data || text;
    };
    events.addEventListener("end", close("the run ended"));
    events.addEventListener("gone", close("the run is gone"));
  }

  countdowns();
  liveOutput();
  setInterval(countdowns, 1000);
  setInterval(refresh, REFRESH_MS);
})();
