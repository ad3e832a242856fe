// Keys: a tree by '/', a value as text, JSON or hex; create, update and delete against the
// revision the key was read at; a key's history.

import { asText, display, encoder, fromHex, rangeOf, toBase64, toHex } from "./bytes.js";
import { $, el, fill, notice } from "./dom.js";
import { call, kvOf, range, readOnly } from "./api.js";
import { leaseLabel } from "./leases.js";

/** How many keys the tree lists; how many earlier versions History reads. */
const LISTED = 2000;
const HISTORY_DEPTH = 20;

// `loading` counts loads: an answer that arrives after a newer load started is dropped.
export const keys = { prefix: "/", open: null, format: "text", loadingTree: 0, loadingKey: 0 };

function sameBytes(a, b) {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

export function treeOf(list) {
  const root = { children: new Map(), keys: [] };
  for (const kv of list) {
    const shown = display(kv.key);
    if (shown.binary) {
      root.keys.push(kv);
      continue;
    }
    const parts = shown.text.split("/");
    let node = root;
    for (const part of parts.slice(0, -1)) {
      const name = `${part}/`;
      if (!node.children.has(name)) node.children.set(name, { children: new Map(), keys: [] });
      node = node.children.get(name);
    }
    node.keys.push(kv);
  }
  return root;
}

export function drawTree(node, path = "") {
  const items = [];
  for (const [name, child] of [...node.children.entries()].sort()) {
    items.push(el("li", {}, el("details", { open: true }, el("summary", {}, name), drawTree(child, path + name))));
  }
  for (const kv of node.keys) {
    const shown = display(kv.key);
    const label = shown.binary ? `${shown.text} (hex)` : shown.text.split("/").pop() || shown.text;
    items.push(
      el(
        "li",
        {},
        el("button", { type: "button", class: "key", title: shown.text, "data-key": shown.text, onclick: () => openKey(kv.key) }, label),
      ),
    );
  }
  return el("ul", {}, items);
}

export async function showKeys(prefix) {
  keys.prefix = prefix;
  const load = ++keys.loadingTree;
  try {
    const { key, end } = rangeOf(prefix);
    const answer = await range(key, { range_end: end, keys_only: true, limit: LISTED });
    if (load !== keys.loadingTree) return;
    const list = (answer.kvs || []).map(kvOf);
    const tree = $("keys-tree");
    tree.replaceChildren(list.length ? drawTree(treeOf(list)) : el("p", { class: "muted" }, "No keys under this prefix."));
    if (answer.more) tree.append(el("p", { class: "muted" }, `The first ${list.length} keys of ${answer.count}; narrow the prefix.`));
  } catch (error) {
    notice(error.message, "error");
  }
}

export function valueText(bytes, format) {
  if (format === "hex") return toHex(bytes);
  const text = asText(bytes);
  if (text === null) return null;
  if (format === "json") {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return null;
    }
  }
  return text;
}

export async function openKey(key) {
  const load = ++keys.loadingKey;
  try {
    const answer = await range(key);
    if (load !== keys.loadingKey) return;
    const raw = (answer.kvs || [])[0];
    if (!raw) {
      drawMissingKey(key, answer.header.revision);
      return;
    }
    const kv = kvOf(raw);
    // A key opens in text, or hex for bytes that are not text; reopened, it keeps the
    // format chosen for it.
    const same = keys.open !== null && sameBytes(keys.open.key, kv.key);
    if (asText(kv.value) === null) keys.format = "hex";
    else if (!same) keys.format = "text";
    keys.open = kv;
    drawKey(kv);
  } catch (error) {
    notice(error.message, "error");
  }
}

export function drawMissingKey(key, revision) {
  keys.open = null;
  fill($("key-detail"), 
    el("h3", {}, display(key).text),
    el("p", { class: "error" }, `This key does not exist at revision ${revision} (it was deleted, or its lease expired).`),
  );
}

