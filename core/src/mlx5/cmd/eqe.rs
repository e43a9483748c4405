//! The 64-byte event queue entry (Linux `include/linux/mlx5/device.h` `struct mlx5_eqe`,
//! `union ev_data`, `MLX5_EVENT_TYPE_*`; Linux `lib/eq.h` / `eq.c`), its ownership rule and
//! the EQ doorbell.
//!
//! ```text
//! 0x00 reserved  0x01 type  0x02 reserved  0x03 sub_type  0x04..0x1f reserved
//! 0x20 data[28] (per event type, below)    0x3c reserved  0x3e signature  0x3f owner
//! data: cmd        +0x00 BE32 vector (bit i = command slot i completed)
//!       comp       +0x18 BE32 cqn (23..0)
//!       qp_srq     +0x14 u8 resource type, +0x18 BE32 qp/srq number (23..0)
//!       cq_err     +0x00 BE32 cqn (23..0), +0x0b u8 syndrome
//!       port       +0x08 u8 port (7..4)
//!       page_req   +0x00 BE16 ec_function, +0x02 BE16 func_id, +0x04 BE32 num_pages (signed)
//! ```
//! Ownership (Linux eq.c `next_eqe_sw`): the entry at consumer index `ci` of an EQ with
//! `nent` (a power of two) entries belongs to software when `owner & 1 == (ci & nent != 0)`;
//! software initializes every owner byte to 1 ([`OWNER_INIT_VAL`]) and the device writes
//! `(pi / nent) & 1` for its producer index `pi`.

use super::CmdError;
use crate::wire::{read_u16, read_u32, write_u16, write_u32};

mod field {
    use crate::wire::Field;

    pub const TYPE: usize = 0x01;
    pub const SUB_TYPE: usize = 0x03;
    pub const DATA: Field = 0x20..0x3c;
    pub const SIGNATURE: usize = 0x3e;
    pub const OWNER: usize = 0x3f;
}

/// Length of an EQE in bytes.
pub const LEN: usize = field::OWNER + 1;
/// Offset of the event data inside the EQE.
pub const DATA_OFFSET: usize = field::DATA.start;
/// Value software writes in every owner byte before creating the EQ (`MLX5_EQE_OWNER_INIT_VAL`).
pub const OWNER_INIT_VAL: u8 = 1;
/// Offset inside the UAR page of the EQ doorbell that also arms the EQ (Linux lib/eq.h
/// `MLX5_EQ_DOORBEL_OFFSET` 0x40).
pub const EQ_DOORBELL_ARM_OFFSET: usize = 0x40;
/// Offset inside the UAR page of the EQ doorbell that only updates the consumer index (0x48).
pub const EQ_DOORBELL_UPDATE_OFFSET: usize = 0x48;
/// Spare EQEs beyond the requested size (`MLX5_NUM_SPARE_EQE`); software must update the
/// consumer index at least this often.
pub const NUM_SPARE_EQE: u32 = 0x80;

/// Byte offsets of the EQE's fields (device.h `struct mlx5_eqe`), for the conformance test.
pub const OFFSETS: &[(&str, usize)] = &[
    ("type", field::TYPE),
    ("sub_type", field::SUB_TYPE),
    ("data", field::DATA.start),
    ("signature", field::SIGNATURE),
    ("owner", field::OWNER),
];

/// Byte offsets inside `data` of the per-event fields this module reads, as
/// (`union ev_data` member, field, offset), for the conformance test.
pub const DATA_OFFSETS: &[(&str, &str, usize)] = &[
    ("cmd", "vector", 0x00),
    ("comp", "cqn", 0x18),
    ("qp_srq", "type", 0x14),
    ("qp_srq", "qp_srq_n", 0x18),
    ("cq_err", "cqn", 0x00),
    ("cq_err", "syndrome", 0x0b),
    ("port", "port", 0x08),
    ("req_pages", "ec_function", 0x00),
    ("req_pages", "func_id", 0x02),
    ("req_pages", "num_pages", 0x04),
];

