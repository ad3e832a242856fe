// The overview: the node's stream (/ui/api/overview), redrawn on every change.

import { clock, formatBytes } from "./bytes.js";
import { $, el } from "./dom.js";
import { stream } from "./api.js";

/** The node sends the overview at least every 5 s; this long without a word, the connection is dead. */
const SILENCE_MS = 12000;

export const overview = { last: null, members: new Map() };

export function memberName(id) {
  const member = overview.members.get(id);
  return member && member.name ? `${member.name} (${id})` : id;
}

export function drawOverview(o) {
  overview.members = new Map(o.members.map((m) => [m.id, m]));
  const previous = overview.last;
  overview.last = o;
  $("ov-master").textContent = o.master_id ? memberName(o.master_id) : "none (election in progress)";
  $("ov-backend").textContent = o.backend;
  $("ov-term").textContent = String(o.term);
  $("ov-revision").textContent = String(o.revision);
  $("ov-compacted").textContent = o.compacted ? String(o.compacted) : "never";
  $("ov-size").textContent = `${formatBytes(o.bytes_in_use)} / ${o.quota_bytes ? formatBytes(o.quota_bytes) : "no quota"}`;
  $("ov-alarms").textContent = o.alarms.length ? o.alarms.join(", ") : "none";
  $("ov-alarms").className = o.alarms.length ? "error" : "";
  const health = { checking: "checking…", healthy: "healthy", unhealthy: `unhealthy: ${o.health.reason}` }[o.health.state];
  $("ov-health").textContent = `${memberName(o.node_id)}: ${health}`;
  $("ov-health").className = { checking: "", healthy: "ok", unhealthy: "error" }[o.health.state];
  const rows = o.members.map((m) =>
    el(
      "tr",
      { "data-member": m.id },
      el("td", {}, m.name || "(unstarted)"),
      el("td", {}, el("code", {}, m.id)),
      el("td", {}, m.id === o.master_id ? el("strong", { class: "master" }, "master") : m.learner ? "learner" : "voter"),
      el("td", {}, m.client_urls.join(" ")),
      el("td", {}, m.peer_urls.join(" ")),
    ),
  );
  $("ov-members").tBodies[0].replaceChildren(...rows);
  if (!previous || previous.master_id !== o.master_id) {
    const text = o.master_id ? `master is ${memberName(o.master_id)} (term ${o.term})` : "no master: election in progress";
    $("ov-changes").prepend(el("li", {}, el("time", {}, clock()), " ", text));
    while ($("ov-changes").children.length > 20) $("ov-changes").lastChild.remove();
  }
}

export async function followOverview() {
  for (;;) {
    try {
      await stream(
        "/ui/api/overview",
        {},
        (o) => {
          $("overview-stream").textContent = `Live from node ${o.node_id}; last update ${clock()}`;
          drawOverview(o);
        },
        undefined,
        { idleMs: SILENCE_MS },
      );
      $("overview-stream").textContent = "The node closed the stream; reconnecting…";
    } catch (error) {
      $("overview-stream").textContent = disconnected(error);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}


/** What the stream's end means and what a person can do about it, in one line. */
function disconnected(error) {
  const node = location.host;
  if (error.name === "AbortError") {
    return `No word from the node at ${node} for ${SILENCE_MS / 1000} s: it may be overloaded or stalled. Reconnecting every second…`;
  }
  if (error instanceof TypeError) {
    // fetch() fails with a TypeError ("Failed to fetch", "NetworkError…") when nothing answers.
    return `Cannot reach the node at ${node}: check that kvserver is running there and that this browser can reach its client port. Reconnecting every second…`;
  }
  return `The node at ${node} ended the stream (${error.message}). Reconnecting every second…`;
}
