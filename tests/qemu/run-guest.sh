#!/bin/bash
# run-guest.sh IMG NS TAP IP SCRIPT OUTDIR NAME
# Boots one rxe guest under QEMU TCG (one vCPU, 1 GiB) inside network namespace NS, its
# virtio NIC on tap qftapTAP, address IP/24. SCRIPT becomes the guest's /qf/run.sh.
# Writes OUTDIR/NAME.console (serial console) and OUTDIR/NAME.pid; runs in the foreground
# until the guest powers off. QEMU always gets explicit -netdev/-device options, so it never
# adds its default user-mode (NAT) NIC.
set -euo pipefail
IMG=$1 NS=$2 TAP=$3 IP=$4 SCRIPT=$5 OUT=$6 NAME=$7
HERE=$(cd "$(dirname "$0")" && pwd)
X=$OUT/$NAME.extra
rm -rf "$X" && mkdir -p "$X/qf"
install -m 755 "$HERE/guest/init" "$X/init"
install -m 644 "$SCRIPT" "$X/qf/run.sh"
# An uncompressed newc cpio in front of the zstd one: the kernel unpacks both.
(cd "$X" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) > "$OUT/$NAME.cpio"
cat "$OUT/$NAME.cpio" "$IMG/initrd.cpio.zst" > "$OUT/$NAME.initrd"
rm -rf "$X" "$OUT/$NAME.cpio"
MAC=$(printf '52:54:00:fa:00:%02x' $((10 + TAP)))
exec ip netns exec "$NS" qemu-system-x86_64 -accel tcg -machine q35 -cpu max -m 1024 -smp 1 \
  -display none -no-reboot -monitor none -pidfile "$OUT/$NAME.pid" \
  -kernel "$IMG/vmlinuz" -initrd "$OUT/$NAME.initrd" \
  -append "console=ttyS0 panic=-1 quiet qf_name=$NAME qf_ip=$IP/24" \
  -netdev "tap,id=n0,ifname=qftap$TAP,script=no,downscript=no" \
  -device "virtio-net-pci,netdev=n0,mac=$MAC" \
  -serial "file:$OUT/$NAME.console"
