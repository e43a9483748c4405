#!/bin/bash
# net-up.sh NS [NTAPS]: a private network for the test guests, entirely inside the new network
# namespace NS: bridge qfbr0 with 10.250.0.1/24 (the rdmesh side's address) and taps
# qftap0..NTAPS-1 enslaved to it. The namespace has no veth and no route out, and nothing
# does NAT (it would rewrite header fields the ICRC covers).
set -euo pipefail
NS=${1:?usage: net-up.sh NS [NTAPS]}
N=${2:-1}
ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add qfbr0 type bridge
# Forward at once (no STP learning delay) and without IGMP snooping surprises.
ip -n "$NS" link set qfbr0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0
ip -n "$NS" addr add 10.250.0.1/24 dev qfbr0
ip -n "$NS" link set qfbr0 up
for i in $(seq 0 $((N - 1))); do
  ip -n "$NS" tuntap add dev "qftap$i" mode tap
  ip -n "$NS" link set "qftap$i" master qfbr0
  ip -n "$NS" link set "qftap$i" up
done