enum_with_unknown! {
    /// Event type: byte 1 of an EQE (device.h `MLX5_EVENT_TYPE_*`); bit `n` of a CREATE_EQ
    /// `event_bitmask` subscribes to type `n`.
    pub enum EventType(u8) {
        /// `MLX5_EVENT_TYPE_COMP`: completion on a CQ.
        Comp = 0x00,
        /// `MLX5_EVENT_TYPE_PATH_MIG`.
        PathMig = 0x01,
        /// `MLX5_EVENT_TYPE_COMM_EST`: communication established (first packet on RTR).
        CommEst = 0x02,
        /// `MLX5_EVENT_TYPE_SQ_DRAINED`.
        SqDrained = 0x03,
        /// `MLX5_EVENT_TYPE_CQ_ERROR`: CQ overrun or access error.
        CqError = 0x04,
        /// `MLX5_EVENT_TYPE_WQ_CATAS_ERROR`: local work queue catastrophic error.
        WqCatasError = 0x05,
        /// `MLX5_EVENT_TYPE_PATH_MIG_FAILED`.
        PathMigFailed = 0x07,
        /// `MLX5_EVENT_TYPE_INTERNAL_ERROR`.
        InternalError = 0x08,
        /// `MLX5_EVENT_TYPE_PORT_CHANGE`: port state change (sub_type says which).
        PortChange = 0x09,
        /// `MLX5_EVENT_TYPE_CMD`: command completion (data holds the slot bitmask).
        Cmd = 0x0a,
        /// `MLX5_EVENT_TYPE_PAGE_REQUEST`: the firmware wants (or returns) pages.
        PageRequest = 0x0b,
        /// `MLX5_EVENT_TYPE_PAGE_FAULT`.
        PageFault = 0x0c,
        /// `MLX5_EVENT_TYPE_NIC_VPORT_CHANGE`.
        NicVportChange = 0x0d,
        /// `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`: invalid request on a work queue.
        WqInvalReqError = 0x10,
        /// `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`: local access violation on a work queue.
        WqAccessError = 0x11,
        /// `MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`.
        SrqCatasError = 0x12,
        /// `MLX5_EVENT_TYPE_SRQ_LAST_WQE`: last WQE reached (QP in error with an SRQ).
        SrqLastWqe = 0x13,
        /// `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT`.
        SrqRqLimit = 0x14,
        /// `MLX5_EVENT_TYPE_GENERAL_EVENT`.
        GeneralEvent = 0x22,
    }
}

impl EventType {
    /// Every named type with its device.h name.
    pub const ALL: &'static [(EventType, &'static str)] = &[
        (EventType::Comp, "MLX5_EVENT_TYPE_COMP"),
        (EventType::PathMig, "MLX5_EVENT_TYPE_PATH_MIG"),
        (EventType::CommEst, "MLX5_EVENT_TYPE_COMM_EST"),
        (EventType::SqDrained, "MLX5_EVENT_TYPE_SQ_DRAINED"),
        (EventType::CqError, "MLX5_EVENT_TYPE_CQ_ERROR"),
        (EventType::WqCatasError, "MLX5_EVENT_TYPE_WQ_CATAS_ERROR"),
        (EventType::PathMigFailed, "MLX5_EVENT_TYPE_PATH_MIG_FAILED"),
        (EventType::InternalError, "MLX5_EVENT_TYPE_INTERNAL_ERROR"),
        (EventType::PortChange, "MLX5_EVENT_TYPE_PORT_CHANGE"),
        (EventType::Cmd, "MLX5_EVENT_TYPE_CMD"),
        (EventType::PageRequest, "MLX5_EVENT_TYPE_PAGE_REQUEST"),
        (EventType::PageFault, "MLX5_EVENT_TYPE_PAGE_FAULT"),
        (
            EventType::NicVportChange,
            "MLX5_EVENT_TYPE_NIC_VPORT_CHANGE",
        ),
        (
            EventType::WqInvalReqError,
            "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR",
        ),
        (EventType::WqAccessError, "MLX5_EVENT_TYPE_WQ_ACCESS_ERROR"),
        (EventType::SrqCatasError, "MLX5_EVENT_TYPE_SRQ_CATAS_ERROR"),
        (EventType::SrqLastWqe, "MLX5_EVENT_TYPE_SRQ_LAST_WQE"),
        (EventType::SrqRqLimit, "MLX5_EVENT_TYPE_SRQ_RQ_LIMIT"),
        (EventType::GeneralEvent, "MLX5_EVENT_TYPE_GENERAL_EVENT"),
    ];

    /// `true` for the events whose data is `qp_srq` (a QP/SRQ number and resource type).
    pub fn is_qp_event(self) -> bool {
        matches!(
            self,
            EventType::PathMig
                | EventType::CommEst
                | EventType::SqDrained
                | EventType::WqCatasError
                | EventType::PathMigFailed
                | EventType::WqInvalReqError
                | EventType::WqAccessError
                | EventType::SrqCatasError
                | EventType::SrqLastWqe
                | EventType::SrqRqLimit
        )
    }
}

