//! The RoCE GID table. Under VFIO nobody fills it (the kernel would, from the netdev's IP
//! addresses), so the driver programs each entry with SET_ROCE_ADDRESS: the source IP as a
//! GID, the source MAC, optional VLAN, L3 type (IPv4 for `::ffff:a.b.c.d`, else IPv6) and
//! RoCE version 2 (Linux `lib/gid.c` `mlx5_core_roce_gid_set`, `hw/mlx5/main.c`
//! `set_roce_addr`). A QP's address path names the entry by index (`src_addr_index`).

use std::net::IpAddr;

use rdmesh_core::mlx5::cmd::{
    Opcode, QueryRoceAddressIn, QueryRoceAddressOut, RoceAddress, SetRoceAddressIn,
    ROCE_L3_TYPE_IPV4, ROCE_L3_TYPE_IPV6, ROCE_VERSION_2,
};

use super::cmdif::parse_err;
use super::hca::Hca;
use super::{DriverError, Result};

/// The GID of an IP address: IPv6 as is, IPv4 as `::ffff:a.b.c.d` (RoCEv2).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Whether a GID is an IPv4-mapped address.
pub fn gid_is_ipv4(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// One GID table entry as the device holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID (source IP).
    pub gid: [u8; 16],
    /// Source MAC.
    pub mac: [u8; 6],
    /// VLAN id, when tagged.
    pub vlan: Option<u16>,
}

impl Hca {
    /// Programs GID table entry `index` of port `port` (1-based) with `gid` (see [`gid_of`]),
    /// the port's MAC (or `mac`) and an optional VLAN, as a RoCEv2 address.
    ///
    /// # Errors
    /// [`DriverError::Config`] for an index beyond the table or a VLAN id over 4095; command
    /// errors naming the GID and index.
    pub fn set_gid(
        &self,
        port: u8,
        index: u16,
        gid: [u8; 16],
        mac: Option<[u8; 6]>,
        vlan: Option<u16>,
    ) -> Result<()> {
        let name = self.name().to_string();
        let table = self
            .info()
            .roce
            .map(|r| r.roce_address_table_size)
            .unwrap_or(self.info().caps.gid_table_size);
        if table != 0 && index >= table {
            return Err(DriverError::config(
                &name,
                format!("GID index {index} beyond the {table}-entry GID table of port {port}"),
            ));
        }
        if vlan.is_some_and(|v| v > 4095) {
            return Err(DriverError::config(
                &name,
                format!("VLAN id {vlan:?} over 4095"),
            ));
        }
        let mut addr = RoceAddress {
            source_l3_address: gid,
            vlan_valid: vlan.is_some(),
            vlan_id: vlan.unwrap_or(0),
            roce_l3_type: if gid_is_ipv4(&gid) {
                ROCE_L3_TYPE_IPV4
            } else {
                ROCE_L3_TYPE_IPV6
            },
            roce_version: ROCE_VERSION_2,
            ..Default::default()
        };
        addr.set_source_mac(mac.unwrap_or(self.info().mac));
        let vhca_port_num = if self.info().caps.num_vhca_ports > 0 {
            port
        } else {
            0
        };
        let what = format!(
            "GID index {index} = {} on port {port}",
            std::net::Ipv6Addr::from(gid)
        );
        self.inner.hw().exec(
            &SetRoceAddressIn {
                roce_address_index: index,
                vhca_port_num,
                roce_address: addr,
            },
            0,
            &what,
        )?;
        Ok(())
    }

    /// Reads GID table entry `index` back (QUERY_ROCE_ADDRESS).
    ///
    /// # Errors
    /// Command errors naming the index.
    pub fn query_gid(&self, port: u8, index: u16) -> Result<GidEntry> {
        let vhca_port_num = if self.info().caps.num_vhca_ports > 0 {
            port
        } else {
            0
        };
        let what = format!("GID index {index} on port {port}");
        let out = self.inner.hw().exec(
            &QueryRoceAddressIn {
                roce_address_index: index,
                vhca_port_num,
            },
            0,
            &what,
        )?;
        let a = QueryRoceAddressOut::parse(&out)
            .map_err(|e| parse_err(self.name(), Opcode::QueryRoceAddress, e, &what))?
            .roce_address;
        Ok(GidEntry {
            gid: a.source_l3_address,
            mac: a.source_mac(),
            vlan: a.vlan_valid.then_some(a.vlan_id),
        })
    }
}
