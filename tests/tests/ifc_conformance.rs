//! Every mlx5 firmware-command layout rdmesh defines (`rdmesh_core::mlx5::cmd`), checked
//! against the Linux headers it restates (Debian `linux-headers-amd64`,
//! `include/linux/mlx5/{mlx5_ifc.h,device.h,driver.h,qp.h,eq.h}`).
//!
//! The headers are parsed here, independently of the generator that wrote the tables:
//! - `mlx5_ifc.h` (and its siblings such as `mlx5_ifc_fpga.h`): every
//!   `struct|union mlx5_ifc_<name>[_bits] { u8 field[0xNN]; ... }`, with arrays
//!   (`u8 pas[][0x40]`, `u8 gid[16][0x8]`, dimensions given by enum constants), nested
//!   members (`struct mlx5_ifc_qpc_bits qpc;`), anonymous unions/structs (flattened) and
//!   unions (size = largest member). Each field's bit offset and width are computed the way
//!   `MLX5_SET` / `__mlx5_bit_off` does.
//! - `device.h` C structures (`mlx5_init_seg`, `health_buffer`, `mlx5_cmd_layout`,
//!   `mlx5_cmd_prot_block`, `mlx5_eqe`, `union ev_data` and its member structs): byte offsets
//!   with C alignment of `u8`/`__be16`/`__be32`/`__be64` and arrays (`__packed` honoured).
//! - Enum entries and `#define`s for opcodes, status codes, event types and other constants.
//!
//! Then: every table in `cmd::ALL` must match field for field (name, bit offset, width, and
//! no named header field missing), every size in `cmd::SIZES`, the common in/out headers,
//! the device-format byte offsets, and every opcode/status/event constant.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rdmesh_core::mlx5::cmd::{
    self, entry, eqe, hca, init_seg, mailbox, qp, resource, vport, CmdStatus, EventType, Opcode,
    PortChangeSubtype,
};
use rdmesh_tests::c_header::{constants, eval, linux_mlx5_dir, strip_comments};
use rdmesh_tests::need;

// ---------------------------------------------------------------------------------------
// Header discovery and tokenizing.

fn tokenize(s: &str) -> Vec<String> {
    let mut toks = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let st = i;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            toks.push(cs[st..i].iter().collect());
        } else {
            toks.push(c.to_string());
            i += 1;
        }
    }
    toks
}

