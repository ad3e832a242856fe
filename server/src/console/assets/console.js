// leasekv's console: one page over etcd's HTTP/JSON gateway (served by this node under
// /ui/api/v3), plus the node's overview stream (/ui/api/overview). No framework and no build
// step: the views are drawn with the DOM's own calls, and every text a user or a key brings
// goes in as text (textContent), never as markup.
"use strict";

// ---------------------------------------------------------------------------------------
// Bytes, base64 and text: keys and values are bytes; the gateway carries them as base64.

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

function toBase64(bytes) {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

function fromBase64(text) {
  if (!text) return new Uint8Array(0);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** The bytes as text when they are UTF-8, else null. */
function asText(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

/** Hex as typed by a user (spaces and newlines allowed); throws on anything else. */
function fromHex(text) {
  const digits = text.replace(/\s+/g, "");
  if (digits.length % 2 !== 0 || /[^0-9a-fA-F]/.test(digits)) {
    throw new Error("not hex: write pairs of hex digits (0-9, a-f), spaces allowed");
  }
  const bytes = new Uint8Array(digits.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(digits.substr(i * 2, 2), 16);
  return bytes;
}

/** A key or value for display: its text, or its hex marked as such. */
function display(bytes) {
  const text = asText(bytes);
  return text === null ? { text: toHex(bytes), binary: true } : { text, binary: false };
}

/** The end of the range of every key that starts with `prefix` (etcd's prefix rule). */
function prefixEnd(prefix) {
  const end = Uint8Array.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i] < 0xff) {
      end[i] += 1;
      return end.slice(0, i + 1);
    }
  }
  return new Uint8Array([0]);
}

function leaseHex(id) {
  return id && id !== "0" ? BigInt(id).toString(16) : "";
}

function formatBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

function clock(date = new Date()) {
  return date.toLocaleTimeString([], { hour12: false });
}

// ---------------------------------------------------------------------------------------
// Drawing: elements built with the DOM's calls; strings become text nodes.

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const $ = (id) => document.getElementById(id);

/** Replaces `node`'s children, leaving out the absent ones (null, undefined, false). */
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function notice(text, kind = "info") {
  const box = $("notice");
  box.replaceChildren(el("p", { class: kind }, text));
  if (kind !== "error") setTimeout(() => box.firstChild && box.firstChild.textContent === text && box.replaceChildren(), 6000);
}

// ---------------------------------------------------------------------------------------
// The gateway. Errors come back as etcd's body, {"error", "code", "message"}; they are
// shown as etcd wrote them.

class EtcdError extends Error {
  constructor(message, code, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
  /** The token is missing, expired or refused: sign in (again). */
  get needsLogin() {
    return (
      this.code === 16 ||
      /user name is empty|invalid auth token|authentication failed|token.*(expired|invalid)/i.test(this.message)
    );
  }
}

const session = {
  token: sessionStorage.getItem("leasekv.token"),
  user: sessionStorage.getItem("leasekv.user"),
  info: { mode: "on", node_id: "", auth_enabled: false },
};

function headers() {
  const h = { "content-type": "application/json" };
  if (session.token) h.authorization = session.token;
  return h;
}

async function failure(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    /* not JSON: use the status */
  }
  const message = (typeof body.error === "string" ? body.error : body.message) || `HTTP ${response.status}`;
  return new EtcdError(message, body.code, response.status);
}

/** One gateway call; retried once after a sign-in when the token is missing or stale. */
async function call(path, body = {}, retried = false) {
  const response = await fetch(`/ui/api/v3/${path}`, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (response.ok) return response.json();
  const error = await failure(response);
  if (error.needsLogin && !retried && session.info.auth_enabled) {
    await login(error.message);
    return call(path, body, true);
  }
  throw error;
}

/** A streaming call (watch, keepalive): calls `each` with every answer until it ends or `signal` aborts. */
async function stream(url, init, each, signal) {
  const response = await fetch(url, { ...init, signal });
  if (!response.ok) throw await failure(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line) await each(JSON.parse(line));
    }
  }
}

async function range(key, options = {}) {
  const body = { key: toBase64(key), ...options };
  if (options.range_end) body.range_end = toBase64(options.range_end);
  return call("kv/range", body);
}

