//! Device selection with NCCL's `NCCL_IB_HCA` syntax, read from `RDMESH_HCA`.
//!
//! The value is a comma-separated list of `name[:port]` entries. A leading `^` excludes the
//! listed ports instead of selecting them; a leading `=` (after the `^`, if any) makes names
//! match exactly instead of as prefixes (so `mlx5_1` also matches `mlx5_10` unless `=` is
//! given). Examples: `rocep1s0f0,roceP2p1s0f0` (only those two, prefix match),
//! `^=rocep1s0f1,roceP2p1s0f1` (all but exactly those), `=mlx5_0:1` (only port 1 of mlx5_0).
//! Source: NCCL `docs/userguide/source/env.rst` (`NCCL_IB_HCA`), `src/misc/utils.cc`
//! `parseStringList`/`matchIfList`.
//!
//! rdmesh matches an entry against the device name (`rocep1s0f0`, `soft_enp1s0f0np0`) and,
//! for convenience, the port's netdev name (`enp1s0f0np0`). NCCL's `:rail` and `:plane`
//! suffixes are not supported.

use std::fmt;

use crate::mesh::error::{MeshError, Result};

/// The environment variable holding the selection list.
pub const HCA_ENV: &str = "RDMESH_HCA";
/// Most entries in a list (NCCL's `MAX_IB_DEVS`).
pub const MAX_HCA_ENTRIES: usize = 32;

/// One `name[:port]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaEntry {
    /// Device (or netdev) name, or its prefix.
    pub name: String,
    /// Port number (1-based); `None` matches every port.
    pub port: Option<u32>,
}

/// A parsed selection list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaFilter {
    /// `^`: the entries are excluded, everything else is selected.
    pub exclude: bool,
    /// `=`: names match exactly instead of as prefixes.
    pub exact: bool,
    /// The entries.
    pub entries: Vec<HcaEntry>,
}

impl HcaFilter {
    /// Parses a list such as `^=rocep1s0f1,roceP2p1s0f1:1`.
    ///
    /// Errors: [`MeshError::HcaSyntax`] for an empty entry, a port that is not a positive
    /// number, extra `:` fields, or more than 32 entries.
    pub fn parse(value: &str) -> Result<HcaFilter> {
        let err = |reason: String| MeshError::HcaSyntax {
            value: value.to_string(),
            reason,
        };
        let mut s = value.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let mut entries = Vec::new();
        if !s.trim().is_empty() {
            for item in s.split(',') {
                let item = item.trim();
                let mut parts = item.split(':');
                let name = parts.next().unwrap_or("").trim();
                if name.is_empty() {
                    return Err(err(format!(
                        "entry {item:?} has no device name (the form is [^][=]name[:port],...)"
                    )));
                }
                let port = match parts.next() {
                    None => None,
                    Some(p) => match p.trim().parse::<u32>() {
                        Ok(n) if n >= 1 => Some(n),
                        _ => {
                            return Err(err(format!(
                                "port {p:?} of entry {item:?} is not a port number (1, 2, ...)"
                            )))
                        }
                    },
                };
                if parts.next().is_some() {
                    return Err(err(format!(
                        "entry {item:?}: only name[:port] is supported (NCCL's :rail and :plane fields are not)"
                    )));
                }
                entries.push(HcaEntry {
                    name: name.to_string(),
                    port,
                });
            }
        }
        if entries.len() > MAX_HCA_ENTRIES {
            return Err(err(format!(
                "{} entries exceed the maximum of {MAX_HCA_ENTRIES}",
                entries.len()
            )));
        }
        Ok(HcaFilter {
            exclude,
            exact,
            entries,
        })
    }

    /// The filter in `RDMESH_HCA`, or `None` when it is unset or empty.
    ///
    /// Errors: those of [`HcaFilter::parse`].
    pub fn from_env() -> Result<Option<HcaFilter>> {
        match std::env::var(HCA_ENV) {
            Ok(v) if !v.trim().is_empty() => HcaFilter::parse(&v).map(Some),
            _ => Ok(None),
        }
    }

    fn name_matches(&self, entry: &str, name: &str) -> bool {
        if self.exact {
            name == entry
        } else {
            name.starts_with(entry)
        }
    }

    /// Whether port `port` of `device` (whose netdev is `netdev`) is selected.
    pub fn selects(&self, device: &str, port: u32, netdev: Option<&str>) -> bool {
        let listed = self.entries.iter().any(|e| {
            let name = self.name_matches(&e.name, device)
                || netdev.is_some_and(|n| self.name_matches(&e.name, n));
            name && e.port.map_or(true, |p| p == port)
        });
        if self.exclude {
            !listed
        } else {
            listed || self.entries.is_empty()
        }
    }
}

impl fmt::Display for HcaFilter {
    /// The list in its canonical spelling (`^=a:1,b`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("^")?;
        }
        if self.exact {
            f.write_str("=")?;
        }
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&e.name)?;
            if let Some(p) = e.port {
                write!(f, ":{p}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nccl_examples() {
        let f = HcaFilter::parse("^=rocep1s0f1,roceP2p1s0f1").unwrap();
        assert!(f.exclude && f.exact);
        assert!(!f.selects("rocep1s0f1", 1, None));
        assert!(!f.selects("roceP2p1s0f1", 1, None));
        assert!(f.selects("rocep1s0f0", 1, None));
        assert!(f.selects("rocep1s0f10", 1, None), "exact: no prefix match");
        assert_eq!(f.to_string(), "^=rocep1s0f1,roceP2p1s0f1");

        let f = HcaFilter::parse("mlx5_1").unwrap();
        assert!(f.selects("mlx5_1", 1, None));
        assert!(f.selects("mlx5_10", 2, None), "prefix match as NCCL");
        assert!(!f.selects("mlx5_0", 1, None));

        let f = HcaFilter::parse("^=mlx5_0:1,mlx5_1").unwrap();
        assert!(!f.selects("mlx5_0", 1, None));
        assert!(f.selects("mlx5_0", 2, None));
        assert!(!f.selects("mlx5_1", 2, None));
        assert!(f.selects("mlx5_10", 1, None));

        let f = HcaFilter::parse("=soft_veth0:1").unwrap();
        assert!(f.selects("soft_veth0", 1, Some("veth0")));
        assert!(!f.selects("soft_veth0", 2, Some("veth0")));
    }

    #[test]
    fn netdev_alias_and_empty_lists() {
        let f = HcaFilter::parse("^enp1s0f1np1").unwrap();
        assert!(!f.selects("rocep1s0f1", 1, Some("enp1s0f1np1")));
        assert!(f.selects("rocep1s0f0", 1, Some("enp1s0f0np0")));
        assert!(HcaFilter::parse("^").unwrap().selects("x", 1, None));
        assert!(HcaFilter::parse("").unwrap().selects("x", 1, None));
    }

    #[test]
    fn syntax_errors_name_the_entry() {
        let e = HcaFilter::parse("mlx5_0:x").unwrap_err().to_string();
        assert!(
            e.contains("RDMESH_HCA=\"mlx5_0:x\"") && e.contains("port \"x\""),
            "{e}"
        );
        let e = HcaFilter::parse("a,,b").unwrap_err().to_string();
        assert!(e.contains("no device name"), "{e}");
        let e = HcaFilter::parse("mlx5_0:1:2").unwrap_err().to_string();
        assert!(e.contains(":rail"), "{e}");
        assert!(HcaFilter::parse("mlx5_0:0").is_err());
        let long = (0..33)
            .map(|i| format!("d{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(HcaFilter::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("33 entries"));
    }
}
