#!/bin/bash
# run-vfio.sh IMG PROBE OUTDIR NAME
# Boots the VFIO test guest under QEMU TCG: q35 with an emulated Intel IOMMU (interrupt
# remapping) and QEMU's edu PCI device, one vCPU, 1 GiB, and no NIC at all (-nic none).
# guest/init-vfio becomes /init and PROBE (a host-built binary; host and guest are both Debian
# 12 with the same glibc) /usr/local/bin/edu_probe, in a small uncompressed cpio in front of
# the cached base initramfs (build-image.sh). Writes OUTDIR/NAME.console (serial console) and
# OUTDIR/NAME.pid; runs in the foreground until the guest powers off.
set -euo pipefail
IMG=$1 PROBE=$2 OUT=$3 NAME=$4
HERE=$(cd "$(dirname "$0")" && pwd)
X=$OUT/$NAME.extra
rm -rf "$X" && mkdir -p "$X/usr/local/bin"
install -m 755 "$HERE/guest/init-vfio" "$X/init"
install -m 755 "$PROBE" "$X/usr/local/bin/edu_probe"
# An uncompressed newc cpio in front of the zstd one: the kernel unpacks both.
(cd "$X" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) > "$OUT/$NAME.cpio"
cat "$OUT/$NAME.cpio" "$IMG/initrd.cpio.zst" > "$OUT/$NAME.initrd"
rm -rf "$X" "$OUT/$NAME.cpio"
exec qemu-system-x86_64 -accel tcg -machine q35,kernel-irqchip=split -cpu max -m 1024 -smp 1 \
  -display none -no-reboot -monitor none -nic none -pidfile "$OUT/$NAME.pid" \
  -device intel-iommu,intremap=on -device edu \
  -kernel "$IMG/vmlinuz" -initrd "$OUT/$NAME.initrd" \
  -append "console=ttyS0 panic=-1 quiet intel_iommu=on qf_name=$NAME" \
  -serial "file:$OUT/$NAME.console"
