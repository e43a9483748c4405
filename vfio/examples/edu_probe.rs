//! Drives QEMU's `edu` PCI device (1234:11e8) through rdmesh-vfio's system layer, as the
//! `qemu_vfio_edu` test does inside a guest with an emulated Intel IOMMU.
//!
//! Usage: `edu_probe 0000:00:02.0` (the device bound to vfio-pci). Prints one `PASS name: …` or
//! `FAIL name: …` line per check and `EDU_PROBE_RESULT PASS|FAIL checks=N failed=M` last; exits
//! 0 when every check passed, 1 when one failed, 2 when the device could not be opened.
//!
//! edu registers (QEMU `hw/misc/edu.c`, `docs/specs/edu.rst`; BAR0 offsets, little-endian):
//! 0x00 ID (0x010000ed), 0x04 liveness (reads back the inverse), 0x08 factorial, 0x20 status
//! (bit 7: raise an interrupt when the factorial is done), 0x24 interrupt status, 0x60 raise
//! interrupt, 0x64 acknowledge, 0x80/0x88/0x90 DMA source/destination/count, 0x98 DMA command
//! (bit 0 start/busy, bit 1 direction: 1 = edu → RAM). edu's own buffer is at device address
//! 0x40000 (4096 bytes); its DMA mask is 28 bits, so IOVAs stay below 2^28.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmesh_vfio::seam::{DmaAllocator, Interrupt, Mmio};
use rdmesh_vfio::sys::{BarMmio, Container, PciAddress, VfioDma, VfioDmaConfig, VfioPciDevice};

const EDU_ID: usize = 0x00;
const EDU_LIVENESS: usize = 0x04;
const EDU_FACTORIAL: usize = 0x08;
const EDU_STATUS: usize = 0x20;
const EDU_IRQ_STATUS: usize = 0x24;
const EDU_IRQ_RAISE: usize = 0x60;
const EDU_IRQ_ACK: usize = 0x64;
const EDU_DMA_SRC: usize = 0x80;
const EDU_DMA_DST: usize = 0x88;
const EDU_DMA_CNT: usize = 0x90;
const EDU_DMA_CMD: usize = 0x98;
const EDU_BUF: u64 = 0x4_0000;
/// Bytes per edu DMA. edu's buffer is 4096 bytes, but QEMU 7.2's range check rejects a
/// transfer that ends exactly at its end (a hardware error that aborts QEMU), so stay below.
const LEN: usize = 1024;

struct Report {
    checks: u32,
    failed: u32,
}

impl Report {
    fn check(&mut self, ok: bool, name: &str, detail: String) -> bool {
        self.checks += 1;
        if !ok {
            self.failed += 1;
        }
        println!("{} {name}: {detail}", if ok { "PASS" } else { "FAIL" });
        ok
    }
}

