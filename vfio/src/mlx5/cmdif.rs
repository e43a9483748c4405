//! The command interface: a 4 KiB DMA page of `2^log_cmdq_size` entries `2^log_cmdq_stride`
//! bytes apart (geometry read from the init segment), the input/output beyond the 16 inline
//! bytes in chained 576-byte mailboxes, a non-zero token per command shared by the entry and
//! its mailboxes, signatures, the doorbell `1 << slot`, and completion by ownership polling or
//! by command-completion events on the async EQ (Linux `cmd.c`, rdma-core `mlx5_vfio.c`
//! `mlx5_vfio_post_cmd` / `mlx5_vfio_cmd_exec`).
//!
//! Slots: the last slot is kept for page commands (MANAGE_PAGES from page-request events, as
//! Linux and rdma-core do); the others carry regular commands. A command that times out
//! leaves its slot owned by the device; that slot is skipped from then on, and when every
//! usable slot is stuck the next command fails at once with
//! [`DriverError::CmdQueueFull`] instead of waiting.
//!
//! Every wait is bounded by [`DriverConfig::cmd_timeout`] and samples the health counter, so a
//! dead device gives [`DriverError::DeviceDead`] rather than a hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmesh_core::mlx5::cmd::entry::{self, CmdEntry};
use rdmesh_core::mlx5::cmd::mailbox::{self, Mailbox};
use rdmesh_core::mlx5::cmd::{init_seg as seg, CmdError, InHeader, Opcode};

use super::eq::EventQueue;
use super::health::Health;
use super::{barrier, DriverConfig, DriverError, Result};
use crate::seam::{DmaAllocator, DmaBuffer, Interrupt, Mmio};

/// Distance between mailbox blocks inside a slot's mailbox buffer (Linux aligns blocks to
/// 1 KiB: `roundup_pow_of_two(576)`).
const MAILBOX_STRIDE: usize = 1024;

/// Which slots a command may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotClass {
    /// Regular commands: every slot but the last (all slots when there is only one).
    Regular,
    /// Page commands (MANAGE_PAGES): the last slot.
    Pages,
}

#[derive(Debug, Default)]
struct Slot {
    /// Input mailboxes (grown on demand).
    inbox: Option<Box<dyn DmaBuffer>>,
    /// Output mailboxes (grown on demand).
    outbox: Option<Box<dyn DmaBuffer>>,
    /// The device kept this slot after a timeout.
    stuck: bool,
}

/// One executed command, for `RDMESH_CMD_TRACE` and `rdmesh doctor --probe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdRecord {
    /// Sequence number on this device (0-based).
    pub seq: u64,
    /// Microseconds since the command interface was set up.
    pub at_us: u64,
    /// The opcode.
    pub opcode: Opcode,
    /// `op_mod` of the input header.
    pub op_mod: u16,
    /// The command-queue slot.
    pub slot: Option<usize>,
    /// The output's status byte (`MLX5_CMD_STAT_*`), when an output came back.
    pub status: Option<u8>,
    /// The output's syndrome.
    pub syndrome: u32,
    /// How long the command took.
    pub elapsed: core::time::Duration,
    /// The driver error, when the command failed before a status came back (timeout, dead
    /// device, delivery error).
    pub error: Option<String>,
    /// The input bytes (header included).
    pub input: Vec<u8>,
    /// The output bytes.
    pub output: Vec<u8>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl CmdRecord {
    /// `OK`, the status name, or `no status` when none came back.
    pub fn status_name(&self) -> String {
        match self.status {
            Some(s) => format!("{:?}", rdmesh_core::mlx5::cmd::CmdStatus::from(s)),
            None => "no status".into(),
        }
    }

    /// Whether the command completed with status OK.
    pub fn ok(&self) -> bool {
        self.status == Some(0) && self.error.is_none()
    }

    /// One JSON object: `seq`, `at_us`, `opcode` (number), `name`, `op_mod`, `slot`,
    /// `status`, `status_name`, `syndrome`, `elapsed_us`, `error`, `input`, `output` (hex).
    pub fn to_json(&self, device: &str) -> String {
        format!(
            "{{\"device\":{},\"seq\":{},\"at_us\":{},\"opcode\":{},\"name\":{},\"op_mod\":{},\"slot\":{},\"status\":{},\"status_name\":{},\"syndrome\":{},\"elapsed_us\":{},\"error\":{},\"input\":\"{}\",\"output\":\"{}\"}}",
            json_str(device),
            self.seq,
            self.at_us,
            u16::from(self.opcode),
            json_str(self.opcode.name()),
            self.op_mod,
            self.slot.map_or("null".into(), |s| s.to_string()),
            self.status.map_or("null".into(), |s| s.to_string()),
            json_str(&self.status_name()),
            self.syndrome,
            self.elapsed.as_micros(),
            self.error.as_deref().map_or("null".into(), json_str),
            hex(&self.input),
            hex(&self.output),
        )
    }
}