enum_with_unknown! {
    /// `sub_type` of a port change event (device.h `MLX5_PORT_CHANGE_SUBTYPE_*`).
    pub enum PortChangeSubtype(u8) {
        /// `MLX5_PORT_CHANGE_SUBTYPE_DOWN`.
        Down = 1,
        /// `MLX5_PORT_CHANGE_SUBTYPE_ACTIVE`.
        Active = 4,
        /// `MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED`.
        Initialized = 5,
        /// `MLX5_PORT_CHANGE_SUBTYPE_LID`.
        Lid = 6,
        /// `MLX5_PORT_CHANGE_SUBTYPE_PKEY`.
        Pkey = 7,
        /// `MLX5_PORT_CHANGE_SUBTYPE_GUID`.
        Guid = 8,
        /// `MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG`.
        ClientRereg = 9,
    }
}

/// The value written to the EQ doorbell (`UAR + 0x40` to arm, `+ 0x48` to update only):
/// `eqn << 24 | (ci & 0xffffff)`, stored big-endian (Linux lib/eq.h `eq_update_ci`).
pub const fn eq_doorbell_value(eqn: u8, ci: u32) -> u32 {
    (eqn as u32) << 24 | (ci & 0x00ff_ffff)
}

/// The owner value the device writes for producer index `pi` in an EQ of `nent` entries
/// (`nent` a power of two).
pub const fn owner_for(pi: u32, nent: u32) -> u8 {
    (pi & nent != 0) as u8
}

mlx5_view!(Eqe, "a 64-byte event queue entry", cmd);

impl<T: AsRef<[u8]>> Eqe<T> {
    /// The raw event type byte.
    pub fn event_type(&self) -> EventType {
        EventType::from(self.buffer.as_ref()[field::TYPE])
    }
    /// `sub_type`.
    pub fn sub_type(&self) -> u8 {
        self.buffer.as_ref()[field::SUB_TYPE]
    }
    /// The 28 data bytes.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }
    /// `signature`.
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// `owner`.
    pub fn owner(&self) -> u8 {
        self.buffer.as_ref()[field::OWNER]
    }
    /// `true` when the entry at consumer index `ci` of an EQ of `nent` entries holds a new
    /// event (see the module docs).
    pub fn sw_owned(&self, ci: u32, nent: u32) -> bool {
        (self.owner() & 1) == owner_for(ci, nent)
    }
    fn data_u32(&self, off: usize) -> u32 {
        read_u32(self.data(), off..off + 4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Eqe<T> {
    /// Sets the event type.
    pub fn set_event_type(&mut self, v: EventType) {
        self.buffer.as_mut()[field::TYPE] = v.into();
    }
    /// Sets `sub_type`.
    pub fn set_sub_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::SUB_TYPE] = v;
    }
    /// The 28 data bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
    /// Sets `owner`.
    pub fn set_owner(&mut self, v: u8) {
        self.buffer.as_mut()[field::OWNER] = v;
    }
}

/// What a QP/SRQ-affiliated event (the `qp_srq` data) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpEvent {
    /// The event (one of [`EventType::is_qp_event`]).
    pub event: EventType,
    /// Resource type (`MLX5_EVENT_QUEUE_TYPE_*`: 0 QP, 1 RQ, 2 SQ, 6 DCT).
    pub res_type: u8,
    /// QP (or SRQ/RQ/SQ) number, 24 bits.
    pub qpn: u32,
}

