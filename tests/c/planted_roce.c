/* A small RoCEv2 "parser" with a planted bug, the target of tests/tests/fuzz_exec.rs.
 *
 * Usage: planted_roce FILE.pcap   (classic pcap, Ethernet link type)
 *
 * For every untagged IPv4/UDP frame to port 4791 it checks the ICRC (CRC-32 over 8 x 0xFF,
 * the IPv4 header with TOS, TTL and checksum masked, the UDP header with its checksum masked,
 * and BTH..pad with BTH byte 4 masked; least significant byte first on the wire). Frames with
 * a bad ICRC are dropped, as a real receiver does.
 *
 * The planted bug: an ICRC-valid RC RDMA WRITE Only with Immediate (opcode 0x0b) whose RETH
 * DMA length differs from its payload length dereferences a NULL pointer (SIGSEGV). Random
 * bytes essentially never get there (EtherType, version, protocol, port, opcode and a 32-bit
 * CRC must all line up). Exits 0 otherwise, printing how many frames passed the ICRC check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return crc;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int *volatile null_target;

/* Returns 1 when the frame passed the ICRC check. */
static int handle(const uint8_t *f, size_t len) {
    if (len < 14 + 20 + 8 + 12 + 4 || be16(f + 12) != 0x0800) return 0;
    const uint8_t *ip = f + 14;
    if (ip[0] != 0x45 || ip[9] != 17) return 0;
    size_t total = be16(ip + 2);
    if (total < 20 + 8 + 12 + 4 || 14 + total > len) return 0;
    const uint8_t *udp = ip + 20;
    if (be16(udp + 2) != 4791) return 0;
    size_t udp_len = be16(udp + 4);
    if (udp_len != total - 20) return 0;
    const uint8_t *ib = udp + 8;
    size_t ib_len = udp_len - 8 - 4; /* BTH .. pad */

    uint8_t m[20 + 8 + 12];
    memcpy(m, ip, 20);
    m[1] = 0xff; m[8] = 0xff; m[10] = 0xff; m[11] = 0xff;
    memcpy(m + 20, udp, 8);
    m[26] = 0xff; m[27] = 0xff;
    memcpy(m + 28, ib, 12);
    m[28 + 4] = 0xff;
    static const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint32_t crc = crc32_update(0xffffffffu, ones, 8);
    crc = crc32_update(crc, m, sizeof m);
    crc = crc32_update(crc, ib + 12, ib_len - 12);
    crc ^= 0xffffffffu;
    const uint8_t *t = ib + ib_len;
    uint32_t wire = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    if (crc != wire) return 0;

    uint8_t opcode = ib[0];
    unsigned pad = (ib[1] >> 4) & 3;
    if (opcode == 0x0b && ib_len >= 12 + 16 + 4 + pad) {
        uint32_t dma_len = be32(ib + 12 + 12);
        size_t payload = ib_len - 12 - 16 - 4 - pad;
        if (dma_len != payload) {
            /* The planted bug: trusts the RETH length over the packet's. */
            *null_target = (int)dma_len;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE.pcap\n", argv[0]);
        return 2;
    }
    FILE *fp = fopen(argv[1], "rb");
    if (!fp) {
        perror(argv[1]);
        return 2;
    }
    uint8_t gh[24];
    if (fread(gh, 1, 24, fp) != 24 || memcmp(gh, "\xd4\xc3\xb2\xa1", 4) != 0) {
        fprintf(stderr, "%s: not a little-endian microsecond pcap\n", argv[1]);
        return 2;
    }
    static uint8_t buf[65536];
    unsigned frames = 0, valid = 0;
    uint8_t rh[16];
    while (fread(rh, 1, 16, fp) == 16) {
        uint32_t incl = (uint32_t)rh[8] | (uint32_t)rh[9] << 8 | (uint32_t)rh[10] << 16 | (uint32_t)rh[11] << 24;
        if (incl > sizeof buf || fread(buf, 1, incl, fp) != incl) break;
        frames++;
        valid += handle(buf, incl);
    }
    fclose(fp);
    printf("frames=%u icrc_valid=%u\n", frames, valid);
    return 0;
}