/// Counters of the command interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdStats {
    /// Commands posted.
    pub posted: u64,
    /// Commands that completed with status OK.
    pub ok: u64,
    /// Commands that completed with a bad status or malformed output.
    pub failed: u64,
    /// Commands that timed out.
    pub timed_out: u64,
    /// Completions learnt from EQ events rather than polling.
    pub eq_completions: u64,
}

/// The command interface of one device.
pub struct CmdIf {
    cfg: DriverConfig,
    mmio: Arc<dyn Mmio>,
    dma: Arc<dyn DmaAllocator>,
    queue: Box<dyn DmaBuffer>,
    log_size: u8,
    log_stride: u8,
    slots: Vec<Slot>,
    token: u8,
    health: Health,
    irq: Option<Arc<dyn Interrupt>>,
    history: Vec<Opcode>,
    stats: CmdStats,
    dead: Option<DriverError>,
    /// `RDMESH_CMD_TRACE`: the open trace file.
    trace: Option<std::fs::File>,
    /// Every command's record, when [`DriverConfig::record_transcript`] is on.
    transcript: Vec<CmdRecord>,
    /// Commands executed, for records.
    seq: u64,
    /// When the interface was set up.
    t0: Instant,
    /// The slot of the last command posted.
    last_slot: Option<usize>,
}

impl core::fmt::Debug for CmdIf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CmdIf")
            .field("device", &self.cfg.name)
            .field("log_size", &self.log_size)
            .field("log_stride", &self.log_stride)
            .field("stats", &self.stats)
            .finish()
    }
}

