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

const VIEWS = ["overview", "services", "keys", "leases", "locks"];
let shown = null;

function currentView() {
  if (!location.hash.startsWith("#/")) return shown || "overview";
  const name = location.hash.slice(2).split("?")[0];
  return VIEWS.includes(name) ? name : "overview";
}

function route() {
  // A plain anchor (the skip link's #main) is not a view: stay where we are.
  if (shown !== null && !location.hash.startsWith("#/")) return;
  const view = currentView();
  const switched = shown !== null && shown !== view;
  shown = view;
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
  // A keyboard or screen-reader user lands on the view's heading, not back at the top.
  if (switched) document.querySelector(`#view-${view} h2`)?.focus();
}

/** Every lease's time left, in the cells that show one. */
function tickCountdowns() {
  for (const cell of document.querySelectorAll("td.countdown[data-lease]")) {
    const id = cell.getAttribute("data-lease");
    if (id !== "0") cell.textContent = countdownText(leases.byId.get(id));
  }
}

// Count down, and refresh the leases now and then (renewals, revocations).
setInterval(tickCountdowns, 250);

setInterval(async () => {
  const view = currentView();
  if (view !== "services" && view !== "leases") return;
  try {
    await refreshLeases();
    if (view === "leases") {
      // Redrawn rows would drop the keyboard focus: put it back on the same button.
      const focused = document.activeElement;
      const row = focused?.closest?.("tr[data-lease-row]")?.getAttribute("data-lease-row");
      const label = focused?.textContent;
      drawLeases();
      if (row) {
        const again = [...document.querySelectorAll(`tr[data-lease-row="${CSS.escape(row)}"] button`)].find((b) => b.textContent === label);
        again?.focus();
      }
    } else {
      // A lease that ended takes its keys with it; the watch reports them.
      tickCountdowns();
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
