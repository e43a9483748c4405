//! The device's QP table, looked up for every received packet, and the receive path's cache of
//! the last QP it found there.
//!
//! A lookup in the table takes its `RwLock` for reading (two locked read-modify-writes on a
//! line every receiving thread shares) and hashes the QPN; in a stream or ping-pong every
//! packet goes to the QP the previous one went to. [`LastQp`] keeps that QP with the table's
//! generation, which every insertion and removal advances: while the generation stands, the
//! cached QP is the one the table holds for its QPN, and a lookup is one atomic load. A QP
//! destroyed, or a QPN reused, changes the generation, so the cache never hands out a QP the
//! table no longer holds (a packet racing the removal reaches the QP just as a table lookup
//! made before the removal would).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::verbs::key_map::KeyMap;

/// QPN → QP, with a generation counter for [`LastQp`].
#[derive(Debug)]
pub(crate) struct QpTable<V> {
    map: RwLock<KeyMap<Arc<V>>>,
    /// Advanced (under the write lock) by every insertion and removal.
    generation: AtomicU64,
}

impl<V> Default for QpTable<V> {
    fn default() -> Self {
        QpTable {
            map: RwLock::new(KeyMap::default()),
            generation: AtomicU64::new(0),
        }
    }
}

impl<V> QpTable<V> {
    /// Inserts the entry `make` builds for the first QPN from `next` that `accept`s and the
    /// table does not hold yet; returns it.
    pub(crate) fn insert_new(
        &self,
        mut next: impl FnMut() -> u32,
        accept: impl Fn(u32) -> bool,
        make: impl FnOnce(u32) -> Arc<V>,
    ) -> Arc<V> {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let qpn = loop {
            let q = next();
            if accept(q) && !map.contains_key(&q) {
                break q;
            }
        };
        let v = make(qpn);
        map.insert(qpn, v.clone());
        self.generation.fetch_add(1, Ordering::Release);
        v
    }

    /// Removes QPN `qpn`'s entry.
    pub(crate) fn remove(&self, qpn: u32) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.remove(&qpn).is_some() {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// QPN `qpn`'s entry.
    pub(crate) fn get(&self, qpn: u32) -> Option<Arc<V>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&qpn)
            .cloned()
    }

    /// Appends every entry to `out` (no lock on the table is held afterwards).
    pub(crate) fn extend_into(&self, out: &mut Vec<Arc<V>>) {
        out.extend(
            self.map
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned(),
        );
    }
}

/// The entry the last lookup through it found, valid while the table's generation stands.
#[derive(Debug)]
pub(crate) struct LastQp<V> {
    /// (QPN, table generation when it was looked up, entry).
    last: Option<(u32, u64, Arc<V>)>,
}

impl<V> Default for LastQp<V> {
    fn default() -> Self {
        LastQp { last: None }
    }
}

impl<V> LastQp<V> {
    /// QPN `qpn`'s entry in `table`: the cached one while the table is unchanged since it was
    /// looked up, else a lookup (which replaces the cache when it finds one).
    #[inline]
    pub(crate) fn get(&mut self, table: &QpTable<V>, qpn: u32) -> Option<&Arc<V>> {
        self.refresh(table, qpn);
        self.cached()
    }

    /// Makes the cache hold QPN `qpn`'s entry in `table` (none when the table has none), as
    /// [`get`](Self::get) does; read it with [`cached`](Self::cached).
    #[inline]
    pub(crate) fn refresh(&mut self, table: &QpTable<V>, qpn: u32) {
        // Acquire: pairs with the Release of a change, so a generation seen unchanged means
        // the table held this entry for `qpn` when it was read.
        let generation = table.generation.load(Ordering::Acquire);
        let hit = matches!(&self.last, Some((q, g, _)) if *q == qpn && *g == generation);
        if !hit {
            self.last = table.get(qpn).map(|v| (qpn, generation, v));
        }
    }

    /// The entry the last [`refresh`](Self::refresh) or [`get`](Self::get) found, if any.
    #[inline]
    pub(crate) fn cached(&self) -> Option<&Arc<V>> {
        self.last.as_ref().map(|(_, _, v)| v)
    }

    /// Whether `table` is unchanged since the cached entry was looked up: it still holds that
    /// entry for its QPN (one atomic load; `false` when nothing is cached). A borrower of
    /// [`cached`](Self::cached) checks with this, and takes no reference count of its own.
    #[inline]
    pub(crate) fn unchanged(&self, table: &QpTable<V>) -> bool {
        let generation = table.generation.load(Ordering::Acquire);
        matches!(&self.last, Some((_, g, _)) if *g == generation)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// A QP stand-in: which one it is.
    #[derive(Debug, PartialEq)]
    struct Qp(&'static str);

    fn insert(t: &QpTable<Qp>, qpn: u32, name: &'static str) -> Arc<Qp> {
        t.insert_new(|| qpn, |_| true, |_| Arc::new(Qp(name)))
    }

    fn name(c: &mut LastQp<Qp>, t: &QpTable<Qp>, qpn: u32) -> Option<&'static str> {
        c.get(t, qpn).map(|q| q.0)
    }

    #[test]
    fn never_returns_a_removed_or_replaced_entry() {
        let t = QpTable::default();
        let mut c = LastQp::default();
        insert(&t, 5, "first");
        insert(&t, 6, "other");
        assert_eq!(name(&mut c, &t, 5), Some("first"));
        assert_eq!(name(&mut c, &t, 5), Some("first"));
        // Destroyed: the cache must not keep delivering to it.
        t.remove(5);
        assert_eq!(name(&mut c, &t, 5), None);
        // A cached entry, then its QPN reused by a new QP.
        insert(&t, 5, "second");
        assert_eq!(name(&mut c, &t, 5), Some("second"));
        t.remove(5);
        insert(&t, 5, "third");
        assert_eq!(name(&mut c, &t, 5), Some("third"));
        assert_eq!(name(&mut c, &t, 6), Some("other"));
        assert_eq!(name(&mut c, &t, 7), None);
    }

    #[test]
    fn unchanged_holds_only_while_the_table_does() {
        let t = QpTable::default();
        let mut c = LastQp::default();
        assert!(!c.unchanged(&t), "nothing cached");
        insert(&t, 5, "first");
        c.refresh(&t, 5);
        assert_eq!(c.cached().map(|q| q.0), Some("first"));
        assert!(c.unchanged(&t));
        // Any insertion or removal ends it, the cached QP's own removal included.
        insert(&t, 6, "other");
        assert!(!c.unchanged(&t));
        c.refresh(&t, 5);
        assert!(c.unchanged(&t));
        t.remove(5);
        assert!(!c.unchanged(&t));
        c.refresh(&t, 5);
        assert!(c.cached().is_none() && !c.unchanged(&t));
    }

    #[test]
    fn insert_new_skips_refused_and_taken_qpns() {
        let t = QpTable::default();
        let mut n = 0;
        insert(&t, 2, "taken");
        let v = t.insert_new(
            || {
                n += 1;
                n
            },
            |q| q > 1,
            |q| Arc::new(Qp(if q == 3 { "three" } else { "wrong" })),
        );
        assert_eq!(*v, Qp("three"));
        assert_eq!(t.get(3).map(|v| v.0), Some("three"));
    }
}
