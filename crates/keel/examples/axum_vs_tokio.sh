#!/usr/bin/env bash
# The axum example on keel against the same app on tokio (`axum::serve`),
# both with 2 workers: wrk with 60 keep-alive connections, rounds
# interleaved with the order alternating (keel then tokio in odd rounds,
# tokio then keel in even ones, so neither always runs on a warmer or
# cooler host), requests/s and p99 of each.
#
#   bash crates/keel/examples/axum_vs_tokio.sh [ROUNDS] [SECONDS]
#
# Defaults: 3 rounds of 10 s. Needs wrk (apt-get install -y wrk). Loads
# only 127.0.0.1. Run it on a quiet machine: it measures.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-3}
seconds=${2:-10}
keel_addr=127.0.0.1:3900
tokio_addr=127.0.0.1:3901

cargo build --release --quiet -p keel --features hyper --example axum --example axum_tokio
target/release/examples/axum "$keel_addr" >/dev/null &
keel_pid=$!
target/release/examples/axum_tokio "$tokio_addr" >/dev/null &
tokio_pid=$!
trap 'kill -INT $keel_pid $tokio_pid 2>/dev/null || true' EXIT
for addr in $keel_addr $tokio_addr; do
    for _ in $(seq 100); do
        curl -sf "http://$addr/" >/dev/null && break
        sleep 0.1
    done
done

summary=""
for round in $(seq "$rounds"); do
    order="keel tokio"
    [ $((round % 2)) = 0 ] && order="tokio keel"
    for runtime in $order; do
        addr=$keel_addr
        [ "$runtime" = tokio ] && addr=$tokio_addr
        echo "== round $round, $runtime ($addr)"
        out=$(wrk -t2 -c60 -d"${seconds}s" --latency "http://$addr/")
        echo "$out"
        rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
        p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
        summary+=$(printf '%s %s %s %s' "$round" "$runtime" "$rps" "$p99")$'\n'
    done
done

echo
echo "round runtime requests/s p99"
printf '%s' "$summary"
median() {
    printf '%s' "$summary" | awk -v r="$1" '$2 == r {print $3}' | sort -n |
        sed -n "$(((rounds + 1) / 2))p"
}
keel_median=$(median keel)
tokio_median=$(median tokio)
echo "median requests/s: keel $keel_median, tokio $tokio_median"
awk -v k="$keel_median" -v t="$tokio_median" \
    'BEGIN { printf "keel/tokio requests/s (medians): %.3f\n", k / t }'
