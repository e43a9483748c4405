#!/bin/bash
# net-down.sh NS: removes the test namespace (and with it the bridge and taps).
NS=${1:?usage: net-down.sh NS}
ip netns del "$NS" 2>/dev/null || true
