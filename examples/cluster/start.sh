#!/usr/bin/env bash
# Starts the three-node example cluster (examples/cluster/n1.toml … n3.toml) from the
# repository root, in the foreground; Ctrl-C sends SIGTERM to all three (each master
# releases its lease on the way out). Data goes to ./leasekv-data/n1 … n3.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin kvserver --bin kvcli
pids=()
stop() {
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait
}
trap stop INT TERM
for n in 1 2 3; do
    "${CARGO_TARGET_DIR:-target}/release/kvserver" --config "examples/cluster/n$n.toml" &
    pids+=($!)
done
echo "cluster up: clients on 127.0.0.1:12379, 127.0.0.1:22379, 127.0.0.1:32379 (Ctrl-C stops it)" >&2
wait
