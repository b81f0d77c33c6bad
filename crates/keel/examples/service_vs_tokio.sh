#!/usr/bin/env bash
# The `service` example on keel against its tokio twin (`service_tokio`),
# both with 2 workers, on one throwaway PostgreSQL cluster: wrk with 60
# keep-alive connections on GET PATH (default /api/7: a query, an HTTP
# call and a gRPC call per request; /users/7 is the query alone), rounds interleaved with the order alternating, and
# during each round a paced probe of the admin endpoint's /health (one
# GET every 10 ms on one keep-alive connection). Prints requests/s and
# p99 of each round, the probe's p50 and p99, the service's CPU a request
# (its threads' user and system time over the round, in µs) and the
# host's idle share over the round, and the medians.
#
#   bash crates/keel/examples/service_vs_tokio.sh [ROUNDS] [SECONDS] [PATH]
#
# Defaults: 5 rounds of 10 s. Needs wrk and PostgreSQL (apt-get install
# -y wrk postgresql). Loads only 127.0.0.1. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
seconds=${2:-10}
path=${3:-/api/7}

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$pg_bin" ] || ! command -v wrk >/dev/null; then
    echo "needs PostgreSQL and wrk: apt-get install -y postgresql wrk" >&2
    exit 1
fi
work=$(mktemp -d)
pg_port=55432
as_postgres=()
if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$work"
    as_postgres=(runuser -u postgres --)
fi
"${as_postgres[@]}" "$pg_bin/initdb" -D "$work/data" -U keel --auth=trust --no-sync -E UTF8 >/dev/null
"${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w \
    -o "-p $pg_port -c listen_addresses=127.0.0.1 -k $work -c fsync=off" start >/dev/null
export DATABASE_URL="postgres://keel@127.0.0.1:$pg_port/postgres"

pids=()
cleanup() {
    kill -INT "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --quiet -p keel --features admin,hyper-client,tokio-context \
    --example service --example service_tokio
target/release/examples/service 127.0.0.1:3900 127.0.0.1:3909 127.0.0.1:3902 127.0.0.1:3903 >/dev/null &
keel_pid=$!
pids+=($keel_pid)
target/release/examples/service_tokio 127.0.0.1:3910 127.0.0.1:3919 127.0.0.1:3912 127.0.0.1:3913 >/dev/null &
tokio_pid=$!
pids+=($tokio_pid)
for addr in 127.0.0.1:3900 127.0.0.1:3910; do
    for _ in $(seq 300); do
        curl -sf "http://$addr/api/7" >/dev/null && break
        sleep 0.1
    done
    curl -sf "http://$addr/api/7" >/dev/null || { echo "the service on $addr did not start" >&2; exit 1; }
done

# The CPU time PID has used, in clock ticks.
process_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}
# The host's idle and total time, in clock ticks.
host_ticks() {
    awk '$1 == "cpu" {print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat
}

# One GET of /health every 10 ms for SECONDS on one keep-alive connection;
# prints "p50_us p99_us".
probe() {
    python3 - "$1" "$2" <<'PY'
import http.client, sys, time
host, port = sys.argv[1].split(":")
seconds = float(sys.argv[2])
conn = http.client.HTTPConnection(host, int(port), timeout=5)
times = []
end = time.monotonic() + seconds
next_at = time.monotonic()
while time.monotonic() < end and len(times) < 100_000:
    start = time.monotonic()
    conn.request("GET", "/health")
    conn.getresponse().read()
    times.append((time.monotonic() - start) * 1e6)
    next_at += 0.01
    time.sleep(max(0.0, next_at - time.monotonic()))
times.sort()
print(f"{times[len(times) // 2]:.0f} {times[min(len(times) - 1, int(len(times) * 0.99))]:.0f}")
PY
}

summary=""
for round in $(seq "$rounds"); do
    order="keel tokio"
    [ $((round % 2)) = 0 ] && order="tokio keel"
    for runtime in $order; do
        api=127.0.0.1:3900 admin=127.0.0.1:3909 pid=$keel_pid
        [ "$runtime" = tokio ] && api=127.0.0.1:3910 admin=127.0.0.1:3919 pid=$tokio_pid
        echo "== round $round, $runtime ($api)"
        probe "$admin" "$seconds" >"$work/probe" &
        probe_pid=$!
        cpu_before=$(process_ticks "$pid")
        read -r idle_before total_before < <(host_ticks)
        out=$(wrk -t2 -c60 -d"${seconds}s" --latency "http://$api$path")
        cpu_after=$(process_ticks "$pid")
        read -r idle_after total_after < <(host_ticks)
        wait $probe_pid
        echo "$out"
        rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
        p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
        errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
        read -r admin_p50 admin_p99 <"$work/probe"
        # The service's CPU a request (µs) and the host's idle share (%).
        cpu_us=$(awk -v t=$((cpu_after - cpu_before)) -v hz="$(getconf CLK_TCK)" -v r="$rps" \
            -v s="$seconds" 'BEGIN { printf "%.1f", t / hz * 1e6 / (r * s) }')
        idle=$(awk -v i=$((idle_after - idle_before)) -v t=$((total_after - total_before)) \
            'BEGIN { printf "%.1f", 100 * i / t }')
        summary+=$(printf '%s %s %s %s %s %s %s %s %s' "$round" "$runtime" "$rps" "$p99" \
            "$admin_p50" "$admin_p99" "$cpu_us" "$idle" "${errors:-none}")$'\n'
    done
done

echo
echo "round runtime requests/s p99 admin_p50_us admin_p99_us cpu_us_per_request host_idle_% errors"
printf '%s' "$summary"
median() {
    printf '%s' "$summary" | awk -v r="$1" -v c="$2" '$2 == r {print $c}' | sort -g |
        sed -n "$(((rounds + 1) / 2))p"
}
for column in 3 5 6 7 8; do
    name=$(echo "x x requests/s p99 admin_p50_us admin_p99_us cpu_us_per_request host_idle_%" |
        cut -d' ' -f$column)
    echo "median $name: keel $(median keel $column), tokio $(median tokio $column)"
done
awk -v k="$(median keel 3)" -v t="$(median tokio 3)" \
    'BEGIN { printf "keel/tokio requests/s (medians): %.3f\n", k / t }'
