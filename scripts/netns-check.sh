#!/usr/bin/env bash
# Two ranks on two hosts of their own: network namespaces joined by a veth
# pair (10.231.0.1 and 10.231.0.2, addresses that exist only inside them),
# rank 0 in one, rank 1 in the other, gathering over TCP across the link.
# Needs root and iproute2; not part of CI. Prints the report's session.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet -p rankscope-tests --bin agent_only_rank
rank=$PWD/target/debug/agent_only_rank
out=$(mktemp -d)
a=rankscope-a; b=rankscope-b
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add rs-veth-a type veth peer name rs-veth-b
ip link set rs-veth-a netns "$a"; ip link set rs-veth-b netns "$b"
ip -n "$a" addr add 10.231.0.1/24 dev rs-veth-a; ip -n "$b" addr add 10.231.0.2/24 dev rs-veth-b
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set rs-veth-a up; ip -n "$b" link set rs-veth-b up
common=(env -i PATH="$PATH" WORLD_SIZE=2 MASTER_ADDR=10.231.0.1 MASTER_PORT=29500
    TORCHELASTIC_RUN_ID=netns RANKSCOPE_TOKEN=netns-secret RANKSCOPE_GPU_SOURCE=none
    RANKSCOPE_GATHER_TIMEOUT_S=20)
# Each host its own output directory: nothing is shared but the network.
mkdir -p "$out/a" "$out/b"
ip netns exec "$b" "${common[@]}" RANK=1 RANKSCOPE_OUTPUT_DIR="$out/b" "$rank" &
ip netns exec "$a" "${common[@]}" RANK=0 RANKSCOPE_OUTPUT_DIR="$out/a" "$rank"
wait
python3 -c "
import json, glob
report = json.load(open(glob.glob('$out/a/*/report.json')[0]))
s = report['session']
print('transport', s['transport'], 'endpoint', s['endpoint'], 'ranks', s['ranks_reporting'])
print('hosts', [(r['rank'], r['clock_offset_ns'], r['clock_round_trip_ns']) for r in report['ranks']])
"
