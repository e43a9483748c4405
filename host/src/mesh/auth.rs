//! The optional shared secret of the mesh handshake (`RDMESH_AUTH_KEY`) and its
//! challenge-response, HMAC-SHA256 (RFC 2104, FIPS 180-4; the `hmac` and `sha2` crates).
//!
//! Both ends send a fresh 32-byte nonce. The listener proves it holds the key with
//! `HMAC(key, "server" ‖ client nonce ‖ server nonce)`; the connecting node proves it with an
//! HMAC over both nonces and its whole request, and the listener's answer carries an HMAC over
//! both nonces and the answer. Each part is length-prefixed, labels keep the three proofs apart,
//! and the nonces make every proof good for one handshake only. A node with a key refuses a
//! peer without one, and a node without a key is refused by a peer with one, in both directions,
//! with an error that says which side lacked the key. The key itself never crosses the wire.

use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The environment variable holding the shared secret.
pub const AUTH_KEY_ENV: &str = "RDMESH_AUTH_KEY";
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;

/// Label of the listener's proof.
pub const LABEL_SERVER: &[u8] = b"rdmesh-mesh/1 server";
/// Label of the connecting node's proof (over its request).
pub const LABEL_CLIENT: &[u8] = b"rdmesh-mesh/1 client";
/// Label of the listener's answer.
pub const LABEL_ACCEPT: &[u8] = b"rdmesh-mesh/1 accept";

/// Fills `buf` with random bytes from `/dev/urandom`; if that cannot be read, from a SHA-256
/// of the time, process id and a counter (node ids and PSNs stay distinct; the handshake's
/// nonces are then only as unpredictable as the clock, and a warning says so).
pub fn fill_random(buf: &mut [u8]) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(buf).is_ok() {
            return;
        }
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    tracing::warn!("/dev/urandom unreadable: mesh nonces fall back to time-derived values");
    use sha2::Digest;
    for (i, chunk) in buf.chunks_mut(32).enumerate() {
        let mut h = Sha256::new();
        h.update(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_be_bytes(),
        );
        h.update(std::process::id().to_be_bytes());
        h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        h.update((i as u64).to_be_bytes());
        let d = h.finalize();
        chunk.copy_from_slice(&d[..chunk.len()]);
    }
}

/// A fresh nonce.
pub fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    fill_random(&mut n);
    n
}

/// The shared secret. Its `Debug` output does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey(Vec<u8>);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthKey({} bytes)", self.0.len())
    }
}

impl AuthKey {
    /// A key of the given bytes; `None` when empty.
    pub fn new(bytes: &[u8]) -> Option<AuthKey> {
        (!bytes.is_empty()).then(|| AuthKey(bytes.to_vec()))
    }

    /// The key in `RDMESH_AUTH_KEY` (its UTF-8 bytes), or `None` when unset or empty.
    pub fn from_env() -> Option<AuthKey> {
        std::env::var_os(AUTH_KEY_ENV).and_then(|v| {
            use std::os::unix::ffi::OsStrExt;
            AuthKey::new(v.as_bytes())
        })
    }

    fn hmac(&self, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        m.update(label);
        for p in parts {
            m.update(&(p.len() as u32).to_be_bytes());
            m.update(p);
        }
        m
    }

    /// `HMAC-SHA256(key, label ‖ len(p₀) ‖ p₀ ‖ len(p₁) ‖ p₁ …)`, lengths u32 big-endian.
    pub fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        self.hmac(label, parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is [`AuthKey::mac`] of the same input (compared in constant time).
    pub fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        self.hmac(label, parts).verify_slice(tag).is_ok()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc4231_case_2() {
        // RFC 4231 §4.3: key "Jefe", data "what do ya want for nothing?".
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let hex: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn proofs_bind_key_label_and_parts() {
        let k = AuthKey::new(b"secret").unwrap();
        let t = k.mac(LABEL_CLIENT, &[b"ab", b"c"]);
        assert!(k.verify(LABEL_CLIENT, &[b"ab", b"c"], &t));
        assert!(!k.verify(LABEL_SERVER, &[b"ab", b"c"], &t));
        assert!(
            !k.verify(LABEL_CLIENT, &[b"a", b"bc"], &t),
            "length prefixes"
        );
        assert!(!AuthKey::new(b"other")
            .unwrap()
            .verify(LABEL_CLIENT, &[b"ab", b"c"], &t));
        assert!(!k.verify(LABEL_CLIENT, &[b"ab", b"c"], &t[..31]));
        assert!(AuthKey::new(b"").is_none());
        assert_eq!(format!("{k:?}"), "AuthKey(6 bytes)");
        assert_ne!(nonce(), nonce());
    }
}
