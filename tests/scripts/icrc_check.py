#!/usr/bin/env python3
"""Independent ICRC checker for RoCEv2 frames in a pcap file.

Written from the IBTA/rxe rules (not from rdmesh's code): the ICRC is CRC-32 (zlib) over
8 bytes of 0xFF, the IP header, the UDP header, and BTH..pad, with the variant fields masked
to 1s: IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label, hop limit; UDP
checksum; BTH byte 4. It is transmitted least significant byte first.

Usage: icrc_check.py FILE.pcap [--port 4791] [--scapy]
Prints "roce=N bad=M" and exits 1 if M > 0 or N == 0.
With --scapy, also recomputes every ICRC with scapy.contrib.roce and requires agreement.
"""
import struct
import sys
import zlib


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        raise SystemExit("not a pcap file: %s" % path)
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit("link type %d is not Ethernet" % linktype)
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        yield data[off + 16:off + 16 + incl]
        off += 16 + incl


def icrc_of(frame, port):
    """Returns (computed, on_wire) for a RoCEv2 frame, or None for anything else."""
    eth_type = struct.unpack(">H", frame[12:14])[0]
    l3 = 14
    if eth_type == 0x8100:
        eth_type = struct.unpack(">H", frame[16:18])[0]
        l3 = 18
    if eth_type == 0x0800:
        ihl = (frame[l3] & 0x0F) * 4
        if frame[l3 + 9] != 17:
            return None
        total = struct.unpack(">H", frame[l3 + 2:l3 + 4])[0]
        ip = bytearray(frame[l3:l3 + ihl])
        ip[1] = 0xFF
        ip[8] = 0xFF
        ip[10:12] = b"\xff\xff"
        l4 = l3 + ihl
        end = l3 + total
    elif eth_type == 0x86DD:
        if frame[l3 + 6] != 17:
            return None
        plen = struct.unpack(">H", frame[l3 + 4:l3 + 6])[0]
        ip = bytearray(frame[l3:l3 + 40])
        ip[0] |= 0x0F
        ip[1] = ip[2] = ip[3] = 0xFF
        ip[7] = 0xFF
        l4 = l3 + 40
        end = l4 + plen
    else:
        return None
    dport = struct.unpack(">H", frame[l4 + 2:l4 + 4])[0]
    if dport != port:
        return None
    udp = bytearray(frame[l4:l4 + 8])
    udp[6:8] = b"\xff\xff"
    ib = bytearray(frame[l4 + 8:end - 4])
    ib[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(ib)) & 0xFFFFFFFF
    wire = struct.unpack("<I", frame[end - 4:end])[0]
    return crc, wire


def main():
    args = sys.argv[1:]
    port = 4791
    use_scapy = "--scapy" in args
    if "--port" in args:
        port = int(args[args.index("--port") + 1])
    path = args[0]
    roce = bad = scapy_checked = 0
    for n, fr in enumerate(frames(path), 1):
        r = icrc_of(fr, port)
        if r is None:
            continue
        roce += 1
        if r[0] != r[1]:
            bad += 1
            print("frame %d: ICRC on wire %08x, computed %08x" % (n, r[1], r[0]))
        if use_scapy:
            from scapy.layers.l2 import Ether
            from scapy.contrib.roce import BTH
            pkt = Ether(fr)
            if BTH in pkt:
                b = pkt[BTH]
                wire = b.icrc
                b.icrc = None
                rebuilt = Ether(bytes(pkt))[BTH].icrc
                scapy_checked += 1
                if rebuilt != wire:
                    bad += 1
                    print("frame %d: scapy computes ICRC %08x, wire %08x" % (n, rebuilt, wire))
    print("roce=%d bad=%d scapy_checked=%d" % (roce, bad, scapy_checked))
    sys.exit(1 if bad or not roce else 0)


if __name__ == "__main__":
    main()
