// The console's only script (its CSP allows no inline one): live refresh of the
// element marked data-live, keeping the selection; select-all; a confirmation's
// button that says it is working (the confirmation itself is a page: no script needed).
"use strict";

function selectedIds() {
  return new Set(Array.from(document.querySelectorAll('input[name="ids"]:checked')).map((box) => box.value));
}

function wire(root) {
  root.querySelectorAll("[data-select-all]").forEach((all) => {
    all.addEventListener("change", () => {
      document.querySelectorAll('input[name="ids"]').forEach((box) => { box.checked = all.checked; });
    });
  });
}

function live(region) {
  const every = Math.max(parseInt(region.dataset.refresh, 10) || 5, 1) * 1000;
  let busy = false;
  async function refresh() {
    if (busy || document.hidden || region.dataset.paused === "1") return;
    busy = true;
    try {
      const url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const html = await response.text();
      const keep = selectedIds();
      const all = region.querySelector("[data-select-all]");
      const allChecked = all ? all.checked : false;
      region.innerHTML = html;
      region.querySelectorAll('input[name="ids"]').forEach((box) => { box.checked = keep.has(box.value); });
      const again = region.querySelector("[data-select-all]");
      if (again) again.checked = allChecked;
      wire(region);
      region.dispatchEvent(new CustomEvent("mq:refreshed", { bubbles: true }));
      document.documentElement.dataset.refreshes = String((parseInt(document.documentElement.dataset.refreshes, 10) || 0) + 1);
    } catch (error) {
      // the next tick tries again
    } finally {
      busy = false;
    }
  }
  window.setInterval(refresh, every);
}

function confirming(form) {
  // The confirmation's POST runs in one request (one audit line); while it runs the
  // button says so, and a second click cannot send it twice.
  form.addEventListener("submit", () => {
    const button = form.querySelector("[data-confirm-button]");
    if (!button) return;
    window.setTimeout(() => {
      button.disabled = true;
      button.textContent = "working… (this page answers when every message is done)";
    }, 0);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  wire(document);
  document.querySelectorAll("[data-live]").forEach(live);
  document.querySelectorAll("form.confirm").forEach(confirming);
});