function kvOf(raw) {
  return {
    key: fromBase64(raw.key),
    value: fromBase64(raw.value),
    create_revision: raw.create_revision || "0",
    mod_revision: raw.mod_revision || "0",
    version: raw.version || "0",
    lease: raw.lease || "0",
  };
}

// ---------------------------------------------------------------------------------------
// Signing in (only when auth is on).

let loginPending = null;

function login(reason) {
  if (loginPending) return loginPending;
  loginPending = new Promise((resolve) => {
    const dialog = $("login");
    $("login-error").textContent = reason && session.token ? reason : "";
    const form = $("login-form");
    const submit = async (event) => {
      event.preventDefault();
      const name = $("login-user").value;
      const password = $("login-password").value;
      try {
        const response = await fetch("/ui/api/v3/auth/authenticate", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ name, password }),
        });
        if (!response.ok) throw await failure(response);
        const answer = await response.json();
        session.token = answer.token;
        session.user = name;
        sessionStorage.setItem("leasekv.token", answer.token);
        sessionStorage.setItem("leasekv.user", name);
        form.removeEventListener("submit", submit);
        $("login-password").value = "";
        dialog.close();
        showUser();
        loginPending = null;
        resolve();
      } catch (error) {
        $("login-error").textContent = error.message;
      }
    };
    form.addEventListener("submit", submit);
    // Escape would close it with the promise unanswered: the page needs a user.
    dialog.addEventListener("cancel", (event) => event.preventDefault());
    if (!dialog.open) dialog.showModal();
    $("login-user").focus();
  });
  return loginPending;
}

function showUser() {
  $("user-label").textContent = session.user ? `signed in as ${session.user}` : "";
  $("logout").hidden = !session.token;
}

function logout() {
  session.token = null;
  session.user = null;
  sessionStorage.removeItem("leasekv.token");
  sessionStorage.removeItem("leasekv.user");
  showUser();
  if (session.info.auth_enabled) login();
}

const readOnly = () => session.info.mode === "read-only";

// ---------------------------------------------------------------------------------------
// Overview: the node's stream, redrawn on every change.

const overview = { last: null, members: new Map() };

function memberName(id) {
  const member = overview.members.get(id);
  return member && member.name ? `${member.name} (${id})` : id;
}

