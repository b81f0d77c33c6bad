#!/usr/bin/env bash
# tokio-console against a keel program, as a user runs it: builds the
# `admin` example with console-subscriber (`--cfg
# console_without_tokio_unstable`, in target/console so the usual build is
# untouched), starts it, opens the real `tokio-console` in a detached tmux
# session, and prints what the console's task list shows after SECONDS;
# with `detail`, it then opens the first task's details and prints that
# screen too.
#
#   bash crates/keel/examples/console.sh [SECONDS] [detail]
#
# Defaults: 6 s. Needs tmux and tokio-console (apt-get install -y tmux;
# cargo install --locked tokio-console). Listens on 127.0.0.1 only: the
# admin endpoint on a free port, the console on 6669 (TOKIO_CONSOLE_BIND
# overrides it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds=${1:-6}
detail=${2:-}

for tool in tmux tokio-console; do
    if ! command -v "$tool" >/dev/null; then
        echo "needs $tool: apt-get install -y tmux; cargo install --locked tokio-console" >&2
        exit 1
    fi
done
export RUSTFLAGS="--cfg console_without_tokio_unstable"
export CARGO_TARGET_DIR=target/console
cargo build --quiet -p keel --example admin --features admin
bind=${TOKIO_CONSOLE_BIND:-127.0.0.1:6669}
session=keel-console-$$
log=$(mktemp)
TOKIO_CONSOLE_BIND=$bind "$CARGO_TARGET_DIR/debug/examples/admin" 127.0.0.1:0 $((seconds + 30)) >"$log" 2>&1 &
program=$!
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    kill "$program" 2>/dev/null || true
    rm -f "$log"
}
trap cleanup EXIT
# The program prints its admin address once the runtime is up.
for _ in $(seq 100); do
    grep -q "admin endpoint" "$log" && break
    sleep 0.1
done
head -1 "$log"
tmux new-session -d -s "$session" -x 200 -y 40 "tokio-console http://$bind"
sleep "$seconds"
echo "--- tokio-console, task list ($(date -u +%H:%M:%S) UTC) ---"
tmux capture-pane -p -t "$session"
if [ "$detail" = detail ]; then
    # Select the first task and open its details.
    tmux send-keys -t "$session" Down Enter
    sleep 3
    echo "--- tokio-console, task details ---"
    tmux capture-pane -p -t "$session"
fi
