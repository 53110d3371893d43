#!/usr/bin/env bash
# A local cluster: N headroom replicas on loopback ports behind vllm-router
# (the vLLM project's Rust load balancer, installed from PyPI into
# .cluster-venv on first use). Ctrl-C stops everything it started.
#
#   scripts/cluster.sh N [options] [-- extra `headroom serve` flags]
#
#   -m, --model MODEL     model for every replica (default: smollm2-135m)
#   -p, --port PORT       the router's port (default: 8000); replicas take PORT+1..PORT+N
#   --policy POLICY       cache_aware (default), round_robin, power_of_two, random, ...
#   --threads T           threads per replica (default: the cores / N, at least 1)
#
# Clients talk to http://127.0.0.1:PORT/v1 as to one server. Replicas log to
# .cluster-logs/replica-I.log, the router to .cluster-logs/router.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
[ $# -ge 1 ] || usage 1
case "$1" in -h|--help) usage 0 ;; esac
n="$1"; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "cluster.sh: N must be a positive number, got '$n'" >&2; exit 1; }
model=smollm2-135m port=8000 policy=cache_aware threads=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m|--model) model="$2"; shift 2 ;;
    -p|--port) port="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) echo "cluster.sh: unknown option '$1' (--help lists them)" >&2; exit 1 ;;
  esac
done
[ -n "$threads" ] || threads=$(( $(nproc) / n )); [ "$threads" -ge 1 ] || threads=1

bin="$root/build/release/headroom"
[ -x "$bin" ] || { echo "cluster.sh: $bin is missing: run scripts/setup.sh run first" >&2; exit 1; }
venv="$root/.cluster-venv"
if [ ! -x "$venv/bin/vllm-router" ]; then
  echo "cluster.sh: installing vllm-router into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "vllm-router==0.1.17"
fi

logs="$root/.cluster-logs"
mkdir -p "$logs"
pids=()
router_pid=""
stop() {
  trap - INT TERM EXIT
  echo "cluster.sh: stopping" >&2
  [ -n "$router_pid" ] && kill "$router_pid" 2>/dev/null || true
  # Replicas drain: their in-flight requests finish first.
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "$router_pid" ] && wait "$router_pid" 2>/dev/null || true
}
trap stop INT TERM EXIT

urls=()
for i in $(seq 1 "$n"); do
  p=$((port + i))
  "$bin" serve -m "$model" --port "$p" --threads "$threads" "${extra[@]}" \
    > "$logs/replica-$i.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$p")
done
for i in $(seq 1 "$n"); do
  url="${urls[$((i - 1))]}"
  for _ in $(seq 1 600); do
    if curl -sf "$url/health" > /dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
      echo "cluster.sh: replica $i exited; its log:" >&2; tail -n 20 "$logs/replica-$i.log" >&2; exit 1
    fi
    sleep 0.5
  done
  curl -sf "$url/health" > /dev/null || { echo "cluster.sh: replica $i is not ready after 5 minutes" >&2; exit 1; }
done
"$venv/bin/vllm-router" --host 127.0.0.1 --port "$port" --worker-urls "${urls[@]}" \
  --policy "$policy" --prometheus-port $((port + 1000)) \
  --worker-startup-check-interval 1 --health-check-interval-secs 1 --health-failure-threshold 1 \
  > "$logs/router.log" 2>&1 &
router_pid=$!
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then break; fi
  kill -0 "$router_pid" 2>/dev/null || { echo "cluster.sh: the router exited; its log:" >&2; tail -n 20 "$logs/router.log" >&2; exit 1; }
  sleep 0.5
done
echo "cluster ready: http://127.0.0.1:$port/v1 ($policy over $n replicas: ${urls[*]}); Ctrl-C stops it" >&2
wait "$router_pid"