export function drawKey(kv) {
  const name = display(kv.key);
  const formats = ["text", "json", "hex"].map((format) =>
    el(
      "label",
      {},
      el("input", {
        type: "radio",
        name: "format",
        value: format,
        checked: keys.format === format,
        onchange: () => {
          keys.format = format;
          drawKey(kv);
        },
      }),
      ` ${format === "json" ? "JSON" : format}`,
    ),
  );
  const shown = valueText(kv.value, keys.format);
  const editor = el("textarea", { id: "value-editor", rows: 10, spellcheck: "false", "aria-label": "Value", readonly: readOnly() || shown === null });
  editor.value = shown === null ? "" : shown;
  fill($("key-detail"), 
    el("h3", { id: "key-name", tabindex: "-1" }, name.text, name.binary ? " (hex)" : ""),
    el(
      "dl",
      { class: "facts" },
      el("dt", {}, "Revision read at"), el("dd", { id: "key-mod" }, kv.mod_revision),
      el("dt", {}, "Created at"), el("dd", {}, kv.create_revision),
      el("dt", {}, "Version"), el("dd", {}, kv.version),
      el("dt", {}, "Lease"), el("dd", {}, leaseLabel(kv.lease)),
      el("dt", {}, "Size"), el("dd", {}, `${kv.value.length} bytes`),
    ),
    el("fieldset", { class: "row" }, el("legend", {}, "Show the value as"), formats),
    shown === null ? el("p", { class: "error" }, `The value is not ${keys.format === "json" ? "JSON" : "UTF-8 text"}; choose hex.`) : null,
    editor,
    el(
      "div",
      { class: "row" },
      el("button", { type: "button", id: "key-save", class: "writes", disabled: shown === null, onclick: () => saveKey(kv) }, "Save"),
      el("button", { type: "button", id: "key-delete", class: "writes danger", onclick: () => deleteKey(kv) }, "Delete"),
      el("button", { type: "button", id: "key-history-button", onclick: () => showHistory(kv.key, kv.mod_revision) }, "History"),
      el("button", { type: "button", onclick: () => openKey(kv.key) }, "Reload"),
    ),
    el("div", { id: "key-history" }),
  );
}

/** The editor's bytes in the format shown. */
export function editedValue() {
  const text = $("value-editor").value;
  if (keys.format === "hex") return fromHex(text);
  if (keys.format === "json") JSON.parse(text); // refuse JSON that does not parse
  return encoder.encode(text);
}

/** A transaction that writes only if the key is still as it was read. */
export async function compareAndSwap(kv, success) {
  const answer = await call("kv/txn", {
    compare: [{ key: toBase64(kv.key), target: "MOD", result: "EQUAL", mod_revision: kv.mod_revision }],
    success: [success],
  });
  return answer;
}

export async function conflict(kv, what) {
  const now = await range(kv.key);
  const current = (now.kvs || [])[0];
  const where = current ? `it is now at revision ${current.mod_revision}` : "it has been deleted";
  notice(`Conflict: the key changed after you read it at revision ${kv.mod_revision} (${where}); nothing was ${what}. Reload to see it.`, "error conflict");
}

export async function saveKey(kv) {
  let value;
  try {
    value = editedValue();
  } catch (error) {
    notice(`Not saved: ${error.message}`, "error");
    return;
  }
  try {
    const put = { request_put: { key: toBase64(kv.key), value: toBase64(value), lease: kv.lease !== "0" ? kv.lease : undefined } };
    const answer = await compareAndSwap(kv, put);
    if (!answer.succeeded) return await conflict(kv, "saved");
    notice(`Saved at revision ${answer.header.revision}.`, "ok");
    await openKey(kv.key);
    // The redraw took the focus with the old buttons: give it to the key, not the page.
    $("key-name")?.focus();
  } catch (error) {
    notice(error.message, "error");
  }
}

export async function deleteKey(kv) {
  if (!confirm(`Delete ${display(kv.key).text}?`)) return;
  try {
    const answer = await compareAndSwap(kv, { request_delete_range: { key: toBase64(kv.key) } });
    if (!answer.succeeded) return await conflict(kv, "deleted");
    notice(`Deleted at revision ${answer.header.revision}.`, "ok");
    fill($("key-detail"), el("p", { class: "muted" }, "Deleted."));
    await showKeys(keys.prefix);
  } catch (error) {
    notice(error.message, "error");
  }
}

