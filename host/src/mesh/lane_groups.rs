//! The listener's side of lanes ([`crate::mesh::messages::Lane`]): lanes of one connection
//! arrive as separate handshakes, in any order; a connection is handed out once all of its
//! lanes are here. A group whose other lanes never come (the connecting side failed half way)
//! expires, and its lanes are handed back to be closed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::mesh::messages::Lane;

/// Lanes waiting for the rest of their connection, by group id. `C` is a lane (the mesh uses
/// its connection state; tests use numbers).
#[derive(Debug)]
pub(crate) struct LaneGroups<C> {
    partial: HashMap<u64, (Instant, Vec<Option<C>>)>,
}

impl<C> Default for LaneGroups<C> {
    fn default() -> LaneGroups<C> {
        LaneGroups {
            partial: HashMap::new(),
        }
    }
}

impl<C> LaneGroups<C> {
    /// Adds lane `lane` (arrived at `now`): every lane of its connection in lane order once it
    /// completes the group (at once for a connection of one lane), else `None`. A second lane
    /// with the same index replaces the first (which is returned to be closed, with `None`).
    pub(crate) fn add(&mut self, lane: Lane, c: C, now: Instant) -> (Option<Vec<C>>, Option<C>) {
        if lane.count <= 1 {
            return (Some(vec![c]), None);
        }
        let (_, slots) = self
            .partial
            .entry(lane.group)
            .or_insert_with(|| (now, (0..lane.count).map(|_| None).collect()));
        let Some(slot) = slots.get_mut(usize::from(lane.index)) else {
            // an index past the group's count (the decoder refuses it; a group whose count
            // changed): keep the group, hand the stray lane back
            return (None, Some(c));
        };
        let replaced = slot.replace(c);
        if slots.iter().all(Option::is_some) {
            let (_, slots) = self.partial.remove(&lane.group).expect("present");
            return (Some(slots.into_iter().flatten().collect()), replaced);
        }
        (None, replaced)
    }

    /// Removes the groups whose first lane arrived more than `max_age` before `now`, and
    /// returns their lanes (to be closed).
    pub(crate) fn expire(&mut self, now: Instant, max_age: Duration) -> Vec<C> {
        let old: Vec<u64> = self
            .partial
            .iter()
            .filter(|(_, (t, _))| now.saturating_duration_since(*t) > max_age)
            .map(|(g, _)| *g)
            .collect();
        old.into_iter()
            .filter_map(|g| self.partial.remove(&g))
            .flat_map(|(_, slots)| slots.into_iter().flatten())
            .collect()
    }

    /// Groups waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.partial.len()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn lane(group: u64, index: u8, count: u8) -> Lane {
        Lane {
            group,
            index,
            count,
        }
    }

    #[test]
    fn groups_complete_in_lane_order_whatever_the_arrival_order() {
        let t = Instant::now();
        let mut g = LaneGroups::default();
        assert_eq!(g.add(Lane::SINGLE, 7, t), (Some(vec![7]), None));
        assert_eq!(g.add(lane(1, 2, 3), 12, t), (None, None));
        assert_eq!(g.add(lane(2, 1, 2), 21, t), (None, None));
        assert_eq!(g.add(lane(1, 0, 3), 10, t), (None, None));
        assert_eq!(g.len(), 2);
        assert_eq!(g.add(lane(1, 1, 3), 11, t), (Some(vec![10, 11, 12]), None));
        assert_eq!(
            g.add(lane(2, 1, 2), 99, t),
            (None, Some(21)),
            "same index: replaced"
        );
        assert_eq!(
            g.add(lane(2, 5, 2), 55, t),
            (None, Some(55)),
            "index past the count"
        );
        assert_eq!(g.add(lane(2, 0, 2), 20, t), (Some(vec![20, 99]), None));
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn incomplete_groups_expire_and_hand_their_lanes_back() {
        let t = Instant::now();
        let mut g = LaneGroups::default();
        g.add(lane(1, 0, 2), 10, t);
        g.add(lane(2, 1, 3), 21, t + Duration::from_secs(5));
        g.add(lane(2, 2, 3), 22, t + Duration::from_secs(6));
        assert!(g
            .expire(t + Duration::from_secs(9), Duration::from_secs(10))
            .is_empty());
        assert_eq!(
            g.expire(t + Duration::from_secs(11), Duration::from_secs(10)),
            vec![10]
        );
        let mut rest = g.expire(t + Duration::from_secs(16), Duration::from_secs(10));
        rest.sort();
        assert_eq!(rest, vec![21, 22]);
        assert_eq!(g.len(), 0);
    }
}