function drawOverview(o) {
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

async function followOverview() {
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

// ---------------------------------------------------------------------------------------
// Leases by name, shared by the services and leases views: remaining time counted down
// in the page between refreshes.

const leases = { byId: new Map(), fetchedAt: 0 };

async function refreshLeases() {
  const answer = await call("leasekv/listleases");
  const now = performance.now();
  leases.byId = new Map(
    (answer.leases || []).map((l) => [
      l.id,
      { id: l.id, name: l.name || "", granted: Number(l.granted_ttl || 0), deadline: now + Number(l.remaining_ttl_ms || 0) },
    ]),
  );
  leases.fetchedAt = now;
}

/** Whether the lease still exists (a key deleted with its lease gone has expired). */
async function leaseAlive(id) {
  try {
    const answer = await call("lease/timetolive", { ID: id });
    return Number(answer.TTL) > 0;
  } catch {
    return false;
  }
}

function remaining(lease) {
  return Math.max(0, (lease.deadline - performance.now()) / 1000);
}

function countdownText(lease) {
  if (!lease) return "expired";
  const left = remaining(lease);
  return left > 0 ? `${Math.ceil(left)} s` : "expiring…";
}

function leaseLabel(id) {
  if (!id || id === "0") return "none";
  const lease = leases.byId.get(id);
  return lease && lease.name ? `${lease.name} (${leaseHex(id)})` : leaseHex(id);
}

// ---------------------------------------------------------------------------------------
// Services: registrations under a prefix, their leases counting down, a live feed.

const services = { rows: new Map(), abort: null, prefix: "/servers/" };

function serviceRow(kv) {
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

function drawServices() {
  const rows = [...services.rows.values()].sort((a, b) => (display(a.key).text < display(b.key).text ? -1 : 1));
  $("services-table").tBodies[0].replaceChildren(...rows.map(serviceRow));
  $("services-empty").hidden = rows.length > 0;
}

function feed(list, text, kind) {
  list.prepend(el("li", { class: kind }, el("time", {}, clock()), " ", text));
  while (list.children.length > 50) list.lastChild.remove();
}

async function showServices(prefix) {
  if (services.abort) services.abort.abort();
  services.prefix = prefix;
  services.rows.clear();
  const key = encoder.encode(prefix);
  const end = prefixEnd(key);
  try {
    await refreshLeases();
    const answer = await range(key, { range_end: end, limit: 1000 });
    for (const raw of answer.kvs || []) {
      const kv = kvOf(raw);
      services.rows.set(toBase64(kv.key), kv);
    }
    drawServices();
    const start = Number(answer.header.revision) + 1;
    const abort = new AbortController();
    services.abort = abort;
    watchServices(key, end, start, abort);
  } catch (error) {
    notice(error.message, "error");
  }
}

async function watchServices(key, end, start, abort) {
  const body = { create_request: { key: toBase64(key), range_end: toBase64(end), start_revision: String(start), prev_kv: true } };
  try {
    await stream(
      "/ui/api/v3/watch",
      { method: "POST", headers: headers(), body: JSON.stringify(body) },
      async (line) => {
        if (line.error) throw new EtcdError(line.error.message, line.error.grpc_code);
        const result = line.result || {};
        if (result.cancel_reason) notice(`watch cancelled: ${result.cancel_reason}`, "error");
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
    if (error.name !== "AbortError") notice(`watch ended: ${error.message}`, "error");
  }
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

// ---------------------------------------------------------------------------------------
// Keys: a tree by '/', a key's value as text, JSON or hex; create, update and delete
// against the revision the key was read at; its history.

const keys = { prefix: "/", open: null, format: "text" };

function treeOf(list) {
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

function drawTree(node, path = "") {
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

async function showKeys(prefix) {
  keys.prefix = prefix;
  try {
    const key = encoder.encode(prefix);
    const answer = await range(key, { range_end: prefixEnd(key), keys_only: true, limit: 2000 });
    const list = (answer.kvs || []).map(kvOf);
    const tree = $("keys-tree");
    tree.replaceChildren(list.length ? drawTree(treeOf(list)) : el("p", { class: "muted" }, "No keys under this prefix."));
    if (answer.more) tree.append(el("p", { class: "muted" }, `The first ${list.length} keys of ${answer.count}; narrow the prefix.`));
  } catch (error) {
    notice(error.message, "error");
  }
}

function valueText(bytes, format) {
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

async function openKey(key) {
  try {
    const answer = await range(key);
    const raw = (answer.kvs || [])[0];
    if (!raw) {
      drawMissingKey(key, answer.header.revision);
      return;
    }
    const kv = kvOf(raw);
    // Each key opens in the format that shows it: hex for bytes that are not text.
    if (asText(kv.value) === null) keys.format = "hex";
    else if (keys.format === "hex" || keys.open === null || !keys.open.key.every((b, i) => b === kv.key[i])) keys.format = "text";
    keys.open = kv;
    drawKey(kv);
  } catch (error) {
    notice(error.message, "error");
  }
}

function drawMissingKey(key, revision) {
  keys.open = null;
  fill($("key-detail"), 
    el("h3", {}, display(key).text),
    el("p", { class: "error" }, `This key does not exist at revision ${revision} (it was deleted, or its lease expired).`),
    el("button", { type: "button", onclick: () => showHistory(key, String(Number(revision))) }, "History"),
    el("div", { id: "key-history" }),
  );
}

function drawKey(kv) {
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
    el("h3", { id: "key-name" }, name.text, name.binary ? " (hex)" : ""),
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
function editedValue() {
  const text = $("value-editor").value;
  if (keys.format === "hex") return fromHex(text);
  if (keys.format === "json") JSON.parse(text); // refuse JSON that does not parse
  return encoder.encode(text);
}

/** A transaction that writes only if the key is still as it was read. */
async function compareAndSwap(kv, success) {
  const answer = await call("kv/txn", {
    compare: [{ key: toBase64(kv.key), target: "MOD", result: "EQUAL", mod_revision: kv.mod_revision }],
    success: [success],
  });
  return answer;
}

async function conflict(kv, what) {
  const now = await range(kv.key);
  const current = (now.kvs || [])[0];
  const where = current ? `it is now at revision ${current.mod_revision}` : "it has been deleted";
  notice(`Conflict: the key changed after you read it at revision ${kv.mod_revision} (${where}); nothing was ${what}. Reload to see it.`, "error conflict");
}

async function saveKey(kv) {
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
    if (!answer.succeeded) return conflict(kv, "saved");
    notice(`Saved at revision ${answer.header.revision}.`, "ok");
    await openKey(kv.key);
  } catch (error) {
    notice(error.message, "error");
  }
}

async function deleteKey(kv) {
  if (!confirm(`Delete ${display(kv.key).text}?`)) return;
  try {
    const answer = await compareAndSwap(kv, { request_delete_range: { key: toBase64(kv.key) } });
    if (!answer.succeeded) return conflict(kv, "deleted");
    notice(`Deleted at revision ${answer.header.revision}.`, "ok");
    fill($("key-detail"), el("p", { class: "muted" }, "Deleted."));
    await showKeys(keys.prefix);
  } catch (error) {
    notice(error.message, "error");
  }
}

/** Earlier versions: each read at the revision before the one that replaced it. */
async function showHistory(key, from) {
  const rows = [];
  let at = Number(from);
  let note = "";
  try {
    for (let i = 0; i < 20 && at > 0; i++) {
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

function drawNewKey() {
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

async function resolveLease(text) {
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

async function createKey(keyText, valueText, leaseText) {
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

// ---------------------------------------------------------------------------------------
// Leases: every lease by id and name, its keys, revoke and keep alive once.

function drawLeases() {
  const list = [...leases.byId.values()].sort((a, b) => (a.name + a.id < b.name + b.id ? -1 : 1));
  $("leases-table").tBodies[0].replaceChildren(
    ...list.map((l) =>
      el(
        "tr",
        { "data-lease-row": l.id },
        el("td", {}, el("code", {}, leaseHex(l.id))),
        el("td", {}, l.name || "–"),
        el("td", {}, `${l.granted} s`),
        el("td", { class: "countdown", "data-lease": l.id }, countdownText(l)),
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

async function showLeases() {
  try {
    await refreshLeases();
    drawLeases();
  } catch (error) {
    notice(error.message, "error");
  }
}

async function showLeaseKeys(id) {
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

async function keepAliveOnce(id) {
  const abort = new AbortController();
  try {
    let renewed = null;
    await stream(
      "/ui/api/v3/lease/keepalive",
      { method: "POST", headers: headers(), body: JSON.stringify({ ID: id }) },
      (line) => {
        if (line.error) throw new EtcdError(line.error.message, line.error.grpc_code);
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

async function revokeLease(lease) {
  if (!confirm(`Revoke lease ${leaseLabel(lease.id)}? Its keys are deleted.`)) return;
  try {
    await call("lease/revoke", { ID: lease.id });
    notice(`Lease ${leaseHex(lease.id)} revoked.`, "ok");
    await showLeases();
  } catch (error) {
    notice(error.message, "error");
  }
}

// ---------------------------------------------------------------------------------------
// Locks and elections: keys NAME/LEASE-ID held by that lease (etcd's concurrency package);
// the oldest holds, its create revision is the fencing token.

async function showLocks(prefix) {
  try {
    // Every key: from "\0" on (etcd refuses an empty key).
    const key = prefix ? encoder.encode(prefix) : new Uint8Array([0]);
    const answer = await range(key, { range_end: prefix ? prefixEnd(key) : new Uint8Array([0]), keys_only: true, limit: 10000 });
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
    for (const [name, entries] of [...groups.entries()].sort()) {
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
    if (answer.more) box.append(el("p", { class: "muted" }, "Only the first 10000 keys were scanned; narrow the prefix."));
  } catch (error) {
    notice(error.message, "error");
  }
}

// ---------------------------------------------------------------------------------------
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