/// Index just past the `}` matching the `{` at `open`.
fn block_end(t: &[String], open: usize) -> usize {
    let mut depth = 0;
    for (i, tok) in t.iter().enumerate().skip(open) {
        if tok == "{" {
            depth += 1;
        } else if tok == "}" {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    panic!("unbalanced braces in header");
}

/// `struct|union NAME { ... }` bodies by name (for mlx5_ifc.h, NAME without `mlx5_ifc_` and
/// `_bits`), with whether each is a union and whether it is `__packed`.
struct Defs {
    bodies: HashMap<String, (bool, bool, Vec<String>)>,
}

fn collect_defs(t: &[String], strip_ifc: bool) -> Defs {
    let mut bodies = HashMap::new();
    let mut i = 0;
    while i + 2 < t.len() {
        if (t[i] == "struct" || t[i] == "union") && t[i + 2] == "{" {
            let end = block_end(t, i + 2);
            let mut name = t[i + 1].clone();
            if strip_ifc {
                name = name
                    .strip_prefix("mlx5_ifc_")
                    .map(|n| n.strip_suffix("_bits").unwrap_or(n).to_string())
                    .unwrap_or(name);
            }
            let packed = t.get(end).is_some_and(|x| x == "__packed");
            bodies.insert(name, (t[i] == "union", packed, t[i + 3..end - 1].to_vec()));
            i = end;
        } else {
            i += 1;
        }
    }
    Defs { bodies }
}

// ---------------------------------------------------------------------------------------
// mlx5_ifc.h bit layouts.

#[derive(Debug, Clone)]
struct BitField {
    offset: u64,
    /// Whole width (0 for a flexible array).
    total: u64,
    /// Width of one element.
    elem: u64,
    flexible: bool,
}

/// Named fields of a structure with their layout.
type Fields = Vec<(String, BitField)>;

struct Ifc {
    defs: Defs,
    consts: HashMap<String, u64>,
    memo: HashMap<String, (Fields, u64)>,
}

impl Ifc {
    fn ifc_name(tag: &str) -> String {
        tag.strip_prefix("mlx5_ifc_")
            .map(|n| n.strip_suffix("_bits").unwrap_or(n).to_string())
            .unwrap_or_else(|| tag.to_string())
    }

    fn dim(&self, tok: &str) -> u64 {
        eval(tok, &self.consts).unwrap_or_else(|| panic!("unknown array dimension {tok}"))
    }

    /// Fields (flattening anonymous members) and size in bits of a member list.
    fn members(&mut self, is_union: bool, t: &[String]) -> (Fields, u64) {
        let mut out = Vec::new();
        let (mut off, mut size) = (0u64, 0u64);
        let mut j = 0;
        while j < t.len() {
            let (name, elem, anon): (Option<String>, u64, Option<Fields>);
            let is_u8 = t[j] == "u8";
            if is_u8 {
                name = Some(t[j + 1].clone());
                elem = 0; // from the last dimension
                anon = None;
                j += 2;
            } else if t[j] == "struct" || t[j] == "union" {
                let open = if t[j + 1] == "{" {
                    Some(j + 1)
                } else if t[j + 2] == "{" {
                    Some(j + 2)
                } else {
                    None
                };
                if let Some(open) = open {
                    let end = block_end(t, open);
                    let (fl, sz) = self.members(t[j] == "union", &t[open + 1..end - 1]);
                    j = end;
                    if t[j] == ";" {
                        name = None;
                    } else {
                        name = Some(t[j].clone());
                        j += 1;
                    }
                    elem = sz;
                    anon = Some(fl);
                } else {
                    let sub = Self::ifc_name(&t[j + 1]);
                    elem = self.layout(&sub).1;
                    name = Some(t[j + 2].clone());
                    anon = None;
                    j += 3;
                }
            } else {
                panic!("unexpected token {:?} in an mlx5_ifc struct", &t[j..j + 4]);
            }
            let mut dims = Vec::new();
            while t[j] == "[" {
                if t[j + 1] == "]" {
                    dims.push(0);
                    j += 2;
                } else {
                    dims.push(self.dim(&t[j + 1]));
                    j += 3;
                }
            }
            assert_eq!(t[j], ";", "member not terminated");
            j += 1;
            let (elem, dims) = if is_u8 {
                let (last, rest) = dims.split_last().expect("u8 member without width");
                (*last, rest.to_vec())
            } else {
                (elem, dims)
            };
            let count: u64 = dims.iter().product();
            let flexible = !dims.is_empty() && count == 0;
            let total = elem * count;
            let at = if is_union { 0 } else { off };
            match (name, anon) {
                (None, Some(fl)) => {
                    for (n, mut f) in fl {
                        f.offset += at;
                        out.push((n, f));
                    }
                }
                (Some(n), _) => out.push((
                    n,
                    BitField {
                        offset: at,
                        total,
                        elem,
                        flexible,
                    },
                )),
                (None, None) => unreachable!(),
            }
            if is_union {
                size = size.max(total);
            } else {
                off += total;
            }
        }
        (out, if is_union { size } else { off })
    }

    fn layout(&mut self, name: &str) -> (Fields, u64) {
        if let Some(l) = self.memo.get(name) {
            return l.clone();
        }
        let (is_union, _, body) = self
            .defs
            .bodies
            .get(name)
            .unwrap_or_else(|| panic!("mlx5_ifc.h has no struct mlx5_ifc_{name}_bits"))
            .clone();
        let l = self.members(is_union, &body);
        self.memo.insert(name.to_string(), l.clone());
        l
    }
}

// ---------------------------------------------------------------------------------------
// device.h C layouts (byte offsets).

struct CDefs {
    defs: Defs,
    consts: HashMap<String, u64>,
}

impl CDefs {
    fn prim(t: &str) -> Option<u64> {
        match t {
            "u8" | "__u8" => Some(1),
            "__be16" | "u16" | "__u16" => Some(2),
            "__be32" | "u32" | "__u32" => Some(4),
            "__be64" | "u64" | "__u64" => Some(8),
            _ => None,
        }
    }

    /// Members (name, byte offset, size; nested named members appear as `outer.inner`
    /// too), size and alignment of a member list.
    fn members(
        &self,
        is_union: bool,
        packed: bool,
        t: &[String],
    ) -> (Vec<(String, u64, u64)>, u64, u64) {
        let mut out = Vec::new();
        let (mut off, mut size, mut align) = (0u64, 0u64, 1u64);
        let mut j = 0;
        while j < t.len() {
            let (sz, al, sub, name);
            if let Some(p) = Self::prim(&t[j]) {
                sz = p;
                al = p;
                sub = Vec::new();
                name = Some(t[j + 1].clone());
                j += 2;
            } else if t[j] == "struct" || t[j] == "union" {
                let is_u = t[j] == "union";
                let open = if t[j + 1] == "{" {
                    Some(j + 1)
                } else if t[j + 2] == "{" {
                    Some(j + 2)
                } else {
                    None
                };
                if let Some(open) = open {
                    let end = block_end(t, open);
                    let pk = t.get(end).is_some_and(|x| x == "__packed");
                    let (fl, s, a) = self.members(is_u, pk, &t[open + 1..end - 1]);
                    j = if pk { end + 1 } else { end };
                    if t[j] == ";" {
                        name = None;
                    } else {
                        name = Some(t[j].clone());
                        j += 1;
                    }
                    sz = s;
                    al = a;
                    sub = fl;
                } else {
                    let (fl, s, a) = self.layout(&t[j + 1]);
                    sz = s;
                    al = a;
                    sub = fl;
                    name = Some(t[j + 2].clone());
                    j += 3;
                }
            } else {
                panic!("unexpected token {:?} in a device.h struct", &t[j..j + 3]);
            }
            let mut count = 1;
            while t[j] == "[" {
                let d = eval(&t[j + 1], &self.consts)
                    .unwrap_or_else(|| panic!("unknown dimension {}", t[j + 1]));
                count *= d;
                j += 3;
            }
            // Attributes such as `__packed` after a member.
            while t[j] != ";" {
                j += 1;
            }
            j += 1;
            let al = if packed { 1 } else { al };
            let at = if is_union { 0 } else { off.div_ceil(al) * al };
            let total = sz * count;
            match name {
                Some(n) => {
                    out.push((n.clone(), at, total));
                    for (sn, so, ss) in sub {
                        out.push((format!("{n}.{sn}"), at + so, ss));
                    }
                }
                None => {
                    for (sn, so, ss) in sub {
                        out.push((sn, at + so, ss));
                    }
                }
            }
            align = align.max(al);
            if is_union {
                size = size.max(total);
            } else {
                off = at + total;
            }
        }
        let end = if is_union { size } else { off };
        (out, end.div_ceil(align) * align, align)
    }

    fn layout(&self, name: &str) -> (Vec<(String, u64, u64)>, u64, u64) {
        let (is_union, packed, body) = self
            .defs
            .bodies
            .get(name)
            .unwrap_or_else(|| panic!("device.h has no struct/union {name}"));
        self.members(*is_union, *packed, body)
    }

    fn offsets(&self, name: &str) -> (BTreeMap<String, u64>, u64) {
        let (fl, size, _) = self.layout(name);
        (fl.into_iter().map(|(n, o, _)| (n, o)).collect(), size)
    }
}

// ---------------------------------------------------------------------------------------

struct Headers {
    ifc: Ifc,
    c: CDefs,
    consts: HashMap<String, u64>,
}

fn headers() -> Option<Headers> {
    let dir = linux_mlx5_dir(&["mlx5_ifc.h", "device.h"]);
    if !need(
        dir.is_some(),
        "Linux mlx5 headers include/linux/mlx5/{mlx5_ifc.h,device.h} (linux-headers-amd64)",
    ) {
        return None;
    }
    let dir = dir.unwrap();
    let read = |p: &Path| strip_comments(&std::fs::read_to_string(p).expect("reading header"));
    let ifc_text = read(&dir.join("mlx5_ifc.h"));
    // Siblings define structures mlx5_ifc.h nests (mlx5_ifc_fpga.h, ...), and constants.
    let mut all_text = ifc_text.clone();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("listing the mlx5 header directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "h") && !p.ends_with("mlx5_ifc.h"))
        .collect();
    names.sort();
    for p in &names {
        all_text.push('\n');
        all_text.push_str(&read(p));
    }
    let consts = constants(&all_text);
    let toks = tokenize(&all_text);
    let ifc = Ifc {
        defs: collect_defs(&toks, true),
        consts: consts.clone(),
        memo: HashMap::new(),
    };
    let dev_toks = tokenize(&read(&dir.join("device.h")));
    let c = CDefs {
        defs: collect_defs(&dev_toks, false),
        consts: consts.clone(),
    };
    Some(Headers { ifc, c, consts })
}

fn constant(h: &Headers, name: &str) -> u64 {
    *h.consts
        .get(name)
        .unwrap_or_else(|| panic!("{name} not found in the Linux mlx5 headers"))
}

#[test]
fn parser_sanity() {
    let Some(mut h) = headers() else { return };
    // Known anchors (also in the shared mlx5 reference): qpc is 232 bytes, ads 44 bytes,
    // create_qp_in is 272 bytes before PAS, and the capability union is 4096 bytes.
    assert_eq!(h.ifc.layout("qpc").1, 0x740);
    assert_eq!(h.ifc.layout("ads").1, 0x160);
    assert_eq!(h.ifc.layout("create_qp_in").1, 0x880);
    assert_eq!(h.ifc.layout("hca_cap_union").1, 0x8000);
    let (_, size) = h.c.offsets("mlx5_cmd_layout");
    assert_eq!(size, 64);
}

#[test]
fn every_ifc_table_matches_mlx5_ifc_h() {
    let Some(mut h) = headers() else { return };
    let mut checked = 0;
    assert_eq!(cmd::ALL.len(), cmd::SIZES.len());
    for ((name, fields), (sname, size)) in cmd::ALL.iter().zip(cmd::SIZES) {
        assert_eq!(name, sname);
        let (hf, hsize) = h.ifc.layout(name);
        assert_eq!(
            u64::from(*size),
            hsize,
            "size of mlx5_ifc_{name}_bits: rdmesh {size:#x} bits, header {hsize:#x}"
        );
        let by_name: HashMap<&str, &BitField> = hf.iter().map(|(n, f)| (n.as_str(), f)).collect();
        for f in *fields {
            let hfield = by_name
                .get(f.name)
                .unwrap_or_else(|| panic!("{name}.{}: no such field in mlx5_ifc.h", f.name));
            let width = if hfield.flexible {
                hfield.elem
            } else {
                hfield.total
            };
            assert_eq!(
                (u64::from(f.bit_offset), u64::from(f.bits)),
                (hfield.offset, width),
                "{name}.{}: rdmesh (offset {:#x}, {} bits), header (offset {:#x}, {} bits)",
                f.name,
                f.bit_offset,
                f.bits,
                hfield.offset,
                width
            );
            checked += 1;
        }
        // Completeness: every named header field is in the table.
        for (n, _) in &hf {
            if !n.starts_with("reserved") {
                assert!(
                    fields.iter().any(|f| f.name == n),
                    "{name}.{n} is in mlx5_ifc.h but not in rdmesh's table"
                );
            }
        }
    }
    assert!(checked > 700, "only {checked} fields checked");
    eprintln!("checked {checked} fields of {} structures", cmd::ALL.len());
}

#[test]
fn common_headers_match_every_command() {
    let Some(mut h) = headers() else { return };
    let mut ins = 0;
    let mut outs = 0;
    for (name, _) in cmd::ALL {
        let (hf, _) = h.ifc.layout(name);
        let find = |n: &str| hf.iter().find(|(x, _)| x == n).map(|(_, f)| f.clone());
        let check = |f: cmd::IfcField, what: &str| {
            let hfld = find(f.name).unwrap_or_else(|| panic!("{name} has no {}", f.name));
            assert_eq!(
                (u64::from(f.bit_offset), u64::from(f.bits)),
                (hfld.offset, hfld.total),
                "{what}.{} vs {name}",
                f.name
            );
        };
        if name.ends_with("_in") {
            check(cmd::mbox_in::OPCODE, "mbox_in");
            check(cmd::mbox_in::OP_MOD, "mbox_in");
            if let Some(uid) = find("uid") {
                assert_eq!((uid.offset, uid.total), (0x10, 0x10), "{name}.uid");
            }
            ins += 1;
        } else if name.ends_with("_out") {
            check(cmd::mbox_out::STATUS, "mbox_out");
            check(cmd::mbox_out::SYNDROME, "mbox_out");
            outs += 1;
        }
    }
    assert!(ins >= 25 && outs >= 25, "{ins} inputs, {outs} outputs");
}

fn check_offsets(h: &Headers, cname: &str, ours: &[(&str, usize)], len: usize) {
    let (theirs, size) = h.c.offsets(cname);
    assert_eq!(len as u64, size, "sizeof(struct {cname})");
    for (n, off) in ours {
        let t = theirs
            .get(*n)
            .unwrap_or_else(|| panic!("struct {cname} has no member {n}"));
        assert_eq!(*off as u64, *t, "offsetof(struct {cname}, {n})");
    }
    // Completeness: every non-reserved top-level member is covered.
    for n in theirs.keys() {
        if !n.contains('.') && !n.starts_with("rsvd") && !n.starts_with("reserved") {
            assert!(
                ours.iter().any(|(o, _)| o == n),
                "struct {cname} member {n} is not in rdmesh's table"
            );
        }
    }
}

#[test]
fn device_h_structs_match() {
    let Some(h) = headers() else { return };
    check_offsets(&h, "mlx5_init_seg", init_seg::OFFSETS, init_seg::LEN);
    let (hb, hsize) = h.c.offsets("health_buffer");
    assert_eq!(hsize, init_seg::HEALTH_LEN as u64);
    assert_eq!(hb.len(), 13, "health_buffer members changed");
    check_offsets(&h, "mlx5_cmd_layout", entry::OFFSETS, entry::LEN);
    check_offsets(&h, "mlx5_cmd_prot_block", mailbox::OFFSETS, mailbox::LEN);
    check_offsets(&h, "mlx5_eqe", eqe::OFFSETS, eqe::LEN);
    let (ev, ev_size) = h.c.offsets("ev_data");
    assert_eq!(
        ev_size,
        (eqe::LEN - eqe::DATA_OFFSET - 4) as u64,
        "union ev_data size"
    );
    for (member, field, off) in eqe::DATA_OFFSETS {
        let key = format!("{member}.{field}");
        assert_eq!(
            ev.get(&key).copied(),
            Some(*off as u64),
            "offset of ev_data.{key}"
        );
    }
    assert_eq!(eqe::DATA_OFFSET as u64, h.c.offsets("mlx5_eqe").0["data"]);
}

#[test]
fn opcodes_statuses_and_constants_match() {
    let Some(h) = headers() else { return };
    for (op, name) in Opcode::ALL {
        assert_eq!(u64::from(u16::from(*op)), constant(&h, name), "{name}");
    }
    for (st, name) in CmdStatus::ALL {
        assert_eq!(u64::from(u8::from(*st)), constant(&h, name), "{name}");
    }
    // Every status device.h defines has a name here.
    for (n, v) in &h.consts {
        if n.starts_with("MLX5_CMD_STAT_") {
            assert!(
                CmdStatus::ALL.iter().any(|(_, m)| m == n),
                "{n} = {v:#x} has no CmdStatus variant"
            );
        }
    }
    for (ev, name) in EventType::ALL {
        assert_eq!(u64::from(u8::from(*ev)), constant(&h, name), "{name}");
    }
    for (st, name) in [
        (PortChangeSubtype::Down, "MLX5_PORT_CHANGE_SUBTYPE_DOWN"),
        (PortChangeSubtype::Active, "MLX5_PORT_CHANGE_SUBTYPE_ACTIVE"),
        (
            PortChangeSubtype::Initialized,
            "MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED",
        ),
        (PortChangeSubtype::Lid, "MLX5_PORT_CHANGE_SUBTYPE_LID"),
        (PortChangeSubtype::Pkey, "MLX5_PORT_CHANGE_SUBTYPE_PKEY"),
        (PortChangeSubtype::Guid, "MLX5_PORT_CHANGE_SUBTYPE_GUID"),
        (
            PortChangeSubtype::ClientRereg,
            "MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG",
        ),
    ] {
        assert_eq!(u64::from(u8::from(st)), constant(&h, name), "{name}");
    }
    let c = |n: &str| constant(&h, n);
    let pairs: &[(&str, u64)] = &[
        ("MLX5_PCI_CMD_XPORT", u64::from(entry::PCI_CMD_XPORT)),
        ("MLX5_MAX_COMMANDS", entry::MAX_COMMANDS as u64),
        ("MLX5_CMD_DATA_BLOCK_SIZE", mailbox::DATA_LEN as u64),
        ("MLX5_NIC_IFC_OFFSET", u64::from(init_seg::NIC_IFC_OFFSET)),
        ("MLX5_RFR_BIT_OFFSET", u64::from(init_seg::RFR_BIT_OFFSET)),
        ("MLX5_ADAPTER_PAGE_SIZE", cmd::ADAPTER_PAGE_SIZE as u64),
        ("MLX5_NUM_SPARE_EQE", u64::from(eqe::NUM_SPARE_EQE)),
        (
            "MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES",
            u64::from(hca::PAGES_BOOT),
        ),
        (
            "MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES",
            u64::from(hca::PAGES_INIT),
        ),
        (
            "MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES",
            u64::from(hca::PAGES_REGULAR),
        ),
        (
            "MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE",
            u64::from(hca::CAP_GENERAL),
        ),
        ("MLX5_SET_HCA_CAP_OP_MOD_ROCE", u64::from(hca::CAP_ROCE)),
        ("HCA_CAP_OPMOD_GET_MAX", u64::from(hca::CAP_MODE_MAX)),
        ("HCA_CAP_OPMOD_GET_CUR", u64::from(hca::CAP_MODE_CUR)),
        (
            "MLX5_REG_HOST_ENDIANNESS",
            u64::from(hca::REG_HOST_ENDIANNESS),
        ),
        ("MLX5_REG_PAOS", u64::from(hca::REG_PAOS)),
        (
            "MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE",
            u64::from(hca::TEARDOWN_GRACEFUL_CLOSE),
        ),
        (
            "MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE",
            u64::from(hca::TEARDOWN_FORCE_CLOSE),
        ),
        (
            "MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN",
            u64::from(hca::TEARDOWN_PREPARE_FAST_TEARDOWN),
        ),
        ("MLX5_CAP_PORT_TYPE_ETH", u64::from(hca::PORT_TYPE_ETH)),
        (
            "MLX5_MKC_ACCESS_MODE_PA",
            u64::from(resource::MKC_ACCESS_MODE_PA),
        ),
        (
            "MLX5_MKC_ACCESS_MODE_MTT",
            u64::from(resource::MKC_ACCESS_MODE_MTT),
        ),
        ("MLX5_QP_ST_RC", u64::from(qp::QP_ST_RC)),
        ("MLX5_QP_ST_UC", u64::from(qp::QP_ST_UC)),
        ("MLX5_QP_ST_UD", u64::from(qp::QP_ST_UD)),
        ("MLX5_QP_PM_MIGRATED", u64::from(qp::QP_PM_MIGRATED)),
        ("MLX5_QP_STATE_RST", u64::from(qp::QP_STATE_RST)),
        ("MLX5_QP_STATE_INIT", u64::from(qp::QP_STATE_INIT)),
        ("MLX5_QP_STATE_RTR", u64::from(qp::QP_STATE_RTR)),
        ("MLX5_QP_STATE_RTS", u64::from(qp::QP_STATE_RTS)),
        ("MLX5_QP_STATE_SQER", u64::from(qp::QP_STATE_SQER)),
        ("MLX5_QP_STATE_SQD", u64::from(qp::QP_STATE_SQD)),
        ("MLX5_QP_STATE_ERR", u64::from(qp::QP_STATE_ERR)),
        ("MLX5_NON_ZERO_RQ", u64::from(qp::QP_RQ_TYPE_REGULAR)),
        ("MLX5_ZERO_LEN_RQ", u64::from(qp::QP_RQ_TYPE_ZERO_SIZE)),
        (
            "MLX5_ROCE_L3_TYPE_IPV4",
            u64::from(vport::ROCE_L3_TYPE_IPV4),
        ),
        (
            "MLX5_ROCE_L3_TYPE_IPV6",
            u64::from(vport::ROCE_L3_TYPE_IPV6),
        ),
        ("MLX5_ROCE_VERSION_1", u64::from(vport::ROCE_VERSION_1)),
        ("MLX5_ROCE_VERSION_2", u64::from(vport::ROCE_VERSION_2)),
    ];
    for (name, ours) in pairs {
        assert_eq!(*ours, c(name), "{name}");
    }
    assert_eq!(
        u64::from(init_seg::FW_RESET_SUPPORTED_BIT),
        1 << c("MLX5_FW_RESET_SUPPORTED_OFFSET")
    );
}
