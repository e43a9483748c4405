# Generates core/src/mlx5/cmd/layout.rs from Linux mlx5_ifc.h (Debian linux-headers-amd64).
# Usage: cd scripts/mlx5-ifc && python3 gen.py && cargo fmt --all
# tests/tests/ifc_conformance.rs re-checks every table against the header independently.
from ifc import *
DESC={
'enable_hca_in':'ENABLE_HCA input','enable_hca_out':'ENABLE_HCA output','disable_hca_in':'DISABLE_HCA input','disable_hca_out':'DISABLE_HCA output',
'query_issi_in':'QUERY_ISSI input','query_issi_out':'QUERY_ISSI output','set_issi_in':'SET_ISSI input','set_issi_out':'SET_ISSI output',
'query_pages_in':'QUERY_PAGES input','query_pages_out':'QUERY_PAGES output','manage_pages_in':'MANAGE_PAGES input (header, then the PAS array of 64-bit page addresses)','manage_pages_out':'MANAGE_PAGES output (header, then the PAS array of returned pages)',
'query_hca_cap_in':'QUERY_HCA_CAP input','query_hca_cap_out':'QUERY_HCA_CAP output (the capability union at bit 0x80)','set_hca_cap_in':'SET_HCA_CAP input (the capability union at bit 0x80)','set_hca_cap_out':'SET_HCA_CAP output',
'cmd_hca_cap':'general device capabilities (capability type 0)','roce_cap':'RoCE capabilities (capability type 4)',
'access_register_in':'ACCESS_REG input (register data follows at bit 0x80)','access_register_out':'ACCESS_REG output (register data follows at bit 0x80)','register_host_endianness':'HOST_ENDIANNESS register (register id 0x7004)','paos_reg':'PAOS register (port administrative and operational status, register id 0x5006)',
'init_hca_in':'INIT_HCA input','init_hca_out':'INIT_HCA output','teardown_hca_in':'TEARDOWN_HCA input','teardown_hca_out':'TEARDOWN_HCA output',
'modify_nic_vport_context_in':'MODIFY_NIC_VPORT_CONTEXT input','modify_nic_vport_context_out':'MODIFY_NIC_VPORT_CONTEXT output','modify_nic_vport_field_select':'field-select mask of MODIFY_NIC_VPORT_CONTEXT','nic_vport_context':'NIC vport context','mac_address_layout':'a MAC address slot (48 bits in the low part of 64)','query_nic_vport_context_in':'QUERY_NIC_VPORT_CONTEXT input','query_nic_vport_context_out':'QUERY_NIC_VPORT_CONTEXT output',
'alloc_uar_in':'ALLOC_UAR input','alloc_uar_out':'ALLOC_UAR output','dealloc_uar_in':'DEALLOC_UAR input','dealloc_uar_out':'DEALLOC_UAR output',
'create_eq_in':'CREATE_EQ input (EQ context, event bitmask, then PAS)','create_eq_out':'CREATE_EQ output','destroy_eq_in':'DESTROY_EQ input','destroy_eq_out':'DESTROY_EQ output','eqc':'event queue context',
'alloc_pd_in':'ALLOC_PD input','alloc_pd_out':'ALLOC_PD output','dealloc_pd_in':'DEALLOC_PD input','dealloc_pd_out':'DEALLOC_PD output',
'create_mkey_in':'CREATE_MKEY input (memory key context, then the MTT/KLM list)','create_mkey_out':'CREATE_MKEY output','destroy_mkey_in':'DESTROY_MKEY input','destroy_mkey_out':'DESTROY_MKEY output','mkc':'memory key context',
'create_cq_in':'CREATE_CQ input (CQ context, then PAS)','create_cq_out':'CREATE_CQ output','destroy_cq_in':'DESTROY_CQ input','destroy_cq_out':'DESTROY_CQ output','cqc':'completion queue context',
'create_qp_in':'CREATE_QP input (QP context, then PAS)','create_qp_out':'CREATE_QP output','destroy_qp_in':'DESTROY_QP input','destroy_qp_out':'DESTROY_QP output','qpc':'QP context','ads':'address path (primary/secondary path of a QP context)',
'rst2init_qp_in':'RST2INIT_QP input','rst2init_qp_out':'RST2INIT_QP output','init2rtr_qp_in':'INIT2RTR_QP input','init2rtr_qp_out':'INIT2RTR_QP output','rtr2rts_qp_in':'RTR2RTS_QP input','rtr2rts_qp_out':'RTR2RTS_QP output','qp_2err_in':'2ERR_QP input','qp_2err_out':'2ERR_QP output','query_qp_in':'QUERY_QP input','query_qp_out':'QUERY_QP output (QP context, then PAS)',
'set_roce_address_in':'SET_ROCE_ADDRESS input (one GID table entry)','set_roce_address_out':'SET_ROCE_ADDRESS output','query_roce_address_in':'QUERY_ROCE_ADDRESS input','query_roce_address_out':'QUERY_ROCE_ADDRESS output','roce_addr_layout':'one RoCE address (GID table) entry',
'query_vport_state_in':'QUERY_VPORT_STATE input','query_vport_state_out':'QUERY_VPORT_STATE output','query_special_contexts_in':'QUERY_SPECIAL_CONTEXTS input','query_special_contexts_out':'QUERY_SPECIAL_CONTEXTS output',
'qp_2rst_in':'2RST_QP input','qp_2rst_out':'2RST_QP output','init2init_qp_in':'INIT2INIT_QP input','init2init_qp_out':'INIT2INIT_QP output','rts2rts_qp_in':'RTS2RTS_QP input','rts2rts_qp_out':'RTS2RTS_QP output',
'pmtu_reg':'PMTU register (port MTU: maximum, administrative and operational, register id 0x5003)',
'alloc_q_counter_in':'ALLOC_Q_COUNTER input','alloc_q_counter_out':'ALLOC_Q_COUNTER output','dealloc_q_counter_in':'DEALLOC_Q_COUNTER input','dealloc_q_counter_out':'DEALLOC_Q_COUNTER output',
'query_q_counter_in':'QUERY_Q_COUNTER input','query_q_counter_out':'QUERY_Q_COUNTER output (the counters of one counter set)',
'query_cong_statistics_in':'QUERY_CONG_STATISTICS input','query_cong_statistics_out':'QUERY_CONG_STATISTICS output (DCQCN reaction and notification point counters)',
'query_vport_counter_in':'QUERY_VPORT_COUNTER input','query_vport_counter_out':'QUERY_VPORT_COUNTER output (traffic counters of the vport)','traffic_counter':'a packets/octets counter pair',
}
def where(off,w):
    b=off//8
    if w<=32 and (off%32)+w<=32:
        hi=31-(off%32); lo=hi-w+1
        return 'byte %#x, dword bits %d..%d'%(b,hi,lo) if w>1 else 'byte %#x, dword bit %d'%(b,hi)
    return 'bytes %#x..%#x'%(b,(off+w+7)//8)
o=[]
o.append('''//! Layout tables of the mlx5 firmware command structures: one module per Linux
//! `include/linux/mlx5/mlx5_ifc.h` `struct mlx5_ifc_<name>_bits` (Linux 6.1, Debian
//! `linux-headers-amd64`), every named field as an [`IfcField`] (bit offset from the start of the
//! structure, width in bits), `SIZE_BITS` / `SIZE_BYTES`, and `FIELDS` listing them in
//! declaration order. Reserved fields are left out; bits no field names must stay zero.
//!
//! Arrays: a fixed array (`u8 rgid_rip[16][0x8]`) is one field spanning the whole array (use
//! [`IfcField::element`] for one entry); a flexible array (`u8 pas[][0x40]`) is described by
//! its first entry, so `bits` is the element width. A nested structure
//! (`struct mlx5_ifc_qpc_bits qpc`) is one field spanning it; place the nested module's
//! fields with [`IfcField::at`]: `qpc::ST.at(create_qp_in::QPC.bit_offset)`.
//!
//! Generated by `scripts/mlx5-ifc/gen.py`; `tests/tests/ifc_conformance.rs` recomputes every
//! offset, width and size from the header with a parser of its own.

#![allow(clippy::unreadable_literal)]

use super::ifc::IfcField;
''')
for w in WANT:
    fl,sz=layout(w)
    o.append('/// mlx5_ifc.h `struct mlx5_ifc_%s_bits`: %s; %#x bits (%d bytes).'%(w,DESC[w],sz,sz//8))
    o.append('pub mod %s {\n    use super::IfcField;\n'%w)
    o.append('    /// Size of the structure in bits (flexible arrays excluded).\n    pub const SIZE_BITS: u32 = %#x;'%sz)
    o.append('    /// Size of the structure in bytes (flexible arrays excluded).\n    pub const SIZE_BYTES: usize = %#x;'%(sz//8))
    names=[]
    for (n,off,tot,elem,cnt,sub,flex) in fl:
        if n.startswith('reserved'): continue
        C=n.upper(); names.append(C)
        bits=elem if flex else tot
        if flex: d='`%s[]`: flexible array of %#x-bit entries starting at bit %#x (byte %#x); this is entry 0, entry i is `%s.element(i, %#x)`.'%(n,elem,off,off//8,C,elem)
        elif sub: d='`%s`: nested `struct mlx5_ifc_%s` (module [`super::%s`] where present), %#x bits at bit %#x (%s).'%(n,sub[len('mlx5_ifc_'):-5],sub[len('mlx5_ifc_'):-5],tot,off,where(off,tot))
        elif cnt>1: d='`%s[%d][%#x]`: array of %d × %d bits at bit %#x (%s).'%(n,cnt,elem,cnt,elem,off,where(off,tot))
        else: d='`%s`: %d bit%s at bit %#x (%s).'%(n,tot,'' if tot==1 else 's',off,where(off,tot))
        d=d.replace('[`super::%s`] where present'%'mac_address_layout','[`super::mac_address_layout`]')
        o.append('    /// %s\n    pub const %s: IfcField = IfcField::new("%s", %#x, %#x);'%(d,C,n,off,bits))
    o.append('    /// Every named field, in declaration order.\n    pub const FIELDS: &[IfcField] = &[%s];\n}\n'%', '.join(names))
# fix the nested module links: only keep link when module exists
txt='\n'.join(o)
import re as _re
def fixlink(m):
    name=m.group(1)
    return '(module [`super::%s`])'%name if name in WANT else '(no module here)'
txt=_re.sub(r'\(module \[`super::(\w+)`\] where present\)',fixlink,txt)
txt+='''
/// Every layout table above: (mlx5_ifc.h structure name without `mlx5_ifc_` / `_bits`, its
/// fields). `tests/tests/ifc_conformance.rs` walks this list.
pub const ALL: &[(&str, &[IfcField])] = &[
%s];

/// The size in bits of every structure in [`ALL`], same order.
pub const SIZES: &[(&str, u32)] = &[
%s];
'''%(''.join('    ("%s", %s::FIELDS),\n'%(w,w) for w in WANT),''.join('    ("%s", %s::SIZE_BITS),\n'%(w,w) for w in WANT))
import os; open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../core/src/mlx5/cmd/layout.rs'),'w').write(txt)
