// Leases: by id and name, counted down in the page between refreshes; the leases view.

import { display, fromBase64, leaseHex } from "./bytes.js";
import { $, el, notice } from "./dom.js";
import { EtcdError, call, explained, stream } from "./api.js";

// Leases by name, shared by the services and leases views. `ended` keeps, for a minute, the
// leases a refresh no longer found, so that a lease expiring while shown stays on screen,
// marked expired, instead of vanishing.
export const leases = { byId: new Map(), ended: new Map() };

/** How long an ended lease stays listed. */
const ENDED_SHOWN_MS = 60000;

export async function refreshLeases() {
  const answer = await call("leasekv/listleases");
  const now = performance.now();
  const before = leases.byId;
  leases.byId = new Map(
    (answer.leases || []).map((l) => [
      l.id,
      {
        id: l.id,
        name: l.name || "",
        granted: Number(l.granted_ttl || 0),
        // -1: unknown, while there is no master to ask.
        deadline: Number(l.remaining_ttl_ms || 0) < 0 ? null : now + Number(l.remaining_ttl_ms || 0),
      },
    ]),
  );
  for (const [id, lease] of before) {
    if (!leases.byId.has(id)) leases.ended.set(id, { ...lease, endedAt: now });
  }
  for (const [id, lease] of leases.ended) {
    if (now - lease.endedAt > ENDED_SHOWN_MS || leases.byId.has(id)) leases.ended.delete(id);
  }
}

/** Whether the lease still exists (a key deleted with its lease gone has expired). */
export async function leaseAlive(id) {
  try {
    const answer = await call("lease/timetolive", { ID: id });
    return Number(answer.TTL) > 0;
  } catch {
    return false;
  }
}

export function remaining(lease) {
  return Math.max(0, (lease.deadline - performance.now()) / 1000);
}

export function countdownText(lease) {
  if (!lease) return "expired";
  if (lease.deadline === null) return "unknown (no master)";
  const left = remaining(lease);
  return left > 0 ? `${Math.ceil(left)} s` : "expiring…";
}

export function leaseLabel(id) {
  if (!id || id === "0") return "none";
  const lease = leases.byId.get(id) || leases.ended.get(id);
  return lease && lease.name ? `${lease.name} (${leaseHex(id)})` : leaseHex(id);
}

// The leases view: every lease by id and name, its keys, revoke and keep alive once.

export function drawLeases() {
  const byName = (a, b) => (a.name + a.id < b.name + b.id ? -1 : 1);
  const list = [...[...leases.byId.values()].sort(byName), ...[...leases.ended.values()].sort(byName)];
  $("leases-table").tBodies[0].replaceChildren(
    ...list.map((l) =>
      el(
        "tr",
        { "data-lease-row": l.id, class: l.endedAt ? "ended" : null },
        el("td", {}, el("code", {}, leaseHex(l.id))),
        el("td", {}, l.name || "–"),
        el("td", {}, `${l.granted} s`),
        el("td", { class: "countdown", "data-lease": l.id }, l.endedAt ? "expired" : countdownText(l)),
        el(
          "td",
          { class: "actions" },
          el("button", { type: "button", onclick: () => showLeaseKeys(l.id) }, "Keys"),
          el("button", { type: "button", class: "writes", onclick: () => keepAliveOnce(l.id) }, "Keep alive once"),
          el("button", { type: "button", class: "writes danger", onclick: () => revokeLease(l) }, "Revoke"),
        ),
      ),
    ),
  );
  $("leases-empty").hidden = list.length > 0;
}

export async function showLeases() {
  try {
    await refreshLeases();
    drawLeases();
  } catch (error) {
    notice(error.message, "error");
  }
}

export async function showLeaseKeys(id) {
  try {
    const answer = await call("lease/timetolive", { ID: id, keys: true });
    const box = $("lease-detail");
    if (Number(answer.TTL) < 0) {
      box.replaceChildren(el("p", { class: "error" }, `Lease ${leaseHex(id)} has expired.`));
      return;
    }
    const attached = (answer.keys || []).map((k) => display(fromBase64(k)).text);
    box.replaceChildren(
      el("h3", {}, `Keys of lease ${leaseLabel(id)}`),
      attached.length ? el("ul", {}, attached.map((k) => el("li", {}, el("code", {}, k)))) : el("p", { class: "muted" }, "No keys."),
    );
  } catch (error) {
    notice(error.message, "error");
  }
}

export async function keepAliveOnce(id) {
  const abort = new AbortController();
  try {
    let renewed = null;
    await stream(
      "/ui/api/v3/lease/keepalive",
      { method: "POST", body: JSON.stringify({ ID: id }) },
      (line) => {
        if (line.error) throw new EtcdError(explained(line.error.message, line.error.details), line.error.grpc_code);
        renewed = line.result || {};
        abort.abort();
      },
      abort.signal,
    ).catch((error) => {
      if (error.name !== "AbortError") throw error;
    });
    if (renewed && Number(renewed.TTL) > 0) notice(`Lease ${leaseHex(id)} renewed: ${renewed.TTL} s.`, "ok");
    else notice(`Lease ${leaseHex(id)} was not renewed: it has expired or been revoked.`, "error");
    await showLeases();
  } catch (error) {
    notice(error.message, "error");
  }
}

export async function revokeLease(lease) {
  if (!confirm(`Revoke lease ${leaseLabel(lease.id)}? Its keys are deleted.`)) return;
  try {
    await call("lease/revoke", { ID: lease.id });
    notice(`Lease ${leaseHex(lease.id)} revoked.`, "ok");
    await showLeases();
  } catch (error) {
    notice(error.message, "error");
  }
}

