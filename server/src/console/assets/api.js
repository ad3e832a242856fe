// etcd's HTTP/JSON gateway as this node serves it to the console (/ui/api/v3), and signing in.

import { fromBase64, toBase64 } from "./bytes.js";
import { $ } from "./dom.js";

// The gateway. Errors come back as etcd's body, {"error", "code", "message"}; they are
// shown as etcd wrote them.

export class EtcdError extends Error {
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

export const session = {
  token: sessionStorage.getItem("leasekv.token"),
  user: sessionStorage.getItem("leasekv.user"),
  info: { mode: "on", node_id: "", auth_enabled: false },
};

export function headers() {
  const h = { "content-type": "application/json" };
  if (session.token) h.authorization = session.token;
  return h;
}

/** etcd's message, and why, when the node said so beside it (a LocalizedMessage detail:
 *  the limit that was passed, the setting to raise). */
export function explained(message, details) {
  const why = (details || []).find((d) => String(d["@type"]).endsWith("google.rpc.LocalizedMessage"));
  return why && why.message ? `${message} (${why.message})` : message;
}

export async function failure(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    /* not JSON: use the status */
  }
  const message = (typeof body.error === "string" ? body.error : body.message) || `HTTP ${response.status}`;
  return new EtcdError(explained(message, body.details), body.code, response.status);
}

/** One gateway call; retried once after a sign-in when the token is missing or stale. */
export async function call(path, body = {}, retried = false) {
  const response = await fetch(`/ui/api/v3/${path}`, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (response.ok) return response.json();
  const error = await failure(response);
  if (error.needsLogin && !retried && session.info.auth_enabled) {
    await login(error.message);
    return call(path, body, true);
  }
  throw error;
}

/** A streaming call (watch, keepalive, the overview): `each` gets every answer until the
 *  stream ends or `signal` aborts. `idleMs`: give up (an AbortError) when nothing arrives for
 *  that long, for a stream whose node sends something at least that often: a connection that
 *  died without a reset. */
export async function stream(url, init, each, signal, { idleMs = 0, retried = false } = {}) {
  const own = new AbortController();
  const stop = () => own.abort();
  if (signal) {
    if (signal.aborted) stop();
    signal.addEventListener("abort", stop);
  }
  let idle = null;
  const awake = () => {
    if (!idleMs) return;
    clearTimeout(idle);
    idle = setTimeout(stop, idleMs);
  };
  let reader = null;
  try {
    awake();
    const response = await fetch(url, { ...init, headers: headers(), signal: own.signal });
    if (!response.ok) {
      const error = await failure(response);
      if (error.needsLogin && !retried && session.info.auth_enabled) {
        await login(error.message);
        return stream(url, init, each, signal, { idleMs, retried: true });
      }
      throw error;
    }
    reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      awake();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0 || (done && buffer.trim())) {
        const end = newline >= 0 ? newline : buffer.length;
        const line = buffer.slice(0, end).trim();
        buffer = buffer.slice(end + 1);
        if (line) await each(JSON.parse(line));
      }
      if (done) return;
    }
  } finally {
    clearTimeout(idle);
    if (signal) signal.removeEventListener("abort", stop);
    // A handler that threw, or an abort, must not leave the stream (a watch) open.
    if (reader) reader.cancel().catch(() => {});
  }
}

export async function range(key, options = {}) {
  const body = { key: toBase64(key), ...options };
  if (options.range_end) body.range_end = toBase64(options.range_end);
  return call("kv/range", body);
}

export function kvOf(raw) {
  return {
    key: fromBase64(raw.key),
    value: fromBase64(raw.value),
    create_revision: raw.create_revision || "0",
    mod_revision: raw.mod_revision || "0",
    version: raw.version || "0",
    lease: raw.lease || "0",
  };
}

// Signing in (only when auth is on).

let loginPending = null;

export function login(reason) {
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

export function showUser() {
  $("user-label").textContent = session.user ? `signed in as ${session.user}` : "";
  $("logout").hidden = !session.token;
}

export function logout() {
  session.token = null;
  session.user = null;
  sessionStorage.removeItem("leasekv.token");
  sessionStorage.removeItem("leasekv.user");
  showUser();
  if (session.info.auth_enabled) login();
}

export const readOnly = () => session.info.mode === "read-only";

