#!/bin/bash
# Builds the kernel + base initramfs of the rdma_rxe test guests and caches them.
#
# Usage: tests/qemu/build-image.sh            prints the image directory on its last line
# Env:   RDMESH_QEMU_CACHE  cache root (default: <repo>/target/qemu)
#        MIRROR             Debian mirror for debootstrap (default: the first one apt uses)
#
# The kernel is the package linux-image-amd64 depends on, resolved now; the root is a Debian
# minbase debootstrap with rdma-core, ibverbs-providers (librxe), ibverbs-utils
# (ibv_rc_pingpong), perftest and iproute2, packed whole into a newc cpio compressed with zstd
# (no loop devices, no block devices). /init is NOT part of this image: run-guest.sh prepends
# it, with the test's script, as a small uncompressed cpio on every boot.
#
# The image directory is keyed by the versions of every package that goes in and by this
# script's hash, so a Debian update or a change here rebuilds it and nothing else does.
# Needs root (debootstrap), network access to the Debian mirror, and: debootstrap kmod cpio zstd.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${RDMESH_QEMU_CACHE:-$ROOT/target/qemu}
T0=$(date +%s)
t() { echo "[build-image $(( $(date +%s) - T0 ))s] $*" >&2; }

for tool in debootstrap depmod modprobe cpio zstd apt-cache apt-get dpkg flock; do
  command -v "$tool" >/dev/null || { echo "build-image: '$tool' is missing (apt-get install debootstrap kmod cpio zstd)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "build-image: must run as root (debootstrap)" >&2; exit 2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
# Work trees of a build that was killed are useless.
rm -rf "$CACHE"/work-*

KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}' || true)
[ -n "$KPKG" ] || { echo "build-image: cannot resolve the kernel of linux-image-amd64 (run apt-get update)" >&2; exit 2; }
KVER=${KPKG#linux-image-}
PKGS="rdma-core ibverbs-providers ibverbs-utils perftest iproute2 kmod"
ver() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/{print $2; exit}' || true; }
{
  echo "kernel $KPKG $(ver "$KPKG")"
  for p in $PKGS; do echo "$p $(ver "$p")"; done
  echo "script $(sha256sum "$0" | cut -c1-16)"
} > "$CACHE/versions.tmp"
KEY=$(sha256sum "$CACHE/versions.tmp" | cut -c1-16)
IMG=$CACHE/img-$KEY
mv "$CACHE/versions.tmp" "$CACHE/versions-$KEY.txt"
if [ -f "$IMG/done" ]; then
  t "cached image $IMG"
  echo "$IMG"
  exit 0
fi

W=$CACHE/work-$KEY
rm -rf "$W"
mkdir -p "$W/kernel"

# 1. kernel package, extracted
(cd "$W/kernel" && apt-get download -q -o APT::Sandbox::User=root "$KPKG" >/dev/null && dpkg -x "${KPKG}"_*.deb root)
depmod -b "$W/kernel/root" "$KVER"
grep -E '^CONFIG_(RDMA_RXE|VFIO_PCI|VFIO_IOMMU_TYPE1|INTEL_IOMMU)=' "$W/kernel/root/boot/config-$KVER" >&2
t "kernel $KVER extracted"

# 2. root filesystem: the Debian mirror this machine's apt already uses
MIRROR=${MIRROR:-$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
  awk '$1=="URIs:"{print $2} $1=="deb"{print ($2 ~ /^\[/ ? $3 : $2)}' |
  grep -v -E 'security|nodesource|google' | head -1 || true)}
[ -n "$MIRROR" ] || { echo "build-image: no Debian mirror found in the apt sources" >&2; exit 2; }
SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
debootstrap --variant=minbase \
  --include=rdma-core,ibverbs-utils,ibverbs-providers,perftest,iproute2,kmod,procps \
  "$SUITE" "$W/rootfs" "$MIRROR" >"$W/debootstrap.log" 2>&1 ||
  { tail -30 "$W/debootstrap.log" >&2; exit 1; }
t "rootfs ($SUITE from $MIRROR)"

# 3. staged tree: trimmed root + the modules the guest loads (with their dependencies)
S=$W/rootfs
rm -rf "$S"/var/cache/apt/archives/*.deb "$S"/var/lib/apt/lists/* "$S"/usr/share/{doc,man,info,locale}/*
# vfio_pci + vfio_iommu_type1: the VFIO guest of qemu_vfio_edu (run-vfio.sh, guest/init-vfio).
for m in crc32_generic rdma_rxe ib_uverbs rdma_ucm virtio_net virtio_pci vfio_pci vfio_iommu_type1; do
  modprobe -d "$W/kernel/root" -S "$KVER" --show-depends "$m"
done | awk '$1=="insmod"{print $2}' | sort -u | while read -r f; do
  rel=${f#"$W"/kernel/root/}
  mkdir -p "$S/$(dirname "$rel")"
  cp "$f" "$S/$rel"
done
cp "$W/kernel/root/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$S/lib/modules/$KVER/"
depmod -b "$S" "$KVER"
find "$S/lib/modules" -name 'rdma_rxe.ko*' | grep -q . || { echo "build-image: rdma_rxe module missing" >&2; exit 1; }
find "$S/lib/modules" -name 'vfio-pci.ko*' -o -name 'vfio_pci.ko*' | grep -q . || grep -q 'vfio-pci\|vfio_pci' "$S/lib/modules/$KVER/modules.builtin" ||
  { echo "build-image: vfio-pci module missing" >&2; exit 1; }
t "staged ($(du -sh "$S" | cut -f1))"

# 4. base initramfs (newc cpio, zstd) and kernel
mkdir -p "$W/out"
(cd "$S" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | zstd -q -3 -T0 -f -o "$W/out/initrd.cpio.zst"
cp "$W/kernel/root/boot/vmlinuz-$KVER" "$W/out/vmlinuz"
cp "$CACHE/versions-$KEY.txt" "$W/out/versions.txt"
chroot "$S" dpkg-query -W -f '${Package} ${Version}\n' rdma-core ibverbs-providers ibverbs-utils perftest >>"$W/out/versions.txt" 2>/dev/null || true
touch "$W/out/done"
rm -rf "$IMG"
mv "$W/out" "$IMG"
rm -rf "$W"
# keep only the newest image
for d in "$CACHE"/img-* "$CACHE"/versions-*.txt; do
  case "$d" in "$IMG" | "$CACHE/versions-$KEY.txt") ;; *) rm -rf "$d" ;; esac
done
t "image $IMG: initrd $(du -h "$IMG/initrd.cpio.zst" | cut -f1), vmlinuz $(du -h "$IMG/vmlinuz" | cut -f1)"
echo "$IMG"