/** Earlier versions: each read at the revision before the one that replaced it. */
export async function showHistory(key, from) {
  const rows = [];
  let at = Number(from);
  let note = "";
  try {
    for (let i = 0; i < HISTORY_DEPTH && at > 0; i++) {
      const answer = await range(key, { revision: String(at) });
      const raw = (answer.kvs || [])[0];
      if (!raw) {
        note = `No earlier version: the key did not exist at revision ${at}.`;
        break;
      }
      const kv = kvOf(raw);
      const value = display(kv.value);
      rows.push(el("tr", {}, el("td", {}, kv.mod_revision), el("td", {}, kv.version), el("td", { class: value.binary ? "hex" : "" }, value.text)));
      at = Number(kv.mod_revision) - 1;
    }
    if (!note && rows.length === HISTORY_DEPTH) note = `The latest ${HISTORY_DEPTH} versions; read older ones with etcdctl get --rev.`;
  } catch (error) {
    note = /compacted/.test(error.message) ? `Older versions are compacted away (${error.message}).` : error.message;
  }
  fill($("key-history"), 
    el("h4", {}, "History"),
    el(
      "div",
      { class: "scroll" },
      el("table", {}, el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Revision"), el("th", { scope: "col" }, "Version"), el("th", { scope: "col" }, "Value"))), el("tbody", {}, rows)),
    ),
    note ? el("p", { class: "muted" }, note) : null,
  );
}

export function drawNewKey() {
  const key = el("input", { id: "new-key", required: true, autocomplete: "off", spellcheck: "false" });
  const value = el("textarea", { id: "new-value", rows: 6, spellcheck: "false" });
  const lease = el("input", { id: "new-lease", autocomplete: "off", placeholder: "none", spellcheck: "false" });
  fill($("key-detail"), 
    el(
      "form",
      {
        id: "new-key-form",
        onsubmit: async (event) => {
          event.preventDefault();
          await createKey(key.value, value.value, lease.value.trim());
        },
      },
      el("h3", {}, "New key"),
      el("label", { for: "new-key" }, "Key"),
      key,
      el("label", { for: "new-value" }, "Value"),
      value,
      el("label", { for: "new-lease" }, "Lease (a name, or an ID in hex; optional)"),
      lease,
      el("div", { class: "row" }, el("button", { type: "submit", id: "new-key-create" }, "Create")),
    ),
  );
  key.value = keys.prefix;
  key.focus();
}

export async function resolveLease(text) {
  if (!text) return undefined;
  if (/^[0-9a-f]{1,16}$/i.test(text)) {
    const id = BigInt.asIntN(64, BigInt(`0x${text}`)).toString();
    const ttl = await call("lease/timetolive", { ID: id });
    if (Number(ttl.TTL) >= 0) return id;
  }
  const named = await call("leasekv/resolvename", { name: text });
  if (!named.id || named.id === "0") throw new Error(`no lease named or numbered ${text}`);
  return named.id;
}

export async function createKey(keyText, valueText, leaseText) {
  if (!keyText) return notice("A key cannot be empty.", "error");
  try {
    const key = encoder.encode(keyText);
    const lease = await resolveLease(leaseText);
    const answer = await call("kv/txn", {
      compare: [{ key: toBase64(key), target: "CREATE", result: "EQUAL", create_revision: "0" }],
      success: [{ request_put: { key: toBase64(key), value: toBase64(encoder.encode(valueText)), lease } }],
    });
    if (!answer.succeeded) return notice(`Not created: ${keyText} exists already. Open it to change it.`, "error conflict");
    notice(`Created at revision ${answer.header.revision}.`, "ok");
    await showKeys(keys.prefix);
    await openKey(key);
  } catch (error) {
    notice(error.message, "error");
  }
}

