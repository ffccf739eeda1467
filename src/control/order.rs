//! The order in which a node applies pause records: the control topic's, whatever order they reach the
//! node in.
//!
//! A node learns of a decision by two paths that race: the acknowledgement of a write it made itself
//! (`POST /flows/{id}/pause` on this node) and its tail of the topic (every node's records, its own
//! included). Both carry the record's offset, and the topic has one partition, so offsets order the
//! decisions. A flow's state on a node is the record with the highest offset it has seen: an earlier
//! record that arrives late (an acknowledgement that took its time) never undoes a later one, so every
//! node that has read the same records is in the state of the last of them.

use std::collections::BTreeMap;

use super::PauseRecord;
use crate::config::FlowId;

/// A flow's pause record as it lies in a control topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The control topic's connection ([`super::connection_key`]): offsets of different topics do not compare.
    pub connection: String,
    pub offset: i64,
    /// `None`: the key was deleted (no decision: the flow copies).
    pub record: Option<PauseRecord>,
}

/// What a flow's state on this node comes from.
#[derive(Clone, Debug)]
struct Applied {
    record: Option<PauseRecord>,
    /// Where the last applied record lies (connection, offset); a decision that could not be recorded
    /// keeps the position of the record before it.
    at: Option<(String, i64)>,
}

/// Each flow's pause on this node, in the control topic's order.
#[derive(Debug, Default)]
pub struct Pauses {
    flows: BTreeMap<FlowId, Applied>,
}

impl Pauses {
    /// Applies `logged` to `flow` if it lies later in its topic than the record applied last (or comes
    /// from another topic: the flow's target changed). `false`: it is not newer, nothing changed.
    pub fn apply(&mut self, flow: &FlowId, logged: Logged) -> bool {
        let newer = match self.flows.get(flow).and_then(|a| a.at.as_ref()) {
            Some((connection, offset)) => *connection != logged.connection || logged.offset > *offset,
            None => true,
        };
        if newer {
            let at = Some((logged.connection, logged.offset));
            self.flows.insert(flow.clone(), Applied { record: logged.record, at });
        }
        newer
    }

    /// A decision taken on this node that the topic did not record (the target did not answer): it
    /// holds here until a record newer than the last applied one arrives.
    pub fn apply_unrecorded(&mut self, flow: &FlowId, record: PauseRecord) {
        let at = self.flows.get(flow).and_then(|a| a.at.clone());
        self.flows.insert(flow.clone(), Applied { record: Some(record), at });
    }

    /// The decision in force for `flow` on this node.
    pub fn record(&self, flow: &FlowId) -> Option<&PauseRecord> {
        self.flows.get(flow).and_then(|a| a.record.as_ref())
    }

    pub fn paused(&self, flow: &FlowId) -> bool {
        self.record(flow).is_some_and(|r| r.paused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> FlowId {
        "east->west".parse().expect("flow id")
    }

    fn at(offset: i64, paused: bool, by: &str) -> Logged {
        Logged { connection: "west".into(), offset, record: Some(PauseRecord { paused, by: by.into(), at: 0 }) }
    }

    /// Every order of `0..n`.
    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let shorter = permutations(n - 1);
        shorter
            .into_iter()
            .flat_map(|p| {
                (0..n).map(move |i| {
                    let mut q = p.clone();
                    q.insert(i, n - 1);
                    q
                })
            })
            .collect()
    }

    #[test]
    fn records_applied_in_any_order_end_in_the_state_of_the_last_one() {
        let log = [at(3, true, "n1"), at(4, false, "n2"), at(5, true, "n2"), at(6, false, "n1")];
        let orders = permutations(log.len());
        assert_eq!(orders.len(), 24, "every order of arrival of the four records");
        for order in orders {
            let mut pauses = Pauses::default();
            for i in &order {
                pauses.apply(&flow(), log[*i].clone());
            }
            assert_eq!(pauses.record(&flow()), log[3].record.as_ref(), "arrival order {order:?}");
            assert!(!pauses.paused(&flow()), "arrival order {order:?}");
        }
    }

    #[test]
    fn an_own_resume_acknowledged_after_a_later_pause_was_read_is_stale() {
        let mut pauses = Pauses::default();
        // n1 resumes (offset 7); n2 pauses (offset 8); n1's tail reads both before n1's acknowledgement.
        assert!(pauses.apply(&flow(), at(7, false, "n1")));
        assert!(pauses.apply(&flow(), at(8, true, "n2")));
        assert!(!pauses.apply(&flow(), at(7, false, "n1")), "the acknowledgement of offset 7");
        assert!(pauses.paused(&flow()));
        assert_eq!(pauses.record(&flow()).map(|r| r.by.as_str()), Some("n2"));
        // The tail reading a record the acknowledgement applied already changes nothing either.
        assert!(pauses.apply(&flow(), at(9, false, "n1")));
        assert!(!pauses.apply(&flow(), at(9, false, "n1")));
        assert!(!pauses.paused(&flow()));
    }

    #[test]
    fn an_unrecorded_decision_holds_until_a_newer_record() {
        let mut pauses = Pauses::default();
        assert!(pauses.apply(&flow(), at(2, false, "n2")));
        pauses.apply_unrecorded(&flow(), PauseRecord { paused: true, by: "n1".into(), at: 0 });
        assert!(pauses.paused(&flow()), "held here");
        assert!(!pauses.apply(&flow(), at(2, false, "n2")), "the record before it does not undo it");
        assert!(pauses.paused(&flow()));
        assert!(pauses.apply(&flow(), at(3, false, "n2")), "a later decision does");
        assert!(!pauses.paused(&flow()));
    }

    #[test]
    fn a_deleted_key_and_another_topic_count_as_records() {
        let mut pauses = Pauses::default();
        assert!(pauses.apply(&flow(), at(5, true, "n1")));
        let moved = Logged { connection: "north".into(), ..at(1, false, "n2") };
        assert!(pauses.apply(&flow(), moved), "the flow's new target's topic has offsets of its own");
        assert!(!pauses.paused(&flow()));
        let deleted = Logged { connection: "north".into(), offset: 2, record: None };
        assert!(pauses.apply(&flow(), deleted));
        assert_eq!(pauses.record(&flow()), None);
        assert!(!pauses.paused(&flow()), "no decision: the flow copies");
    }
}
