// The console's end-to-end test: Playwright drives Debian's Chromium against a three-node
// leasekv cluster of real kvserver processes (and a single TLS node), which tests/integration/console.rs
// starts and describes in LEASEKV_CONSOLE_E2E (JSON):
//   { nodes: [{ url, id, pid }], tls_url, kvcli, etcdctl, chromium, screenshots }
// Every wait is bounded; a failure saves a screenshot of the page and exits non-zero.
import { chromium } from "playwright-core";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const config = JSON.parse(process.env.LEASEKV_CONSOLE_E2E);
mkdirSync(config.screenshots, { recursive: true });
const endpoints = config.nodes.map((n) => n.url.replace(/^http:\/\//, "")).join(",");
const started = [];

function log(text) {
  console.log(`[console e2e ${new Date().toISOString().slice(11, 23)}] ${text}`);
}

function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

function run(program, args, env = {}) {
  return execFileSync(program, args, { encoding: "utf8", timeout: 20000, env: { ...process.env, ...env } }).trim();
}

const kvcli = (...args) => run(config.kvcli, ["--endpoints", endpoints, ...args]);
const etcdctl = (args, env = {}) => run(config.etcdctl, ["--endpoints", endpoints, ...args], { ETCDCTL_API: "3", ...env });

/** A POST to a node's gateway from this script. */
async function gateway(url, path, body, token) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = token;
  const response = await fetch(`${url}/v3/${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

async function everyNodeHealthy(nodes) {
  for (const node of nodes) {
    const response = await fetch(`${node.url}/health`);
    const body = await response.json();
    assert(body.health === "true", `${node.url} healthy after bad input: ${JSON.stringify(body)}`);
  }
}

async function masterId(url) {
  for (let i = 0; i < 50; i++) {
    const { body } = await gateway(url, "maintenance/status", {});
    if (body.leader && body.leader !== "0") return BigInt(body.leader).toString(16);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("no master within 5 s");
}

const b64 = (bytes) => Buffer.from(bytes).toString("base64");

async function shot(page, name) {
  await page.screenshot({ path: join(config.screenshots, `${name}.png`), fullPage: true });
  log(`screenshot ${name}.png`);
}

const browser = await chromium.launch({
  executablePath: config.chromium,
  headless: true,
  // Without the background-networking flags, Chromium dials Google's hosts at every start,
  // and this machine's closed network refuses them.
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

let page;
let step = "start";
// Script errors in the page (an exception no handler caught) fail the run at the end.
const pageErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  context.setDefaultTimeout(10000);
  page = await context.newPage();
  page.on("dialog", (dialog) => dialog.accept());
  page.on("pageerror", (error) => pageErrors.push(error.message));

  // --- Overview: three members and the master, seen from a follower -------------------
  step = "overview";
  const master = await masterId(config.nodes[0].url);
  const follower = config.nodes.find((n) => n.id !== master);
  log(`master ${master}; the console is opened on ${follower.id} (${follower.url})`);
  await page.goto(`${follower.url}/ui/#/overview`);
  await page.locator("#ov-members tbody tr").nth(2).waitFor();
  assert((await page.locator("#ov-members tbody tr").count()) === 3, "three members");
  await page.locator(`#ov-members tr[data-member="${master}"] .master`).waitFor();
  assert((await page.locator("#ov-master").textContent()).includes(master), "the master named");
  assert((await page.locator("#ov-backend").textContent()) === "paxoslease", "the backend");
  await shot(page, "overview");

  // --- Services: a registration with a 3 s lease appears, counts down, expires ----------
  step = "services";
  await page.goto(`${follower.url}/ui/#/services`);
  await page.locator("#services-empty").waitFor();
  kvcli("put", "/servers/1", '{"addr":"10.0.0.7:80"}', "--lease", "server1", "--ttl", "3");
  kvcli("put", "/servers/2", '{"addr":"10.0.0.8:80"}', "--lease", "server2", "--ttl", "60");
  const row = page.locator('#services-table tr[data-key="/servers/1"]');
  await row.waitFor({ timeout: 3000 });
  assert((await row.textContent()).includes("server1"), "the lease's name shown");
  const first = parseInt(await row.locator("td.countdown").textContent(), 10);
  await page.waitForTimeout(1300);
  await shot(page, "services");
  const later = parseInt(await row.locator("td.countdown").textContent(), 10);
  assert(first >= 2 && later < first, `the countdown decreases (${first} s, then ${later} s)`);
  await row.waitFor({ state: "detached", timeout: 8000 });
  await page.locator("#services-feed li", { hasText: "/servers/1 expired" }).waitFor();
  await page.locator('#services-table tr[data-key="/servers/2"]').waitFor();
  await shot(page, "services-expired");

  // --- Keys: create, read back by etcdctl, a concurrent change is a conflict ------------
  step = "keys";
  await page.goto(`${follower.url}/ui/#/keys`);
  await page.locator("#key-new").click();
  await page.locator("#new-key").fill("/config/e2e");
  await page.locator("#new-value").fill('{"replicas":3}');
  await page.locator("#new-key-create").click();
  await page.locator("#notice", { hasText: "Created at revision" }).waitFor();
  assert(etcdctl(["get", "/config/e2e", "--print-value-only"]) === '{"replicas":3}', "etcdctl reads the console's key");
  await page.locator("#key-mod").waitFor();
  etcdctl(["put", "/config/e2e", '{"replicas":5}']);
  await page.locator("#value-editor").fill('{"replicas":7}');
  await page.locator("#key-save").click();
  await page.locator("#notice .conflict", { hasText: "Conflict" }).waitFor();
  assert(etcdctl(["get", "/config/e2e", "--print-value-only"]) === '{"replicas":5}', "the conflicting save wrote nothing");
  await shot(page, "keys-conflict");
  await page.getByRole("button", { name: "Reload" }).click();
  // The reload redraws the editor: wait for etcdctl's value before typing over it.
  await page.waitForFunction(() => document.getElementById("value-editor")?.value === '{"replicas":5}');
  await page.locator("#value-editor").fill('{"replicas":7}');
  await page.locator("#key-save").click();
  await page.locator("#notice", { hasText: "Saved at revision" }).waitFor();
  assert(etcdctl(["get", "/config/e2e", "--print-value-only"]) === '{"replicas":7}', "the save after a reload wrote");
  await page.locator('input[name="format"][value="json"]').check();
  assert((await page.locator("#value-editor").inputValue()).includes('"replicas": 7'), "pretty JSON");
  await page.locator("#key-history-button").click();
  await page.locator("#key-history tbody tr").nth(2).waitFor();
  await shot(page, "keys");

  // --- Bad input through the console never breaks a node --------------------------------
  step = "bad input";
  // A value over the request limit: etcd's error, nothing written.
  await page.locator('input[name="format"][value="text"]').check();
  await page.locator("#value-editor").fill("x".repeat(2 * 1024 * 1024));
  await page.locator("#key-save").click();
  await page.locator("#notice .error", { hasText: "too large" }).waitFor();
  // Non-UTF-8 keys and values are shown as hex.
  const binaryKey = Buffer.concat([Buffer.from("/bin/"), Buffer.from([0xff, 0xfe, 0x01])]);
  await gateway(config.nodes[0].url, "kv/put", { key: b64(binaryKey), value: b64([0xde, 0xad, 0xbe, 0xef, 0x00]) });
  await page.locator("#keys-prefix").fill("/bin/");
  await page.locator("#keys-form button[type=submit]").click();
  await page.locator("button.key", { hasText: "(hex)" }).click();
  await page.locator("#key-name", { hasText: "2f 62 69 6e 2f ff fe 01" }).waitFor();
  assert((await page.locator("#value-editor").inputValue()) === "de ad be ef 00", "the value as hex");
  await shot(page, "keys-binary");
  // Hex that is not hex is refused in the page.
  await page.locator("#value-editor").fill("zz");
  await page.locator("#key-save").click();
  await page.locator("#notice .error", { hasText: "not hex" }).waitFor();
  // A key deleted while it is open: the save is a conflict, the reload says it is gone.
  await page.locator("#keys-prefix").fill("/config/");
  await page.locator("#keys-form button[type=submit]").click();
  await page.locator('button.key[data-key="/config/e2e"]').click();
  await page.locator("#key-name", { hasText: "/config/e2e" }).waitFor();
  etcdctl(["del", "/config/e2e"]);
  await page.locator("#value-editor").fill("after the delete");
  await page.locator("#key-save").click();
  await page.locator("#notice .conflict", { hasText: "has been deleted" }).waitFor();
  await page.getByRole("button", { name: "Reload" }).click();
  await page.locator("#key-detail", { hasText: "does not exist" }).waitFor();
  assert(etcdctl(["get", "/config/e2e"]) === "", "nothing written after the delete");
  // A lease that expires while it is shown.
  kvcli("put", "/servers/short", "up", "--lease", "short-lived", "--ttl", "2");
  await page.goto(`${follower.url}/ui/#/leases`);
  const shortRow = page.locator("#leases-table tr", { hasText: "short-lived" });
  await shortRow.waitFor();
  await shot(page, "leases");
  // It stays listed, marked expired; asking for its keys or renewing it says so.
  await shortRow.locator("td.countdown", { hasText: "expired" }).waitFor({ timeout: 8000 });
  await page.locator("#leases-table tr.ended", { hasText: "short-lived" }).waitFor();
  await shortRow.getByRole("button", { name: "Keys" }).click();
  await page.locator("#lease-detail", { hasText: "has expired" }).waitFor();
  await shortRow.getByRole("button", { name: "Keep alive once" }).click();
  await page.locator("#notice .error", { hasText: "not renewed" }).waitFor();
  await shot(page, "leases-expired");
  await everyNodeHealthy(config.nodes);

  // --- Locks and elections --------------------------------------------------------------
  step = "locks";
  const holder = spawn(config.kvcli, ["--endpoints", endpoints, "lock", "deploy", "--", "sleep", "20"], { stdio: "ignore" });
  started.push(holder);
  await page.waitForTimeout(700);
  const waiter = spawn(config.kvcli, ["--endpoints", endpoints, "lock", "deploy", "--", "true"], { stdio: "ignore" });
  started.push(waiter);
  const leader = spawn(config.etcdctl, ["--endpoints", endpoints, "elect", "scheduler", "node-a"], {
    stdio: "ignore",
    env: { ...process.env, ETCDCTL_API: "3" },
  });
  started.push(leader);
  await page.waitForTimeout(1000);
  await page.goto(`${follower.url}/ui/#/locks`);
  const lock = page.locator('article[data-lock="deploy"]');
  await lock.waitFor();
  assert(/\d+/.test(await lock.locator(".token").textContent()), "a fencing token");
  await lock.locator("ol.waiters li").first().waitFor();
  await page.locator('article[data-lock="scheduler"]', { hasText: "node-a" }).waitFor();
  await shot(page, "locks");
  for (const child of started.splice(0)) child.kill("SIGKILL");

  // --- Auth: a login, and a read-only user who cannot delete ------------------------------
  step = "auth";
  kvcli("put", "/config/shared", "v1");
  etcdctl(["user", "add", "root:rootpw"]);
  etcdctl(["role", "add", "reader"]);
  etcdctl(["role", "grant-permission", "reader", "read", "/", "--prefix=true"]);
  etcdctl(["user", "add", "viewer:viewerpw"]);
  etcdctl(["user", "grant-role", "viewer", "reader"]);
  etcdctl(["auth", "enable"]);
  const authed = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  authed.setDefaultTimeout(10000);
  const viewer = await authed.newPage();
  viewer.on("dialog", (dialog) => dialog.accept());
  viewer.on("pageerror", (error) => pageErrors.push(error.message));
  await viewer.goto(`${follower.url}/ui/#/keys`);
  await viewer.locator("#login[open]").waitFor();
  await viewer.locator("#login-user").fill("viewer");
  await viewer.locator("#login-password").fill("wrong");
  await viewer.locator("#login-submit").click();
  await viewer.locator("#login-error", { hasText: "authentication failed" }).waitFor();
  await shot(viewer, "login");
  await viewer.locator("#login-password").fill("viewerpw");
  await viewer.locator("#login-submit").click();
  await viewer.locator("#user-label", { hasText: "viewer" }).waitFor();
  await viewer.locator("#keys-prefix").fill("/config/");
  await viewer.locator("#keys-form button[type=submit]").click();
  await viewer.locator('button.key[data-key="/config/shared"]').click();
  await viewer.locator("#key-delete").click();
  await viewer.locator("#notice .error", { hasText: "permission denied" }).waitFor();
  await shot(viewer, "auth-denied");
  assert(
    etcdctl(["--user", "root:rootpw", "get", "/config/shared", "--print-value-only"]) === "v1",
    "the key is still there",
  );

  // --- Failover: kill -9 the master, the console on a follower shows the new one ----------
  step = "failover";
  await page.goto(`${follower.url}/ui/#/overview`);
  await page.locator(`#ov-members tr[data-member="${master}"] .master`).waitFor();
  const victim = config.nodes.find((n) => n.id === master);
  const killedAt = Date.now();
  process.kill(victim.pid, "SIGKILL");
  await page.waitForFunction(
    (old) => {
      const text = document.getElementById("ov-master").textContent;
      return !text.includes(old) && !text.startsWith("none");
    },
    master,
    { timeout: 3000, polling: 50 },
  );
  const took = Date.now() - killedAt;
  log(`the console showed the new master ${took} ms after kill -9 of ${master}`);
  assert(took <= 3000, `new master within 3 s (took ${took} ms)`);
  await shot(page, "overview-failover");

  // --- TLS: the console on a node whose client port serves TLS ------------------------------
  step = "tls";
  const secure = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 860 } });
  secure.setDefaultTimeout(10000);
  const tls = await secure.newPage();
  tls.on("pageerror", (error) => pageErrors.push(error.message));
  await tls.goto(`${config.tls_url}/ui/#/keys`);
  await tls.locator("#key-new").waitFor();
  await tls.locator("#key-new").click();
  await tls.locator("#new-key").fill("/tls/ok");
  await tls.locator("#new-value").fill("over TLS");
  await tls.locator("#new-key-create").click();
  await tls.locator("#notice", { hasText: "Created at revision" }).waitFor();
  await tls.goto(`${config.tls_url}/ui/#/overview`);
  await tls.locator("#ov-members tbody tr .master").waitFor();
  await shot(tls, "tls-overview");

  step = "page errors";
  assert(pageErrors.length === 0, `uncaught errors in the page: ${pageErrors.join("; ")}`);
  log("all console checks passed");
  await browser.close();
  process.exit(0);
} catch (error) {
  log(`FAILED in step "${step}": ${error.stack || error}`);
  if (page) await page.screenshot({ path: join(config.screenshots, `failure-${step.replace(/\s/g, "-")}.png`), fullPage: true }).catch(() => {});
  for (const child of started) child.kill("SIGKILL");
  await browser.close();
  process.exit(1);
}
