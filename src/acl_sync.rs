//! Topic ACL sync (`sync_topic_acls_enabled`, MM2's `sync.topic.acls.enabled`; mm2-reference.md §4.9):
//! the ACL bindings of the topics a flow replicates are copied to their remote names on the target, by
//! MM2's rules (`MirrorSourceConnector.syncTopicAcls`):
//!
//! - only TOPIC bindings with a LITERAL pattern (prefixed ones are not copied);
//! - ALLOW WRITE is never copied (only the replicator writes remote topics);
//! - ALLOW ALL becomes ALLOW READ; DENY bindings are copied as they are, DENY WRITE and DENY ALL included;
//! - only topics the flow replicates, renamed by the flow's replication policy;
//! - nothing is ever deleted on the target.
//!
//! [`wanted`] and [`missing`] are the pure rules; [`sync`] asks both clusters and creates what is missing.

use std::collections::{BTreeMap, BTreeSet};

use crate::clients::Admin;
use crate::kafka;
use crate::raw_admin::{self, AclBinding, AclFilter, AclOperation, AclPattern, AclPermission, AclResource};

/// The target bindings the source's `bindings` call for, each with the source topic it comes from.
/// `replicates` says whether the flow replicates a source topic, `remote` names its remote topic.
pub fn wanted(
    bindings: &[AclBinding],
    replicates: impl Fn(&str) -> bool,
    remote: impl Fn(&str) -> String,
) -> BTreeMap<AclBinding, String> {
    bindings
        .iter()
        .filter(|b| b.resource == AclResource::Topic && b.pattern == AclPattern::Literal)
        .filter(|b| !(b.permission == AclPermission::Allow && b.operation == AclOperation::Write))
        .filter(|b| replicates(&b.name))
        .map(|b| {
            let operation = match (b.permission, b.operation) {
                (AclPermission::Allow, AclOperation::All) => AclOperation::Read,
                (_, op) => op,
            };
            let target = AclBinding { name: remote(&b.name), operation, ..b.clone() };
            (target, b.name.clone())
        })
        .collect()
}

/// The bindings of `wanted` that `existing` (the target's) lacks.
pub fn missing(wanted: &BTreeMap<AclBinding, String>, existing: &[AclBinding]) -> Vec<(AclBinding, String)> {
    let have: BTreeSet<&AclBinding> = existing.iter().collect();
    wanted.iter().filter(|(b, _)| !have.contains(b)).map(|(b, t)| (b.clone(), t.clone())).collect()
}

/// A cluster of the flow without an authorizer: there are no ACLs to sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsecured {
    Source,
    Target,
}

/// What one sync did.
#[derive(Debug, Default)]
pub struct Synced {
    /// The bindings created on the target.
    pub created: Vec<AclBinding>,
    /// Per source topic whose bindings could not all be created: why (the first failure).
    pub failed: BTreeMap<String, String>,
    /// Set when a cluster has no authorizer and nothing was synced.
    pub unsecured: Option<Unsecured>,
}

