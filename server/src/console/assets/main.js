// leasekv's console: one page over etcd's HTTP/JSON gateway (served by this node under
// /ui/api/v3) and the node's overview stream (/ui/api/overview). No framework and no build
// step: ES modules, drawn with the DOM's own calls. This module routes between the views.

import { $, notice } from "./dom.js";
import { login, logout, readOnly, session, showUser } from "./api.js";
import { followOverview } from "./overview.js";
import { countdownText, drawLeases, leases, refreshLeases, showLeases } from "./leases.js";
import { services, showServices } from "./services.js";
import { drawNewKey, showKeys } from "./keys.js";
import { showLocks } from "./locks.js";

// Views and start.

function currentView() {
  const name = location.hash.replace(/^#\//, "").split("?")[0];
  return ["overview", "services", "keys", "leases", "locks"].includes(name) ? name : "overview";
}

function route() {
  const view = currentView();
  $("notice").replaceChildren();
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.dataset.view !== view;
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view !== "services" && services.abort) {
    services.abort.abort();
    services.abort = null;
  }
  if (view === "services") showServices($("services-prefix").value);
  if (view === "keys") showKeys($("keys-prefix").value);
  if (view === "leases") showLeases();
  if (view === "locks") showLocks($("locks-prefix").value);
}

// Count down, and refresh the leases now and then (renewals, revocations).
setInterval(() => {
  for (const cell of document.querySelectorAll("td.countdown[data-lease]")) {
    const id = cell.getAttribute("data-lease");
    if (id !== "0") cell.textContent = countdownText(leases.byId.get(id));
  }
}, 250);

setInterval(async () => {
  const view = currentView();
  if (view !== "services" && view !== "leases") return;
  try {
    await refreshLeases();
    if (view === "leases") drawLeases();
    else {
      // A lease that ended takes its keys with it; the watch reports them.
      for (const cell of document.querySelectorAll("td.countdown[data-lease]")) {
        const id = cell.getAttribute("data-lease");
        if (id !== "0") cell.textContent = countdownText(leases.byId.get(id));
      }
    }
  } catch {
    /* shown by the next call that fails */
  }
}, 3000);

async function start() {
  try {
    const response = await fetch("/ui/api/console");
    session.info = await response.json();
  } catch (error) {
    notice(`The node did not answer: ${error.message}`, "error");
  }
  $("node-label").textContent = session.info.node_id ? `node ${session.info.node_id}` : "";
  document.body.classList.toggle("read-only", readOnly());
  $("mode-label").hidden = !readOnly();
  $("logout").addEventListener("click", logout);
  showUser();
  $("services-form").addEventListener("submit", (e) => (e.preventDefault(), showServices($("services-prefix").value)));
  $("keys-form").addEventListener("submit", (e) => (e.preventDefault(), showKeys($("keys-prefix").value)));
  $("locks-form").addEventListener("submit", (e) => (e.preventDefault(), showLocks($("locks-prefix").value)));
  $("key-new").addEventListener("click", drawNewKey);
  window.addEventListener("hashchange", route);
  followOverview();
  if (session.info.auth_enabled && !session.token) await login();
  route();
}

start();
