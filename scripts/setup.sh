#!/usr/bin/env bash
# Installs what rdmesh's tests need on a fresh Debian machine (idempotent; apt needs root).
set -euo pipefail
need_apt=()
command -v tshark >/dev/null || need_apt+=(tshark)
command -v ip >/dev/null || need_apt+=(iproute2)
# netns_nft_loss / netns_nft_ecn: kernel drops and CE marks with nftables.
command -v nft >/dev/null || need_apt+=(nftables)
# Namespaced links segment UDP GSO packets in software so rules and captures see wire frames.
command -v ethtool >/dev/null || need_apt+=(ethtool)
[ -f /usr/include/infiniband/mlx5dv.h ] || need_apt+=(libibverbs-dev)
ls -d /usr/src/linux-headers-*/include/linux/mlx5 >/dev/null 2>&1 || need_apt+=(linux-headers-amd64)
command -v cc >/dev/null || need_apt+=(gcc)
# qemu_rxe_* tests: QEMU (TCG) guests running rdma_rxe; tests/qemu/build-image.sh builds their image.
command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
[ -x /usr/sbin/debootstrap ] || need_apt+=(debootstrap)
command -v cpio >/dev/null || need_apt+=(cpio)
command -v zstd >/dev/null || need_apt+=(zstd)
[ -x /usr/sbin/depmod ] || [ -x /sbin/depmod ] || need_apt+=(kmod)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# build-image.sh resolves the guest kernel from the package lists (linux-image-amd64).
apt-cache show linux-image-amd64 >/dev/null 2>&1 || apt-get update -qq
python3 -c 'import scapy.contrib.roce' 2>/dev/null || python3 -m pip install -q scapy
rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-none || rustup target add x86_64-unknown-none
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked
