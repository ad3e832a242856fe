// Services: registrations under a prefix, their leases counting down, a live feed (a watch).

import { clock, display, rangeOf, toBase64 } from "./bytes.js";
import { $, el, notice } from "./dom.js";
import { EtcdError, explained, kvOf, range, stream } from "./api.js";
import { countdownText, leaseAlive, leaseLabel, leases, refreshLeases } from "./leases.js";

/** How many registrations are listed at first; the watch adds the ones that come later. */
const LISTED = 1000;

export const services = { rows: new Map(), abort: null };

export function serviceRow(kv) {
  const shown = display(kv.value);
  const key = display(kv.key).text;
  return el(
    "tr",
    { "data-key": key },
    el("td", {}, el("code", {}, key)),
    el("td", { class: shown.binary ? "hex" : "" }, shown.text),
    el("td", {}, leaseLabel(kv.lease)),
    el("td", { class: "countdown", "data-lease": kv.lease }, kv.lease === "0" ? "never" : countdownText(leases.byId.get(kv.lease))),
  );
}

export function drawServices() {
  const rows = [...services.rows.values()].sort((a, b) => (display(a.key).text < display(b.key).text ? -1 : 1));
  $("services-table").tBodies[0].replaceChildren(...rows.map(serviceRow));
  $("services-empty").hidden = rows.length > 0;
}

export function feed(list, text, kind) {
  list.prepend(el("li", { class: kind }, el("time", {}, clock()), " ", text));
  while (list.children.length > 50) list.lastChild.remove();
}

export async function showServices(prefix) {
  // The controller exists before the first await: a newer call (or leaving the view) aborts
  // this one, and its answers are dropped instead of mixed into the newer one's.
  if (services.abort) services.abort.abort();
  const abort = new AbortController();
  services.abort = abort;
  const { key, end } = rangeOf(prefix);
  try {
    await refreshLeases();
    const answer = await range(key, { range_end: end, limit: LISTED });
    if (abort.signal.aborted) return;
    services.rows.clear();
    for (const raw of answer.kvs || []) {
      const kv = kvOf(raw);
      services.rows.set(toBase64(kv.key), kv);
    }
    drawServices();
    if (answer.more) notice(`The first ${LISTED} of ${answer.count} registrations are listed; narrow the prefix.`);
    const start = Number(answer.header.revision) + 1;
    watchServices(key, end, start, abort);
  } catch (error) {
    if (!abort.signal.aborted) notice(error.message, "error");
  }
}

export async function watchServices(key, end, start, abort) {
  const body = { create_request: { key: toBase64(key), range_end: toBase64(end), start_revision: String(start), prev_kv: true } };
  try {
    await stream(
      "/ui/api/v3/watch",
      { method: "POST", body: JSON.stringify(body) },
      async (line) => {
        if (line.error) throw new EtcdError(explained(line.error.message, line.error.details), line.error.grpc_code);
        const result = line.result || {};
        if (result.canceled) {
          const why = result.cancel_reason || (result.compact_revision ? `compacted at ${result.compact_revision}` : "no reason given");
          notice(`The live feed stopped: the node cancelled its watch (${why}). Show the prefix again to restart it.`, "error");
        }
        for (const event of result.events || []) {
          const kv = kvOf(event.kv);
          const id = toBase64(kv.key);
          const name = display(kv.key).text;
          if (event.type === "DELETE") {
            const before = event.prev_kv ? kvOf(event.prev_kv) : services.rows.get(id);
            services.rows.delete(id);
            const expired = before && before.lease !== "0" && !(await leaseAlive(before.lease));
            feed($("services-feed"), `${name} ${expired ? "expired (lease gone)" : "deleted"}`, "gone");
          } else {
            const isNew = kv.create_revision === kv.mod_revision;
            services.rows.set(id, kv);
            if (kv.lease !== "0" && !leases.byId.has(kv.lease)) await refreshLeases().catch(() => {});
            feed($("services-feed"), `${name} ${isNew ? "registered" : "changed"}: ${display(kv.value).text}`, isNew ? "new" : "changed");
          }
        }
        drawServices();
      },
      abort.signal,
    );
  } catch (error) {
    if (error.name !== "AbortError") notice(`The live feed stopped: ${error.message}`, "error");
  }
}


