//! [`ModelLink`]: an in-process Ethernet wire between two model devices, optionally
//! recording every frame (both directions) to a pcap file (link type Ethernet, no FCS).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

use super::device::Device;
use super::ModelDevice;

/// Errors of [`ModelLink::connect`].
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A device is already connected to a link.
    #[error("model device {0} is already connected to a link")]
    AlreadyLinked(&'static str),
    /// The pcap file could not be created.
    #[error("cannot create pcap file {path}: {reason}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// The shared half of a link, held by both devices.
pub struct LinkShared {
    ends: [Weak<Device>; 2],
    pcap: Option<Mutex<PcapWriter<File>>>,
    frames: AtomicU64,
}

impl std::fmt::Debug for LinkShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkShared")
            .field("frames", &self.frames)
            .field("pcap", &self.pcap.is_some())
            .finish()
    }
}

impl LinkShared {
    /// Both devices still alive.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.ends.iter().filter_map(Weak::upgrade).collect()
    }

    /// Carries `frames` from `from` to the other end (recording each).
    pub fn deliver(&self, from: &Arc<Device>, frames: Vec<Vec<u8>>) {
        let to = self
            .ends
            .iter()
            .filter_map(Weak::upgrade)
            .find(|d| !Arc::ptr_eq(d, from));
        for f in &frames {
            self.frames.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = &self.pcap {
                let ts = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                let pkt = PcapPacket::new(ts, f.len() as u32, f);
                if let Err(e) = p
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .write_packet(&pkt)
                {
                    tracing::warn!(error = %e, "model link: pcap write failed");
                }
            }
        }
        if let Some(to) = to {
            to.inbox
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(frames);
        }
    }
}

/// A wire between two [`ModelDevice`]s. Frames a device sends are queued at the other and
/// processed by the progress loop that runs after every MMIO store (see the module docs of
/// [`crate::model`]); [`progress`](ModelLink::progress) runs it explicitly (timers).
#[derive(Debug, Clone)]
pub struct ModelLink {
    shared: Arc<LinkShared>,
    a: Arc<Device>,
}

impl ModelLink {
    /// Connects `a` and `b`, recording to `pcap` (created or truncated) when given.
    ///
    /// Errors: [`LinkError::AlreadyLinked`], [`LinkError::Pcap`].
    pub fn connect(
        a: &ModelDevice,
        b: &ModelDevice,
        pcap: Option<&Path>,
    ) -> Result<ModelLink, LinkError> {
        for (name, d) in [("a", &a.dev), ("b", &b.dev)] {
            if d.link.lock().unwrap_or_else(|p| p.into_inner()).is_some()
                || d.port.lock().unwrap_or_else(|p| p.into_inner()).is_some()
            {
                return Err(LinkError::AlreadyLinked(name));
            }
        }
        let pcap = match pcap {
            None => None,
            Some(path) => {
                let err = |e: &dyn std::fmt::Display| LinkError::Pcap {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                };
                let file = File::create(path).map_err(|e| err(&e))?;
                let header = PcapHeader {
                    datalink: DataLink::ETHERNET,
                    ..Default::default()
                };
                Some(Mutex::new(
                    PcapWriter::with_header(file, header).map_err(|e| err(&e))?,
                ))
            }
        };
        let shared = Arc::new(LinkShared {
            ends: [Arc::downgrade(&a.dev), Arc::downgrade(&b.dev)],
            pcap,
            frames: AtomicU64::new(0),
        });
        for d in [&a.dev, &b.dev] {
            *d.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(shared.clone());
        }
        Ok(ModelLink {
            shared,
            a: a.dev.clone(),
        })
    }

    /// Frames carried so far (both directions).
    pub fn frames(&self) -> u64 {
        self.shared.frames.load(Ordering::Relaxed)
    }

    /// Runs both devices until neither has work (frames, timers due, rung queues).
    pub fn progress(&self) {
        self.a.pump();
    }

    /// Starts a thread that calls [`progress`](Self::progress) every `period` (for
    /// retransmission and RNR timers when nothing else touches the devices); it stops when
    /// the returned [`Ticker`] is dropped.
    pub fn spawn_ticker(&self, period: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let dev = Arc::downgrade(&self.a);
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match dev.upgrade() {
                    Some(d) => d.pump(),
                    None => return,
                }
                std::thread::sleep(period);
            }
        });
        Ticker {
            stop,
            handle: Some(handle),
        }
    }
}

/// A background progress thread; stopped and joined on drop.
#[derive(Debug)]
pub struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
