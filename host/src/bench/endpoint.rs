//! One end of a benchmark connection: device, PD, CQ, QP and buffer, and connecting the QP
//! from the peer's [`QpInfo`].

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::oob::QpInfo;
use crate::bench::spin::AdaptiveSpin;
use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::verbs::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, ProviderKind, QpAttr, QpCap,
    QpState, QueuePair, SoftConfig, WcStatus, WorkCompletion, ROCE_V2_UDP_PORT,
};

use crate::bench::spin::ACTIVE_SPIN;
pub use crate::bench::spin::{spin_time, SPIN_TIME};

/// Send queue depth of benchmark QPs (perftest's default `-t 128`).
pub const TX_DEPTH: u32 = 128;
/// Receive queue depth of benchmark QPs.
pub const RX_DEPTH: u32 = 512;

/// How a benchmark end opens its device.
#[derive(Debug, Clone)]
pub struct DeviceChoice {
    /// Local address (the GID).
    pub addr: IpAddr,
    /// UDP port; `None` = 4791, falling back to an ephemeral port when 4791 is taken.
    pub udp_port: Option<u16>,
    /// Capture to record packets in.
    pub capture: Option<Arc<Capture>>,
    /// Record received packets too.
    pub capture_received: bool,
    /// Receive through a raw socket and verify ICRCs over the real IPv4 header
    /// (`SoftConfig::raw_receive`; needed for peers such as rxe; root or CAP_NET_RAW).
    pub raw_receive: bool,
    /// Test fault: corrupt the ICRC of this sent packet (1-based; `SoftConfig::corrupt_tx_icrc`).
    pub corrupt_tx_icrc: Option<u64>,
    /// Seeded impairment of this end's packets (`SoftConfig::impair`).
    pub impair: Option<crate::soft::Impairment>,
    /// Turns `impair` on and off while the run goes (`SoftConfig::impair_switch`).
    pub impair_switch: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// DCQCN congestion control of this end's QP (`SoftConfig::dcqcn`; `None` = no rate limit).
    pub dcqcn: Option<rdmesh_core::cc::DcqcnConfig>,
    /// The provider (`--provider`): soft, the device model on a UDP socket, or a vfio
    /// function.
    pub provider: ProviderKind,
}

/// A benchmark end.
pub struct Endpoint {
    /// The device.
    pub device: Device,
    /// Completions of sends and receives.
    pub cq: CompletionQueue,
    /// The RC QP.
    pub qp: QueuePair,
    /// The registered buffer.
    pub mr: MemoryRegion,
    /// Initial send PSN.
    pub psn: u32,
    /// How long this end's waits spin before they block ([`AdaptiveSpin`]).
    pub spin: AdaptiveSpin,
}

