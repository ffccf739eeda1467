//! Promoted topics: remote topics an operator took over at a failover (`ferry promote`). A promoted
//! topic is no longer copied by its flow, on any node of the deployment, across restarts: so the
//! promoted copy, which applications now write, cannot receive stale copies from the old source; and
//! ferry lifts its own DENY Write bindings from it ([`crate::protect`]).
//!
//! Each promotion is one record in the deployment's control topic (see [`super`]), keyed
//! `promote|<deployment>|<flow>|<source topic>`, valued `{"by": ..., "at": ...}`; a tombstone (written
//! by hand) takes the promotion back. Every node tails the topic and keeps, per flow, the promoted
//! source topics ([`Promotions`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::FlowId;
pub use crate::status::PromoteRecord;

pub fn promote_key(deployment: &str, flow: &FlowId, topic: &str) -> String {
    format!("promote|{deployment}|{flow}|{topic}")
}

/// The flow and source topic a control record's key promotes: `Ok(None)` for another deployment's key
/// or a key of another kind; an error for a promote key of `deployment` that names no flow or topic.
pub fn parse_promote_key(deployment: &str, key: Option<&[u8]>) -> Result<Option<(FlowId, String)>, String> {
    let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else { return Ok(None) };
    let Some(rest) = key.strip_prefix("promote|").and_then(|r| r.strip_prefix(deployment)?.strip_prefix('|')) else {
        return Ok(None);
    };
    // Flow ids hold no `|` (aliases are letters, digits, `_` and `-`); topic names hold none either.
    let (flow, topic) = rest.split_once('|').ok_or_else(|| format!("promote key `{key}`: no topic"))?;
    if topic.is_empty() {
        return Err(format!("promote key `{key}`: no topic"));
    }
    let flow = flow.parse().map_err(|e| format!("promote key `{key}`: {e}"))?;
    Ok(Some((flow, topic.to_string())))
}

/// A promotion as read from a control topic: `None` is a tombstone (promotion taken back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromotionSeen {
    pub flow: FlowId,
    pub topic: String,
    pub record: Option<PromoteRecord>,
}

/// The promoted source topics of every flow, as the control topics said them.
#[derive(Debug, Default)]
pub struct Promotions {
    flows: BTreeMap<FlowId, BTreeMap<String, PromoteRecord>>,
}

impl Promotions {
    /// Applies a record; whether the flow's promoted set changed.
    pub fn apply(&mut self, seen: PromotionSeen) -> bool {
        let topics = self.flows.entry(seen.flow).or_default();
        match seen.record {
            Some(r) => topics.insert(seen.topic, r).is_none(),
            None => topics.remove(&seen.topic).is_some(),
        }
    }

    /// The promoted source topics of `flow`.
    pub fn topics(&self, flow: &FlowId) -> BTreeSet<String> {
        self.flows.get(flow).map(|t| t.keys().cloned().collect()).unwrap_or_default()
    }

    /// Who promoted each topic of `flow`, and when.
    pub fn records(&self, flow: &FlowId) -> BTreeMap<String, PromoteRecord> {
        self.flows.get(flow).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> FlowId {
        "east->west".parse().expect("flow id")
    }

    #[test]
    fn promote_keys_name_their_deployment_flow_and_topic() {
        let key = promote_key("prod", &flow(), "orders");
        assert_eq!(key, "promote|prod|east->west|orders");
        let parse = |deployment, key: &str| parse_promote_key(deployment, Some(key.as_bytes()));
        assert_eq!(parse("prod", &key), Ok(Some((flow(), "orders".to_string()))));
        assert_eq!(parse("staging", &key), Ok(None), "another deployment's");
        assert_eq!(parse("prod", "pause|prod|east->west"), Ok(None), "another kind of record");
        assert!(parse("prod", "promote|prod|east->west").unwrap_err().contains("no topic"));
        assert!(parse("prod", "promote|prod|nonsense|orders").unwrap_err().contains("promote|prod|nonsense"));
    }

    #[test]
    fn promotions_accumulate_per_flow_and_a_tombstone_takes_one_back() {
        let mut p = Promotions::default();
        let record = Some(PromoteRecord { by: "ops".into(), at: 1 });
        let seen =
            |topic: &str, record: Option<PromoteRecord>| PromotionSeen { flow: flow(), topic: topic.into(), record };
        assert!(p.apply(seen("orders", record.clone())));
        assert!(!p.apply(seen("orders", record.clone())), "promoted again: no change");
        assert!(p.apply(seen("pay", record.clone())));
        assert_eq!(p.topics(&flow()), ["orders".to_string(), "pay".to_string()].into());
        assert!(p.apply(seen("orders", None)));
        assert_eq!(p.topics(&flow()), ["pay".to_string()].into());
        assert!(p.topics(&"a->b".parse().expect("flow id")).is_empty());
    }
}