/// A parsed event queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EqeRepr {
    /// A completion was written to CQ `cqn`.
    Comp {
        /// The CQ number, 24 bits.
        cqn: u32,
    },
    /// Commands completed: bit `i` of `vector` is command queue slot `i`.
    Cmd {
        /// The slot bitmask.
        vector: u32,
    },
    /// The firmware asks for `num_pages` pages (negative: it returns `-num_pages` pages).
    PageRequest {
        /// `ec_function` (bit 15: embedded-CPU function; 0 on a host).
        ec_function: u16,
        /// The function the pages are for (0 for this PF).
        func_id: u16,
        /// Pages requested (> 0) or to reclaim (< 0).
        num_pages: i32,
    },
    /// Port `port` changed state.
    PortChange {
        /// Port number, 1-based (bits 7..4 of data byte 8).
        port: u8,
        /// What happened.
        sub_type: PortChangeSubtype,
    },
    /// CQ `cqn` failed (overrun or access error).
    CqError {
        /// The CQ number, 24 bits.
        cqn: u32,
        /// The error syndrome (1 = overrun, 2 = access violation, Linux cq.c).
        syndrome: u8,
    },
    /// A QP/SRQ event (path migration, communication established, last WQE, catastrophic,
    /// invalid request or access errors).
    Qp(QpEvent),
    /// Any other event: its type, sub-type and raw data.
    Other {
        /// The event type.
        event: EventType,
        /// `sub_type`.
        sub_type: u8,
        /// The 28 data bytes.
        data: [u8; 28],
    },
}

impl EqeRepr {
    /// Decodes an EQE (it does not check ownership; see [`Eqe::sw_owned`]).
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a buffer shorter than 64 bytes.
    pub fn parse<T: AsRef<[u8]>>(e: &Eqe<T>) -> Result<EqeRepr, CmdError> {
        e.check_len()?;
        let d = e.data();
        let ev = e.event_type();
        Ok(match ev {
            EventType::Comp => EqeRepr::Comp {
                cqn: e.data_u32(0x18) & 0x00ff_ffff,
            },
            EventType::Cmd => EqeRepr::Cmd {
                vector: e.data_u32(0),
            },
            EventType::PageRequest => EqeRepr::PageRequest {
                ec_function: read_u16(d, 0..2),
                func_id: read_u16(d, 2..4),
                num_pages: e.data_u32(4) as i32,
            },
            EventType::PortChange => EqeRepr::PortChange {
                port: d[8] >> 4,
                sub_type: PortChangeSubtype::from(e.sub_type()),
            },
            EventType::CqError => EqeRepr::CqError {
                cqn: e.data_u32(0) & 0x00ff_ffff,
                syndrome: d[0x0b],
            },
            ev if ev.is_qp_event() => EqeRepr::Qp(QpEvent {
                event: ev,
                res_type: d[0x14],
                qpn: e.data_u32(0x18) & 0x00ff_ffff,
            }),
            ev => {
                let mut data = [0u8; 28];
                data.copy_from_slice(d);
                EqeRepr::Other {
                    event: ev,
                    sub_type: e.sub_type(),
                    data,
                }
            }
        })
    }

    /// The event type this entry carries.
    pub fn event_type(&self) -> EventType {
        match self {
            EqeRepr::Comp { .. } => EventType::Comp,
            EqeRepr::Cmd { .. } => EventType::Cmd,
            EqeRepr::PageRequest { .. } => EventType::PageRequest,
            EqeRepr::PortChange { .. } => EventType::PortChange,
            EqeRepr::CqError { .. } => EventType::CqError,
            EqeRepr::Qp(q) => q.event,
            EqeRepr::Other { event, .. } => *event,
        }
    }

