// Locks and elections: keys NAME/LEASE-ID held by that lease, as etcd's concurrency package
// writes them; the oldest holds, and its create revision is the fencing token.

import { asText, display, fromBase64, leaseHex, rangeOf } from "./bytes.js";
import { $, el, notice } from "./dom.js";
import { kvOf, range } from "./api.js";
import { leaseLabel } from "./leases.js";

/** How many keys one scan reads. */
const SCANNED = 10000;

export async function showLocks(prefix) {
  try {
    const { key, end } = rangeOf(prefix);
    const answer = await range(key, { range_end: end, keys_only: true, limit: SCANNED });
    const groups = new Map();
    for (const raw of answer.kvs || []) {
      const kv = kvOf(raw);
      const text = asText(kv.key);
      if (text === null || kv.lease === "0") continue;
      const slash = text.lastIndexOf("/");
      if (slash <= 0 || text.slice(slash + 1) !== leaseHex(kv.lease)) continue;
      const name = text.slice(0, slash);
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push(kv);
    }
    const box = $("locks-list");
    if (!groups.size) {
      box.replaceChildren(el("p", { class: "muted" }, "No locks or elections found."));
      return;
    }
    const cards = [];
    for (const [name, entries] of [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      entries.sort((a, b) => Number(a.create_revision) - Number(b.create_revision));
      const holder = entries[0];
      const value = (await range(holder.key)).kvs?.[0];
      const proposal = value ? display(fromBase64(value.value)) : { text: "" };
      cards.push(
        el(
          "article",
          { class: "card lock", "data-lock": name },
          el("h3", {}, el("code", {}, name), " ", el("span", { class: "badge" }, proposal.text ? "election" : "lock")),
          el(
            "dl",
            { class: "facts" },
            el("dt", {}, proposal.text ? "Leader" : "Holder"), el("dd", {}, el("code", {}, display(holder.key).text)),
            el("dt", {}, "Fencing token"), el("dd", { class: "token" }, holder.create_revision),
            proposal.text ? [el("dt", {}, "Proposal"), el("dd", {}, proposal.text)] : null,
            el("dt", {}, "Lease"), el("dd", {}, leaseLabel(holder.lease)),
            el("dt", {}, "Waiting"), el("dd", {}, String(entries.length - 1)),
          ),
          entries.length > 1
            ? el("ol", { class: "waiters" }, entries.slice(1).map((w) => el("li", {}, el("code", {}, display(w.key).text), ` (since revision ${w.create_revision})`)))
            : null,
        ),
      );
    }
    box.replaceChildren(...cards);
    if (answer.more) box.append(el("p", { class: "muted" }, `Only the first ${SCANNED} keys were scanned; narrow the prefix.`));
  } catch (error) {
    notice(error.message, "error");
  }
}