impl CmdIf {
    /// Reads the geometry (checking command-interface revision 5), allocates the queue page
    /// and programs its address (0x010 then 0x014).
    ///
    /// # Errors
    /// [`DriverError::CmdifRev`], [`DriverError::CmdqGeometry`], [`DriverError::Dma`].
    pub fn new(
        cfg: DriverConfig,
        mmio: Arc<dyn Mmio>,
        dma: Arc<dyn DmaAllocator>,
    ) -> Result<CmdIf> {
        let g = super::init_seg::cmdq_geometry(&*mmio, &cfg)?;
        let queue = dma
            .alloc(4096, 4096)
            .map_err(|e| DriverError::dma(&cfg.name, e))?;
        super::init_seg::set_cmdq_addr(&*mmio, queue.iova());
        let n = 1usize << g.log_cmdq_size;
        let trace = cfg.cmd_trace.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    tracing::warn!(device = %cfg.name, path = %p.display(), "cannot open the command trace: {e}")
                })
                .ok()
        });
        Ok(CmdIf {
            trace,
            transcript: Vec::new(),
            seq: 0,
            t0: Instant::now(),
            last_slot: None,
            health: Health::new(cfg.health_interval, cfg.health_misses),
            cfg,
            mmio,
            dma,
            queue,
            log_size: g.log_cmdq_size,
            log_stride: g.log_cmdq_stride,
            slots: (0..n).map(|_| Slot::default()).collect(),
            token: 0,
            irq: None,
            history: Vec::new(),
            stats: CmdStats::default(),
            dead: None,
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The settings.
    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// Number of command-queue slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every opcode posted, in order.
    pub fn history(&self) -> &[Opcode] {
        &self.history
    }

    /// Every command's record so far, when [`DriverConfig::record_transcript`] is on.
    pub fn transcript(&self) -> &[CmdRecord] {
        &self.transcript
    }

    /// Counters.
    pub fn stats(&self) -> &CmdStats {
        &self.stats
    }

    /// From now on, wait for completions on `irq` and the async EQ (passed to
    /// [`CmdIf::exec`]) instead of only polling.
    pub fn use_events(&mut self, irq: Arc<dyn Interrupt>) {
        self.irq = Some(irq);
    }

    /// Back to polling only (before the async EQ is destroyed).
    pub fn use_polling(&mut self) {
        self.irq = None;
    }

    /// Whether commands complete through events.
    pub fn event_driven(&self) -> bool {
        self.irq.is_some()
    }

    /// Samples the health counter now.
    ///
    /// # Errors
    /// [`DriverError::DeviceDead`] (and every later command fails with it too).
    pub fn check_health(&mut self) -> Result<()> {
        if let Some(d) = &self.dead {
            return Err(d.clone());
        }
        if let Err(e) = self.health.sample(&*self.mmio, &self.cfg.name) {
            self.dead = Some(e.clone());
            return Err(e);
        }
        Ok(())
    }

    fn slot_range(&self, class: SlotClass) -> core::ops::Range<usize> {
        let n = self.slots.len();
        match (class, n) {
            (_, 1) => 0..1,
            (SlotClass::Regular, _) => 0..n - 1,
            (SlotClass::Pages, _) => n - 1..n,
        }
    }

    fn entry_offset(&self, slot: usize) -> usize {
        slot << self.log_stride
    }

    fn read_entry(&self, slot: usize) -> Result<[u8; entry::LEN]> {
        let mut raw = [0u8; entry::LEN];
        self.queue
            .read(self.entry_offset(slot), &mut raw)
            .map_err(|e| DriverError::dma(&self.cfg.name, e))?;
        Ok(raw)
    }

    fn pick_slot(&mut self, class: SlotClass, opcode: Opcode) -> Result<usize> {
        let range = self.slot_range(class);
        let slots = range.len();
        for s in range {
            if self.slots[s].stuck {
                continue;
            }
            // A slot the device still owns (it never completed a command) is stuck too.
            if CmdEntry::new_unchecked(&self.read_entry(s)?[..]).hw_owned() {
                self.slots[s].stuck = true;
                continue;
            }
            return Ok(s);
        }
        Err(DriverError::CmdQueueFull {
            device: self.cfg.name.clone(),
            opcode,
            slots,
        })
    }

    fn mailboxes(
        &mut self,
        slot: usize,
        output: bool,
        blocks: usize,
    ) -> Result<Option<&dyn DmaBuffer>> {
        if blocks == 0 {
            return Ok(None);
        }
        let need = blocks * MAILBOX_STRIDE;
        let s = &mut self.slots[slot];
        let cur = if output { &mut s.outbox } else { &mut s.inbox };
        if !cur.as_ref().is_some_and(|b| b.len() >= need) {
            *cur = Some(
                self.dma
                    .alloc(need, 4096)
                    .map_err(|e| DriverError::dma(&self.cfg.name, e))?,
            );
        }
        Ok(cur.as_deref())
    }

    /// Executes one command: `input` (at least the 16-byte header), expecting `out_len`
    /// bytes of output; returns the output bytes (status not yet checked: parse them with the
    /// command's typed output, which turns a bad status into [`CmdError::Status`]).
    ///
    /// `eq`: the async EQ once it exists (command-completion and page-request events are
    /// collected there while waiting).
    ///
    /// # Errors
    /// [`DriverError::CmdQueueFull`], [`DriverError::CmdTimeout`] (naming the opcode),
    /// [`DriverError::DeviceDead`], [`DriverError::Cmd`] for a delivery error or a malformed
    /// output (mailbox block number, token, signature), [`DriverError::Dma`].
    pub fn exec(
        &mut self,
        input: &[u8],
        out_len: usize,
        class: SlotClass,
        eq: Option<&mut EventQueue>,
    ) -> Result<Vec<u8>> {
        if self.trace.is_none() && !self.cfg.record_transcript {
            return self.exec_inner(input, out_len, class, eq);
        }
        let start = Instant::now();
        self.last_slot = None;
        let r = self.exec_inner(input, out_len, class, eq);
        let hdr = InHeader::parse(input).ok();
        let (status, syndrome, output, error) = match &r {
            Ok(out) => (
                out.first().copied(),
                out.get(4..8)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                out.clone(),
                None,
            ),
            Err(e) => (None, 0, Vec::new(), Some(e.to_string())),
        };
        let rec = CmdRecord {
            seq: self.seq,
            at_us: start.duration_since(self.t0).as_micros() as u64,
            opcode: hdr.map_or(Opcode::Unknown(0), |h| h.opcode),
            op_mod: hdr.map_or(0, |h| h.op_mod),
            slot: self.last_slot,
            status,
            syndrome,
            elapsed: start.elapsed(),
            error,
            input: input.to_vec(),
            output,
        };
        self.seq += 1;
        if let Some(f) = self.trace.as_mut() {
            use std::io::Write;
            // One write per record: several devices may append to one file.
            let mut line = rec.to_json(&self.cfg.name);
            line.push('\n');
            if let Err(e) = f.write_all(line.as_bytes()) {
                tracing::warn!(device = %self.cfg.name, "writing the command trace: {e}; tracing stops");
                self.trace = None;
            }
        }
        if self.cfg.record_transcript {
            self.transcript.push(rec);
        }
        r
    }

    fn exec_inner(
        &mut self,
        input: &[u8],
        out_len: usize,
        class: SlotClass,
        mut eq: Option<&mut EventQueue>,
    ) -> Result<Vec<u8>> {
        if let Some(d) = &self.dead {
            return Err(d.clone());
        }
        let opcode = InHeader::parse(input)
            .map_err(|e| DriverError::cmd(&self.cfg.name, e, " (command input header)"))?
            .opcode;
        let out_len = out_len.max(entry::INLINE_LEN);
        let slot = self.pick_slot(class, opcode)?;
        self.last_slot = Some(slot);
        self.token = match self.token.wrapping_add(1) {
            0 => 1,
            t => t,
        };
        let token = self.token;
        let in_blocks = mailbox::blocks_for(input.len());
        let out_blocks = mailbox::blocks_for(out_len);

        // Input mailboxes: data, next pointer, block number, token, signatures.
        let name = self.cfg.name.clone();
        let mut in_ptr = 0;
        if let Some(buf) = self.mailboxes(slot, false, in_blocks)? {
            in_ptr = buf.iova();
            for i in 0..in_blocks {
                let mut raw = [0u8; mailbox::LEN];
                let mut m = Mailbox::new_unchecked(&mut raw[..]);
                if let Some(r) = mailbox::block_range(input.len(), i) {
                    m.data_mut()[..r.len()].copy_from_slice(&input[r]);
                }
                if i + 1 < in_blocks {
                    m.set_next(buf.iova() + ((i + 1) * MAILBOX_STRIDE) as u64);
                }
                m.set_block_num(i as u32);
                m.set_token(token);
                m.fill_signatures();
                buf.write(i * MAILBOX_STRIDE, &raw)
                    .map_err(|e| DriverError::dma(&name, e))?;
            }
        }
        // Output mailboxes: zeroed data, chained, same token.
        let mut out_ptr = 0;
        if let Some(buf) = self.mailboxes(slot, true, out_blocks)? {
            out_ptr = buf.iova();
            for i in 0..out_blocks {
                let mut raw = [0u8; mailbox::LEN];
                let mut m = Mailbox::new_unchecked(&mut raw[..]);
                if i + 1 < out_blocks {
                    m.set_next(buf.iova() + ((i + 1) * MAILBOX_STRIDE) as u64);
                }
                m.set_block_num(i as u32);
                m.set_token(token);
                m.fill_signatures();
                buf.write(i * MAILBOX_STRIDE, &raw)
                    .map_err(|e| DriverError::dma(&name, e))?;
            }
        }
        // The entry.
        let mut raw = [0u8; entry::LEN];
        {
            let mut e = CmdEntry::new_unchecked(&mut raw[..]);
            e.set_ty(entry::PCI_CMD_XPORT);
            e.set_in_len(input.len() as u32);
            e.set_in_ptr(in_ptr);
            let n = input.len().min(entry::INLINE_LEN);
            e.in_inline_mut()[..n].copy_from_slice(&input[..n]);
            e.set_out_ptr(out_ptr);
            e.set_out_len(out_len as u32);
            e.set_token(token);
            e.set_status_own(entry::OWNER_HW);
            e.fill_signature();
        }
        self.queue
            .write(self.entry_offset(slot), &raw)
            .map_err(|e| DriverError::dma(&self.cfg.name, e))?;
        if let Some(eq) = eq.as_deref_mut() {
            eq.cmd_done &= !(1 << slot);
        }
        barrier::flush_writes();
        self.mmio.write32_be(seg::CMD_DBELL, 1 << slot);
        self.history.push(opcode);
        self.stats.posted += 1;
        tracing::trace!(device = %self.cfg.name, %opcode, slot, token, "command posted");

        let done = self.wait(slot, opcode, eq)?;
        barrier::from_device();
        let e = CmdEntry::new_unchecked(&done[..]);
        let ctx = |what: &str| format!(" ({what} of {opcode}, slot {slot})");
        if let Err(err) = e.check_delivery() {
            self.stats.failed += 1;
            return Err(DriverError::cmd(
                &self.cfg.name,
                err,
                ctx("delivery status"),
            ));
        }
        if self.cfg.verify_output_signatures && !e.signature_ok() {
            self.stats.failed += 1;
            return Err(DriverError::cmd(
                &self.cfg.name,
                CmdError::BadSignature { what: "entry" },
                format!(
                    " (completed entry of {opcode}, slot {slot}: the device's output is                      corrupt; check the PCI link and firmware health)"
                ),
            ));
        }
        let mut out = vec![0u8; out_len];
        out[..entry::INLINE_LEN].copy_from_slice(e.out_inline());
        if let Some(buf) = self.slots[slot]
            .outbox
            .as_deref()
            .filter(|_| out_blocks > 0)
        {
            for i in 0..out_blocks {
                let mut raw = [0u8; mailbox::LEN];
                buf.read(i * MAILBOX_STRIDE, &mut raw)
                    .map_err(|e| DriverError::dma(&self.cfg.name, e))?;
                let m = Mailbox::new_unchecked(&raw[..]);
                let checked = m.check_position(i as u32, token).and_then(|()| {
                    if self.cfg.verify_output_signatures {
                        m.check_signatures()
                    } else {
                        Ok(())
                    }
                });
                if let Err(err) = checked {
                    self.stats.failed += 1;
                    return Err(DriverError::cmd(
                        &self.cfg.name,
                        err,
                        format!(
                            " (output mailbox {i} of {opcode}: expected block {i}, token \
                             {token}; the device wrote a malformed output)"
                        ),
                    ));
                }
                if let Some(r) = mailbox::block_range(out_len, i) {
                    let n = r.len();
                    out[r].copy_from_slice(&m.data()[..n]);
                }
            }
        }
        Ok(out)
    }

    /// Marks a command's outcome in the counters (called by [`super::hw`] after parsing).
    pub(crate) fn record(&mut self, ok: bool) {
        if ok {
            self.stats.ok += 1;
        } else {
            self.stats.failed += 1;
        }
    }

    fn wait(
        &mut self,
        slot: usize,
        opcode: Opcode,
        mut eq: Option<&mut EventQueue>,
    ) -> Result<[u8; entry::LEN]> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let (Some(eq), Some(_)) = (eq.as_deref_mut(), &self.irq) {
                eq.poll(&*self.mmio, &self.cfg.name)?;
                if eq.cmd_done & (1 << slot) != 0 {
                    eq.cmd_done &= !(1 << slot);
                    self.stats.eq_completions += 1;
                }
            }
            let raw = self.read_entry(slot)?;
            if !CmdEntry::new_unchecked(&raw[..]).hw_owned() {
                return Ok(raw);
            }
            let waited = start.elapsed();
            if waited >= self.cfg.cmd_timeout {
                self.slots[slot].stuck = true;
                self.stats.timed_out += 1;
                // A stopped health counter explains the timeout better than the timeout.
                self.check_health()?;
                return Err(DriverError::CmdTimeout {
                    device: self.cfg.name.clone(),
                    opcode,
                    slot,
                    waited,
                });
            }
            if let Err(e) = self.health.poll(&*self.mmio, &self.cfg.name) {
                self.slots[slot].stuck = true;
                self.dead = Some(e.clone());
                return Err(e);
            }
            spins += 1;
            match (&self.irq, spins) {
                (Some(irq), _) => {
                    irq.wait(Duration::from_millis(1));
                }
                (None, 0..=64) => std::hint::spin_loop(),
                (None, 65..=1024) => std::thread::yield_now(),
                (None, _) => std::thread::sleep(Duration::from_micros(100)),
            }
        }
    }

    /// Marks the interface closed: later commands fail with [`DriverError::Closed`].
    pub(crate) fn close(&mut self) {
        self.dead = Some(DriverError::Closed {
            device: self.cfg.name.clone(),
        });
    }
}

/// Turns a layer error while parsing `opcode`'s output into a driver error with a hint.
pub(crate) fn parse_err(device: &str, opcode: Opcode, e: CmdError, what: &str) -> DriverError {
    let hint = match e {
        CmdError::Status { .. } => format!(" ({what})"),
        _ => format!(" (malformed {opcode} output; {what})"),
    };
    DriverError::cmd(device, e, hint)
}