impl Endpoint {
    /// Opens the device, registers `buf_len` bytes and creates a QP in RESET.
    pub fn open(choice: &DeviceChoice, buf_len: usize) -> Result<Endpoint> {
        if choice.provider != ProviderKind::Soft {
            let soft_only = [
                (choice.capture.is_some(), "--pcap"),
                (choice.impair.is_some(), "--impair"),
                (choice.dcqcn.is_some(), "--dcqcn"),
                (choice.corrupt_tx_icrc.is_some(), "--corrupt-icrc-packet"),
            ];
            if let Some((_, flag)) = soft_only.iter().find(|(on, _)| *on) {
                return Err(Error::Config(format!(
                    "{flag} works with the soft provider only, not --provider {}",
                    choice.provider
                )));
            }
        }
        let open = |cfg: SoftConfig| Device::open_provider(&choice.provider, cfg);
        let mut cfg = SoftConfig::new(choice.addr);
        cfg.capture = choice.capture.clone();
        cfg.capture_received = choice.capture_received;
        cfg.raw_receive = choice.raw_receive;
        cfg.corrupt_tx_icrc = choice.corrupt_tx_icrc;
        cfg.impair = choice.impair;
        cfg.impair_switch = choice.impair_switch.clone();
        cfg.dcqcn = choice.dcqcn;
        let device = match choice.udp_port {
            Some(p) => {
                cfg.udp_port = p;
                open(cfg)?
            }
            None => {
                cfg.udp_port = ROCE_V2_UDP_PORT;
                match open(cfg.clone()) {
                    Err(Error::Bind { source, .. })
                        if source.kind() == std::io::ErrorKind::AddrInUse =>
                    {
                        tracing::info!(addr = %choice.addr, "UDP port 4791 is taken on this address; using an ephemeral port (rdmesh peers learn it out of band)");
                        cfg.udp_port = 0;
                        open(cfg)?
                    }
                    r => r?,
                }
            }
        };
        let pd = device.alloc_pd()?;
        let mr = pd.register(
            buf_len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )?;
        let cq = device.create_cq(2 * (TX_DEPTH + RX_DEPTH) as usize)?;
        let qp = pd.create_qp(
            &cq,
            &cq,
            QpCap {
                max_send_wr: TX_DEPTH,
                max_recv_wr: RX_DEPTH,
                max_sge: 1,
            },
        )?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            ),
            ..Default::default()
        })?;
        let psn = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1)
            ^ qp.qp_num().wrapping_mul(0x9e37))
            & 0xff_ffff;
        Ok(Endpoint {
            device,
            cq,
            qp,
            mr,
            psn,
            spin: AdaptiveSpin::default(),
        })
    }

    /// What the peer needs to know about this end.
    pub fn info(&self) -> QpInfo {
        let local = self.device.local_addr();
        QpInfo {
            qpn: self.qp.qp_num(),
            psn: self.psn,
            rkey: self.mr.rkey(),
            va: self.mr.addr(),
            len: self.mr.len() as u64,
            gid: local.ip(),
            udp_port: local.port(),
            mtu: self.device.info().active_mtu().bytes(),
            // A server answers with the mode it chose (`oob::negotiate`).
            recovery: super::oob::RECOVERY_GO_BACK_N,
            mac: self.device.mac(),
        }
    }

    /// vfio provider and model: records the peer's MAC for the QP's address path — the one
    /// its QP info carried, else the kernel's neighbour entry ([`crate::topo::neigh`]).
    ///
    /// Errors: [`Error::Config`] when neither knows it.
    fn learn_peer_mac(&self, peer: &QpInfo) -> Result<()> {
        if self.device.provider() == "soft" {
            return Ok(());
        }
        let mac = peer
            .mac
            .or_else(|| crate::topo::neigh::peer_mac(peer.gid))
            .ok_or_else(|| {
                Error::Config(format!(
                    "{} ({} provider) cannot learn the MAC of peer {}: its out-of-band QP info                      carried none (a peer of an older rdmesh or perftest) and the kernel has no                      neighbour entry for it. Under VFIO there is no ARP: run an rdmesh of this                      version on the peer, or make the kernel resolve the address (a netdev on                      that subnet)",
                    self.device.name(),
                    self.device.provider(),
                    peer.gid
                ))
            })?;
        self.device.set_neighbor(peer.gid, mac);
        Ok(())
    }

    /// Moves the QP through RTR and RTS towards `peer` with path MTU `mtu` (16 READs
    /// outstanding each way).
    ///
    /// Errors: as [`QueuePair::modify`].
    pub fn connect(&self, peer: &QpInfo, mtu: Mtu) -> Result<()> {
        self.connect_with(peer, mtu, 16)
    }

    /// As [`connect`](Self::connect), with at most `max_rd_atomic` RDMA READs outstanding as
    /// initiator (the peer's responder resources); this end accepts 16.
    ///
    /// Errors: as [`QueuePair::modify`].
    pub fn connect_with(&self, peer: &QpInfo, mtu: Mtu, max_rd_atomic: u8) -> Result<()> {
        self.learn_peer_mac(peer)?;
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AhAttr {
                dgid: peer.gid,
                udp_port: peer.udp_port,
            }),
            path_mtu: Some(mtu),
            dest_qp_num: Some(peer.qpn),
            rq_psn: Some(peer.psn),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..Default::default()
        })?;
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(self.psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(max_rd_atomic),
            ..Default::default()
        })?;
        tracing::info!(qpn = format_args!("{:#08x}", self.qp.qp_num()), peer_qpn = format_args!("{:#08x}", peer.qpn), peer = %peer.gid, mtu = mtu.bytes(), "connected");
        Ok(())
    }

    /// Waits for one completion: busy-polls (driving the device on this thread) for
    /// [`AdaptiveSpin::budget`] (longer while packets flow, below), then blocks on the device;
    /// fails after `timeout` without one, or on an error status, naming the QP, the peer and
    /// the counters.
    ///
    /// On a host with CPUs to spare ([`crate::bench::spin::spin_while_active`]) the spin goes
    /// on while packets keep coming (one within [`ACTIVE_SPIN`]), as perftest's busy-poll
    /// does: a bandwidth sender whose completions are hundreds of µs apart (1 MiB messages)
    /// keeps receiving the ACKs between them without sleeping, so an ACK's delivery wakes no
    /// thread. A spin that blocked, or never saw the completion, counts as a miss.
    ///
    /// Without a spin (one CPU, or spins that keep missing) the wait is one blocking receive on
    /// the device's socket per packet, as a UDP ping-pong's is: the CQ is looked at without
    /// driving the device first, which would cost a non-blocking receive that finds nothing
    /// (`EAGAIN`) before every blocking one, and the clock is read only when that first wait
    /// came back without a completion (the timeout counts from then).
    pub fn next_completion(&self, timeout: Duration) -> Result<WorkCompletion> {
        let spin = self.spin.budget();
        let keep_spinning = crate::bench::spin::spin_while_active();
        let mut start: Option<Instant> = None;
        // When the spin last saw the device process a packet (with `keep_spinning`).
        let mut active: Option<Instant> = None;
        let mut blocked = false;
        loop {
            let ready = if spin.is_zero() || blocked {
                self.cq.poll_ready()
            } else {
                match self.cq.poll_ready() {
                    Some(wc) => Some(wc),
                    None => {
                        if self.device.progress(None) > 0 && keep_spinning {
                            active = Some(Instant::now());
                        }
                        self.cq.poll_ready()
                    }
                }
            };
            let wc = match ready {
                Some(wc) => Some(wc),
                None => {
                    let (elapsed, spinning) = if spin.is_zero() && !blocked {
                        // No spin: block at once; the clock starts after the first wait.
                        (Duration::ZERO, false)
                    } else {
                        let now = Instant::now();
                        let elapsed = now - *start.get_or_insert(now);
                        let flowing = active.is_some_and(|a| now - a < ACTIVE_SPIN);
                        (elapsed, elapsed < spin || flowing)
                    };
                    if !blocked && spinning {
                        continue;
                    }
                    if !spin.is_zero() && !blocked {
                        self.spin.record(false);
                    }
                    blocked = true;
                    let left = timeout.saturating_sub(elapsed);
                    if left.is_zero() {
                        return Err(Error::Bench(format!(
                            "QP {:#08x}: no completion within {:?}; device counters {:?}; QP counters {:?}",
                            self.qp.qp_num(),
                            timeout,
                            self.device.counters(),
                            self.qp.counters()
                        )));
                    }
                    // Block on the device (soft provider: in the kernel, on its socket): a
                    // CPU shared with the peer must let it run.
                    self.cq.wait_one(left.min(Duration::from_millis(1)))
                }
            };
            let Some(wc) = wc else { continue };
            if !spin.is_zero() && !blocked && start.is_some() {
                self.spin.record(true);
            }
            if wc.status != WcStatus::Success {
                return Err(Error::Bench(format!(
                    "QP {:#08x}: work completion wr_id {} failed with {:?} ({:?}); device counters {:?}; QP counters {:?}",
                    self.qp.qp_num(),
                    wc.wr_id,
                    wc.status,
                    wc.opcode,
                    self.device.counters(),
                    self.qp.counters()
                )));
            }
            return Ok(wc);
        }
    }
}

/// The path MTU both ends can use: the largest IB MTU ≤ both ends' active MTUs and the
/// requested one.
pub fn common_mtu(local: u32, remote: u32, requested: Option<u32>) -> Result<Mtu> {
    let limit = local.min(remote).min(requested.unwrap_or(u32::MAX));
    [
        Mtu::Mtu4096,
        Mtu::Mtu2048,
        Mtu::Mtu1024,
        Mtu::Mtu512,
        Mtu::Mtu256,
    ]
    .into_iter()
    .find(|m| m.bytes() <= limit)
    .ok_or_else(|| {
        Error::Config(format!(
            "no IB path MTU fits {limit} bytes (local {local}, remote {remote})"
        ))
    })
}