/// Runs one edu DMA and waits for the busy bit to clear; returns the time it took.
fn edu_dma(bar: &BarMmio, src: u64, dst: u64, to_ram: bool) -> Option<Duration> {
    bar.write64(EDU_DMA_SRC, src);
    bar.write64(EDU_DMA_DST, dst);
    bar.write64(EDU_DMA_CNT, LEN as u64);
    bar.write64(EDU_DMA_CMD, 1 | if to_ram { 2 } else { 0 });
    let t = Instant::now();
    while bar.read32(EDU_DMA_CMD) & 1 != 0 {
        if t.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Some(t.elapsed())
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn run(bdf: PciAddress, r: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let container = Container::open()?;
    r.check(
        true,
        "container",
        "/dev/vfio/vfio opened, API version and TYPE1v2 IOMMU ok".into(),
    );
    let dev = VfioPciDevice::open(&container, bdf)?;
    r.check(
        true,
        "group",
        format!(
            "{bdf}: /dev/vfio/{} viable, joined the container, device fd obtained",
            dev.group()
        ),
    );
    let (vendor, device) = dev.ids()?;
    r.check(
        (vendor, device) == (0x1234, 0x11e8),
        "pci_ids",
        format!("config space vendor {vendor:#06x} device {device:#06x} (expect 0x1234 0x11e8)"),
    );
    let info = container.iommu_info()?;
    r.check(
        !info.ranges.is_empty() && info.min_page_size() == 4096,
        "iommu_info",
        format!(
            "iova_pgsizes {:#x}, {} IOVA range(s) {} first {:#x}..={:#x}",
            info.iova_pgsizes,
            info.ranges.len(),
            if info.ranges_from_kernel {
                "from the kernel"
            } else {
                "(legacy assumption)"
            },
            info.ranges[0].start,
            info.ranges[0].end
        ),
    );
    let bar = dev.map_bar(0)?;
    r.check(
        bar.len() >= 0x100,
        "bar0_mmap",
        format!(
            "BAR0 size {:#x}, fd offset {:#x}, flags {:#x}, {} mmap area(s)",
            bar.len(),
            bar.region().offset,
            bar.region().flags,
            bar.region().mmap_areas.len()
        ),
    );
    let id = bar.read32(EDU_ID);
    r.check(
        id == 0x0100_00ed,
        "id_register",
        format!("{id:#010x} (expect 0x010000ed)"),
    );
    bar.write32(EDU_LIVENESS, 0x1234_5678);
    let live = bar.read32(EDU_LIVENESS);
    r.check(
        live == !0x1234_5678u32,
        "liveness",
        format!(
            "wrote 0x12345678, read {live:#010x} (expect {:#010x})",
            !0x1234_5678u32
        ),
    );
    let cmd = dev.enable_bus_master()?;
    r.check(
        cmd & 0x6 == 0x6,
        "bus_master",
        format!("PCI command register {cmd:#06x}"),
    );

    // DMA round trip through two buffers of the page allocator.
    let dma = VfioDma::new(
        container.clone(),
        VfioDmaConfig {
            iova_limit: 1 << 28,
            ..VfioDmaConfig::default()
        },
    )?;
    let a = dma.alloc(4096, 4096)?;
    let b = dma.alloc(4096, 4096)?;
    let blocks = dma.blocks();
    r.check(
        a.iova() != b.iova() && blocks.len() == 1 && a.iova() < 1 << 28,
        "dma_map",
        format!(
            "buffers at iova {:#x} and {:#x} in block(s) {blocks:x?} (iova, len, hugepages)",
            a.iova(),
            b.iova()
        ),
    );
    let p = pattern(3);
    a.write(0, &p)?;
    let t1 = edu_dma(&bar, a.iova(), EDU_BUF, false);
    let t2 = edu_dma(&bar, EDU_BUF, b.iova(), true);
    let mut got = vec![0u8; LEN];
    b.read(0, &mut got)?;
    let same = got == p;
    r.check(
        t1.is_some() && t2.is_some() && same,
        "dma_round_trip",
        format!(
            "RAM {:#x} -> edu {EDU_BUF:#x} ({:?}) -> RAM {:#x} ({:?}), {LEN} bytes {}",
            a.iova(),
            t1,
            b.iova(),
            t2,
            if same { "match" } else { "DIFFER" }
        ),
    );

    // The IOMMU blocks DMA to an IOVA that is not mapped: the same block is reachable while
    // mapped and unreachable once unmapped (its memory stays ours to read).
    let blk = dma.map_block(2 << 20)?;
    let target = blk.iova();
    blk.write(0, &[0x5a; LEN])?;
    edu_dma(&bar, EDU_BUF, target, true);
    let mut landed = vec![0u8; LEN];
    blk.read(0, &mut landed)?;
    r.check(
        landed == p,
        "dma_mapped_control",
        format!(
            "edu -> RAM at mapped iova {target:#x}: {}",
            if landed == p {
                "landed"
            } else {
                "did NOT land"
            }
        ),
    );
    blk.write(0, &[0x5a; LEN])?;
    blk.unmap_iommu()?;
    let t = edu_dma(&bar, EDU_BUF, target, true);
    let mut after = vec![0u8; LEN];
    blk.read(0, &mut after)?;
    let untouched = after.iter().all(|&x| x == 0x5a);
    r.check(
        t.is_some() && untouched,
        "dma_unmapped_blocked",
        format!(
            "edu -> RAM at iova {target:#x} after VFIO_IOMMU_UNMAP_DMA: transfer finished ({t:?}), memory {}",
            if untouched { "untouched (IOMMU blocked it)" } else { "CHANGED" }
        ),
    );
    drop(blk);

    // MSI: vector 0 to an eventfd.
    let irq = dev.enable_vector0()?;
    r.check(
        true,
        "irq_setup",
        format!(
            "{:?} vector 0 -> eventfd (VFIO_DEVICE_SET_IRQS)",
            irq.kind()
        ),
    );
    let quiet = !irq.wait(Duration::from_millis(300));
    r.check(
        quiet,
        "irq_quiet",
        "no interrupt before one is raised".into(),
    );
    bar.write32(EDU_IRQ_RAISE, 0x1234);
    let fired = irq.wait(Duration::from_secs(5));
    let st = bar.read32(EDU_IRQ_STATUS);
    r.check(
        fired && st & 0x1234 == 0x1234,
        "msi_raise",
        format!("write 0x1234 to 0x60: eventfd fired {fired}, interrupt status {st:#x}"),
    );
    bar.write32(EDU_IRQ_ACK, st);
    bar.write32(EDU_STATUS, 0x80);
    bar.write32(EDU_FACTORIAL, 10);
    let fired = irq.wait(Duration::from_secs(5));
    let fact = bar.read32(EDU_FACTORIAL);
    let st = bar.read32(EDU_IRQ_STATUS);
    r.check(
        fired && fact == 3_628_800,
        "msi_factorial",
        format!("factorial(10) = {fact}, completion interrupt fired {fired} (status {st:#x})"),
    );
    bar.write32(EDU_IRQ_ACK, st);
    drop(irq);
    drop(a);
    drop(b);
    drop(dma);
    drop(bar);
    let dev = Arc::try_unwrap(dev).map_err(|_| "device still shared")?;
    drop(dev);
    r.check(
        true,
        "teardown",
        "buffers, DMA blocks, BAR mapping, interrupt and device released".into(),
    );
    Ok(())
}

fn main() -> ExitCode {
    let Some(arg) = std::env::args().nth(1) else {
        eprintln!("usage: edu_probe DDDD:BB:DD.F");
        return ExitCode::from(2);
    };
    let bdf = match PciAddress::parse(&arg) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report {
        checks: 0,
        failed: 0,
    };
    let code = match run(bdf, &mut r) {
        Ok(()) => {
            if r.failed == 0 {
                0
            } else {
                1
            }
        }
        Err(e) => {
            let mut msg = e.to_string();
            let mut s = e.source();
            while let Some(c) = s {
                msg.push_str(&format!(": {c}"));
                s = c.source();
            }
            r.check(false, "fatal", msg);
            2
        }
    };
    println!(
        "EDU_PROBE_RESULT {} checks={} failed={}",
        if r.failed == 0 { "PASS" } else { "FAIL" },
        r.checks,
        r.failed
    );
    ExitCode::from(code)
}
