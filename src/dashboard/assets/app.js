// cronlease dashboard: live countdowns and a refresh of <main> every few
// seconds. The pages work without it; it only saves the reload.
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
      live.replaceChildren(...fresh.childNodes);
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

  countdowns();
  setInterval(countdowns, 1000);
  setInterval(refresh, REFRESH_MS);
})();
