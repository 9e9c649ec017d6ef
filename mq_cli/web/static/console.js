// The console's only script (its CSP allows no inline one): live refresh of the
// element marked data-live, keeping the selection; select-all; "all matching"
// actions posted chunk after chunk with their progress.
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

function chunked(form) {
  form.addEventListener("submit", async (event) => {
    const button = event.submitter;
    if (!button) return;  // no action chosen: let the browser post it as it is
    event.preventDefault();
    const progress = form.querySelector("[data-progress]");
    const region = document.getElementById("live");
    if (region) region.dataset.paused = "1";
    const buttons = form.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    const data = new FormData(form);
    data.set("action", button.value);
    data.set("chunked", "1");
    let after = "0", done = 0, refused = 0, missing = 0, failed = null;
    while (after !== null) {
      data.set("after", after);
      let response;
      try {
        response = await fetch(form.getAttribute("action"), {  // form.action: the button named "action"
          method: "POST", body: data, credentials: "same-origin",
          headers: { Accept: "application/json", "X-CSRFToken": data.get("csrf_token") },
        });
      } catch (error) {
        failed = "the console did not answer";
        break;
      }
      const body = await response.json().catch(() => ({}));
      if (!response.ok) { failed = body.error || ("HTTP " + response.status); break; }
      done += body.done; refused += Object.keys(body.refused).length; missing += body.missing.length;
      after = body.next_after === null ? null : String(body.next_after);
      if (progress) progress.textContent = (button.value === "retry" ? "requeued " : "deleted ") + done + (after === null ? "" : " …");
    }
    if (progress) {
      let text = (button.value === "retry" ? "requeued " : "deleted ") + done + " message(s)";
      if (refused) text += "; " + refused + " processing refused (tick force)";
      if (missing) text += "; " + missing + " not found";
      if (failed) text += "; stopped: " + failed;
      progress.textContent = text;
      progress.dataset.finished = "1";
    }
    buttons.forEach((b) => { b.disabled = false; });
    if (region) delete region.dataset.paused;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  wire(document);
  document.querySelectorAll("[data-live]").forEach(live);
  document.querySelectorAll("form[data-chunked]").forEach(chunked);
});