    /// Writes the entry as the device does: zeroes it, writes type, sub-type and data, then
    /// the owner byte `owner` last.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer; [`CmdError::BadField`] when a 24-bit number
    /// does not fit, a port is above 15, or a [`EqeRepr::Qp`] / [`EqeRepr::Other`] carries an
    /// event type another variant owns.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        e: &mut Eqe<T>,
        owner: u8,
    ) -> Result<(), CmdError> {
        e.check_len()?;
        let check24 = |v: u32, field: &'static str| {
            if v > 0x00ff_ffff {
                Err(CmdError::BadField { field })
            } else {
                Ok(v)
            }
        };
        let mut data = [0u8; 28];
        let mut sub_type = 0;
        match *self {
            EqeRepr::Comp { cqn } => write_u32(&mut data, 0x18..0x1c, check24(cqn, "cqn")?),
            EqeRepr::Cmd { vector } => write_u32(&mut data, 0..4, vector),
            EqeRepr::PageRequest {
                ec_function,
                func_id,
                num_pages,
            } => {
                write_u16(&mut data, 0..2, ec_function);
                write_u16(&mut data, 2..4, func_id);
                write_u32(&mut data, 4..8, num_pages as u32);
            }
            EqeRepr::PortChange { port, sub_type: s } => {
                if port > 0xf {
                    return Err(CmdError::BadField { field: "port" });
                }
                data[8] = port << 4;
                sub_type = s.into();
            }
            EqeRepr::CqError { cqn, syndrome } => {
                write_u32(&mut data, 0..4, check24(cqn, "cqn")?);
                data[0x0b] = syndrome;
            }
            EqeRepr::Qp(q) => {
                if !q.event.is_qp_event() {
                    return Err(CmdError::BadField { field: "type" });
                }
                data[0x14] = q.res_type;
                write_u32(&mut data, 0x18..0x1c, check24(q.qpn, "qp_srq_n")?);
            }
            EqeRepr::Other {
                event,
                sub_type: s,
                data: d,
            } => {
                let owned = matches!(
                    event,
                    EventType::Comp
                        | EventType::Cmd
                        | EventType::PageRequest
                        | EventType::PortChange
                        | EventType::CqError
                ) || event.is_qp_event();
                if owned {
                    return Err(CmdError::BadField { field: "type" });
                }
                data = d;
                sub_type = s;
            }
        }
        e.buffer.as_mut()[..LEN].fill(0);
        e.set_event_type(self.event_type());
        e.set_sub_type(sub_type);
        e.data_mut().copy_from_slice(&data);
        e.set_owner(owner);
        Ok(())
    }

    /// Bytes [`EqeRepr::emit`] writes: 64.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(r: EqeRepr) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        r.emit(&mut Eqe::new_checked(&mut b[..]).unwrap(), 1)
            .unwrap();
        assert_eq!(EqeRepr::parse(&Eqe::new_unchecked(&b[..])), Ok(r));
        b
    }

    #[test]
    fn known_events_round_trip_at_linux_offsets() {
        let b = round(EqeRepr::PageRequest {
            ec_function: 0,
            func_id: 0,
            num_pages: -5,
        });
        assert_eq!(b[1], 0x0b);
        assert_eq!(&b[0x24..0x28], &(-5i32).to_be_bytes());
        assert_eq!(b[0x3f], 1);
        let b = round(EqeRepr::Cmd {
            vector: 0x8000_0001,
        });
        assert_eq!(&b[0x20..0x24], &[0x80, 0, 0, 1]);
        let b = round(EqeRepr::PortChange {
            port: 1,
            sub_type: PortChangeSubtype::Active,
        });
        assert_eq!((b[3], b[0x28]), (4, 0x10));
        let b = round(EqeRepr::CqError {
            cqn: 0x12_3456,
            syndrome: 1,
        });
        assert_eq!((b[1], b[0x21], b[0x2b]), (4, 0x12, 1));
        let b = round(EqeRepr::Qp(QpEvent {
            event: EventType::WqCatasError,
            res_type: 0,
            qpn: 0xabcdef,
        }));
        assert_eq!(&b[0x38..0x3c], &[0, 0xab, 0xcd, 0xef]);
        round(EqeRepr::Comp { cqn: 9 });
        round(EqeRepr::Other {
            event: EventType::GeneralEvent,
            sub_type: 3,
            data: [7; 28],
        });
    }

    #[test]
    fn bad_emits() {
        let mut b = [0u8; LEN];
        let mut e = Eqe::new_unchecked(&mut b[..]);
        assert!(EqeRepr::Comp { cqn: 1 << 24 }.emit(&mut e, 0).is_err());
        assert!(EqeRepr::Qp(QpEvent {
            event: EventType::Cmd,
            res_type: 0,
            qpn: 1
        })
        .emit(&mut e, 0)
        .is_err());
        assert!(EqeRepr::Other {
            event: EventType::Cmd,
            sub_type: 0,
            data: [0; 28]
        }
        .emit(&mut e, 0)
        .is_err());
        assert!(EqeRepr::parse(&Eqe::new_unchecked(&[0u8; 10][..])).is_err());
    }

    #[test]
    fn ownership() {
        let mut b = [0u8; LEN];
        b[0x3f] = OWNER_INIT_VAL;
        let e = Eqe::new_unchecked(&b[..]);
        assert!(!e.sw_owned(0, 256));
        assert!(e.sw_owned(256, 256));
        assert_eq!(owner_for(255, 256), 0);
        assert_eq!(owner_for(256, 256), 1);
        assert_eq!(eq_doorbell_value(3, 0x1_000_005), 0x0300_0005);
    }
}