/// Copies the missing target bindings of the source topics `replicates` accepts. A refusal to list the
/// source's bindings (no Describe on the source cluster) fails the whole sync (`Err`, naming the right);
/// bindings the target refuses (no Alter on the target cluster) are failures of their topics.
pub async fn sync(
    (source, source_admin): (&str, &Admin),
    (target, target_admin): (&str, &Admin),
    replicates: impl Fn(&str) -> bool,
    remote: impl Fn(&str) -> String,
) -> Result<Synced, String> {
    const NOT_AUTHORIZED: &str = "CLUSTER_AUTHORIZATION_FAILED";
    const NO_AUTHORIZER: &str = "SECURITY_DISABLED";
    let topics = |pattern| AclFilter { resource: AclResource::Topic, name: None, pattern };
    // librdkafka 2.12 drops DescribeAcls' top-level error (a refusal reads as no bindings): ask what this
    // principal may do with the cluster first (KIP-430; DescribeCluster needs no right, and an empty list
    // means none). If the cluster does not say, list regardless.
    if let Ok(d) = raw_admin::describe_cluster(source_admin, kafka::ADMIN_TIMEOUT).await
        && let Some(ops) = d.authorized_operations
        && !ops.iter().any(|op| matches!(op, AclOperation::Describe | AclOperation::All))
    {
        return Err(format!(
            "topic ACL sync: {}",
            kafka::not_authorized("cluster", source, "Describe", NOT_AUTHORIZED)
        ));
    }
    let bindings = match raw_admin::describe_acls(source_admin, &topics(None), kafka::ADMIN_TIMEOUT).await {
        Ok(b) => b,
        Err(e) if e.name == NO_AUTHORIZER => {
            return Ok(Synced { unsecured: Some(Unsecured::Source), ..Default::default() });
        }
        Err(e) if e.name == NOT_AUTHORIZED => {
            return Err(format!(
                "topic ACL sync: {}",
                kafka::not_authorized("cluster", source, "Describe", NOT_AUTHORIZED)
            ));
        }
        Err(e) => return Err(format!("topic ACL sync: list the ACL bindings on `{source}`: {e}")),
    };
    let wanted = wanted(&bindings, replicates, remote);
    if wanted.is_empty() {
        return Ok(Synced::default());
    }
    // Alter on the cluster implies Describe: a principal refused here (which librdkafka may report as no
    // bindings) is refused the creation too, which then names the right per topic.
    let existing =
        match raw_admin::describe_acls(target_admin, &topics(Some(AclPattern::Literal)), kafka::ADMIN_TIMEOUT).await {
            Ok(b) => b,
            Err(e) if e.name == NO_AUTHORIZER => {
                return Ok(Synced { unsecured: Some(Unsecured::Target), ..Default::default() });
            }
            Err(e) if e.name == NOT_AUTHORIZED => Vec::new(),
            Err(e) => return Err(format!("topic ACL sync: list the ACL bindings on `{target}`: {e}")),
        };
    let (todo, of): (Vec<AclBinding>, Vec<String>) = missing(&wanted, &existing).into_iter().unzip();
    let results = raw_admin::create_acls(target_admin, &todo, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("topic ACL sync: create ACL bindings on `{target}`: {e}"))?;
    let mut synced = Synced::default();
    for ((binding, topic), error) in todo.into_iter().zip(of).zip(results) {
        let Some(e) = error else {
            synced.created.push(binding);
            continue;
        };
        if e.name == NO_AUTHORIZER {
            return Ok(Synced { unsecured: Some(Unsecured::Target), ..Default::default() });
        }
        let reason = if e.name == NOT_AUTHORIZED {
            kafka::not_authorized("cluster", target, "Alter", NOT_AUTHORIZED)
        } else {
            format!("on `{target}`: {e}")
        };
        synced
            .failed
            .entry(topic)
            .or_insert_with(|| format!("ACL bindings of remote topic {}: {reason}", binding.name));
    }
    Ok(synced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str, pattern: AclPattern, permission: AclPermission, operation: AclOperation) -> AclBinding {
        AclBinding {
            resource: AclResource::Topic,
            name: name.into(),
            pattern,
            principal: "User:bob".into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    fn allow(name: &str, op: AclOperation) -> AclBinding {
        b(name, AclPattern::Literal, AclPermission::Allow, op)
    }

    /// The flow replicates `orders` and `pay`, as `east.<topic>`.
    fn rules(source: &[AclBinding]) -> Vec<AclBinding> {
        wanted(source, |t| t == "orders" || t == "pay", |t| format!("east.{t}")).into_keys().collect()
    }

    #[test]
    fn allow_read_and_describe_are_copied_to_the_remote_name() {
        let got = rules(&[allow("orders", AclOperation::Read), allow("orders", AclOperation::Describe)]);
        assert_eq!(got, [allow("east.orders", AclOperation::Read), allow("east.orders", AclOperation::Describe)]);
    }

    #[test]
    fn allow_write_is_never_copied() {
        assert!(rules(&[allow("orders", AclOperation::Write)]).is_empty());
    }

    #[test]
    fn allow_all_becomes_allow_read() {
        assert_eq!(rules(&[allow("orders", AclOperation::All)]), [allow("east.orders", AclOperation::Read)]);
        // ... and is the same binding as a copied Read: wanted once.
        let got = rules(&[allow("orders", AclOperation::All), allow("orders", AclOperation::Read)]);
        assert_eq!(got, [allow("east.orders", AclOperation::Read)]);
    }

    #[test]
    fn deny_bindings_are_copied_as_they_are() {
        let deny = |name, op| b(name, AclPattern::Literal, AclPermission::Deny, op);
        let got = rules(&[deny("orders", AclOperation::Write), deny("orders", AclOperation::All)]);
        assert_eq!(got, [deny("east.orders", AclOperation::All), deny("east.orders", AclOperation::Write)]);
    }

    #[test]
    fn prefixed_patterns_and_other_resources_are_not_copied() {
        let prefixed = b("orders", AclPattern::Prefixed, AclPermission::Allow, AclOperation::Read);
        let group = AclBinding { resource: AclResource::Group, ..allow("orders", AclOperation::Read) };
        assert!(rules(&[prefixed, group]).is_empty());
    }

    #[test]
    fn only_replicated_topics_are_copied() {
        let got = rules(&[allow("orders", AclOperation::Read), allow("secrets", AclOperation::Read)]);
        assert_eq!(got, [allow("east.orders", AclOperation::Read)]);
    }

    #[test]
    fn principal_and_host_are_kept() {
        let mut src = allow("pay", AclOperation::Describe);
        src.principal = "User:carol".into();
        src.host = "10.0.0.1".into();
        let got = rules(std::slice::from_ref(&src));
        assert_eq!(got, [AclBinding { name: "east.pay".into(), ..src }]);
    }

    #[test]
    fn bindings_already_on_the_target_are_not_created_again() {
        let w = wanted(
            &[allow("orders", AclOperation::Read), allow("pay", AclOperation::All)],
            |_| true,
            |t| format!("east.{t}"),
        );
        let existing = [allow("east.orders", AclOperation::Read), allow("east.pay", AclOperation::Describe)];
        assert_eq!(missing(&w, &existing), [(allow("east.pay", AclOperation::Read), "pay".to_string())]);
        let existing = [allow("east.orders", AclOperation::Read), allow("east.pay", AclOperation::Read)];
        assert!(missing(&w, &existing).is_empty());
    }
}
