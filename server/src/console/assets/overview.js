// The overview: the node's stream (/ui/api/overview), redrawn on every change.

import { clock, formatBytes } from "./bytes.js";
import { $, el } from "./dom.js";
import { headers, stream } from "./api.js";

// Overview: the node's stream, redrawn on every change.

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
  $("ov-health").textContent = `${memberName(o.node_id)}: ${o.unhealthy ? `unhealthy: ${o.unhealthy}` : "healthy"}`;
  $("ov-health").className = o.unhealthy ? "error" : "ok";
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
        { headers: headers() },
        (o) => {
          $("overview-stream").textContent = `Live from node ${o.node_id}; last update ${clock()}`;
          drawOverview(o);
        },
        undefined,
      );
      $("overview-stream").textContent = "The node closed the stream; reconnecting…";
    } catch (error) {
      $("overview-stream").textContent = `Disconnected (${error.message}); reconnecting…`;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

