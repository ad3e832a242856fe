"""etcd3gw, OpenStack's etcd client for etcd's HTTP/JSON gateway, used unchanged against a
leasekv cluster: keys, transactions, leases, locks, watch, status and members.

Run by tests/integration/gateway.rs with the cluster's client endpoints (host:port, comma-separated);
prints what failed and exits 1 on the first failure, prints "etcd3gw: ok" on success.
"""
import sys
import threading
import time

import etcd3gw


def check(condition, what):
    if not condition:
        print(f"etcd3gw: FAILED: {what}", flush=True)
        sys.exit(1)


def client(endpoint):
    host, port = endpoint.rsplit(":", 1)
    return etcd3gw.client(host=host, port=int(port), timeout=10)


def main():
    endpoints = sys.argv[1].split(",")
    a, b, c = (client(e) for e in endpoints[:3])

    # API discovery from /version picks the /v3/ prefix.
    check(a.api_path == "/v3/", f"api path {a.api_path!r}")

    # Keys, written on one node and read on another.
    check(a.put("/svc/1", "one"), "put")
    check(b.get("/svc/1") == [b"one"], f"get on another node: {b.get('/svc/1')!r}")
    check(a.put("/svc/2", "two"), "second put")
    prefix = sorted(v for v, _ in c.get_prefix("/svc/"))
    check(prefix == [b"one", b"two"], f"get_prefix: {prefix!r}")
    check(c.get("/missing") == [], "get of a missing key")

    # Transactions: create only if absent, replace only if equal.
    check(a.create("/created", "x"), "create of an absent key")
    check(not b.create("/created", "y"), "create of a present key must fail")
    check(a.replace("/created", "x", "z"), "replace with the right old value")
    check(not a.replace("/created", "x", "w"), "replace with a wrong old value must fail")
    check(c.get("/created") == [b"z"], "value after replace")
    check(a.delete("/created"), "delete")
    check(not a.delete("/created"), "second delete reports nothing deleted")
    check(a.delete_prefix("/svc/"), "delete_prefix")

    # Leases: grant, attach, time-to-live, keepalive, keys, revoke.
    lease = a.lease(ttl=30)
    check(lease.id > 0, f"lease id {lease.id}")
    check(b.put("/leased", "v", lease=lease), "put with a lease")
    ttl = lease.ttl()
    check(0 < ttl <= 30, f"lease ttl {ttl}")
    check(lease.refresh() == 30, "keepalive renews to the granted TTL")
    check(lease.keys() == [b"/leased"], f"lease keys {lease.keys()!r}")
    check(lease.revoke(), "revoke")
    check(c.get("/leased") == [], "a revoked lease's key is gone")

    # A short lease expires by itself and takes its key along.
    short = b.lease(ttl=2)
    a.put("/expiring", "v", lease=short)
    deadline = time.time() + 15
    while c.get("/expiring") and time.time() < deadline:
        time.sleep(0.2)
    check(c.get("/expiring") == [], "a key of an expired lease is deleted")

    # Locks (on leases; a second holder waits).
    lock = a.lock("gw-lock", ttl=10)
    check(lock.acquire(), "lock acquire")
    check(lock.is_acquired(), "lock is held")
    check(lock.release(), "lock release")

    # Watch on one node, writes on another.
    seen = []
    got_all = threading.Event()

    def on_event(event):
        seen.append((event.get("type", "PUT"), event["kv"]["key"], event["kv"].get("value")))
        if len(seen) >= 3:
            got_all.set()

    watcher_events, cancel = b.watch_prefix("/w/")
    collector = threading.Thread(
        target=lambda: [on_event(e) for e in watcher_events], daemon=True
    )
    collector.start()
    time.sleep(0.5)
    c.put("/w/1", "a")
    c.put("/w/1", "b")
    a.delete("/w/1")
    got_all.wait(10)
    cancel()
    check(
        seen[:3] == [("PUT", b"/w/1", b"a"), ("PUT", b"/w/1", b"b"), ("DELETE", b"/w/1", None)],
        f"watched events {seen!r}",
    )

    # Status and members.
    status = a.status()
    check(status["leader"] != "0", f"status leader {status.get('leader')!r}")
    members = a.members()
    check(len(members) == 3, f"{len(members)} members")
    check(all(m.get("clientURLs") for m in members), f"members {members!r}")

    print("etcd3gw: ok", flush=True)


if __name__ == "__main__":
    main()
