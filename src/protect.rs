//! Protected remote topics (`protect_remote_topics`): ferry as the only writer of its remote topics.
//!
//! Kafka ACLs cannot say "everyone except ferry": DENY beats ALLOW, so a DENY Write for `User:*` would
//! deny ferry too. What keeps the others off instead: for every principal that some ALLOW binding lets
//! write a remote topic (literal, prefixed or `*` bindings, Write or All), a DENY Write binding on that
//! literal topic, from any host. Consumers keep whatever Read and Describe they had: only Write is
//! denied. The leader re-checks at every topic refresh, so a principal granted Write later is denied
//! too.
//!
//! What it cannot do, said rather than papered over:
//! - an ALLOW Write for `User:*` cannot be countered without denying ferry itself: such a topic is
//!   reported as failing (remove the wildcard grant, grant the writers by name);
//! - a topic no binding matches at all is left alone: on a cluster with
//!   `allow.everyone.if.no.acl.found=true` everyone may write it, and adding the first binding would
//!   also change who may read it there. Nothing is created, and the topic is reported (once per topic
//!   and refresh) so the operator grants the readers by name;
//! - super users are never subject to ACLs.
//!
//! Bindings have no labels: ferry's own are recognised as exactly the DENY Write bindings with a
//! LITERAL pattern and host `*` on the flow's remote topics for principals other than its own
//! ([`is_ours`]). A DENY of that exact shape an operator made is indistinguishable and counts as ferry's.
//!
//! [`own_principal`], [`writers`] and [`wanted`] are the pure rules; [`protect`] asks the target and
//! creates what is missing.

use std::collections::{BTreeMap, BTreeSet};

use crate::clients::Admin;
pub use crate::config::principal::own_principal;
use crate::kafka;
use crate::raw_admin::{self, AclBinding, AclFilter, AclOperation, AclPattern, AclPermission, AclResource};

/// Whether `b` matches topic `topic` (a literal name, `*`, or a prefix).
fn matches(b: &AclBinding, topic: &str) -> bool {
    b.resource == AclResource::Topic
        && match b.pattern {
            AclPattern::Literal => b.name == topic || b.name == "*",
            AclPattern::Prefixed => topic.starts_with(&b.name),
            AclPattern::Other(_) => false,
        }
}

/// The principals an ALLOW binding among `bindings` lets write `topic` (Write or All).
pub fn writers(bindings: &[AclBinding], topic: &str) -> BTreeSet<String> {
    bindings
        .iter()
        .filter(|b| matches(b, topic) && b.permission == AclPermission::Allow)
        .filter(|b| matches!(b.operation, AclOperation::Write | AclOperation::All))
        .map(|b| b.principal.clone())
        .collect()
}

/// The DENY Write binding ferry keeps on `topic` against `principal`.
pub fn denial(topic: &str, principal: &str) -> AclBinding {
    AclBinding {
        resource: AclResource::Topic,
        name: topic.to_string(),
        pattern: AclPattern::Literal,
        principal: principal.to_string(),
        host: "*".into(),
        operation: AclOperation::Write,
        permission: AclPermission::Deny,
    }
}

/// Whether `b` is a binding ferry made to protect one of `remotes` (see the module doc).
pub fn is_ours(b: &AclBinding, remotes: &BTreeSet<String>, own: &str) -> bool {
    *b == denial(&b.name, &b.principal) && remotes.contains(&b.name) && b.principal != own
}

/// Why a topic cannot be protected by bindings alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `User:*` may write it: a DENY for it would deny ferry as well.
    Everyone,
    /// No binding matches it at all (see the module doc).
    NoBindings,
    /// No binding lets ferry's own principal write it: the broker names ferry otherwise.
    NotAWriter,
}

/// The DENY Write bindings `topic` needs (missing ones and present ones alike), or why bindings alone
/// cannot protect it. `own` is never denied.
pub fn wanted(bindings: &[AclBinding], topic: &str, own: &str) -> Result<Vec<AclBinding>, Refusal> {
    let writers = writers(bindings, topic);
    if writers.contains("User:*") {
        return Err(Refusal::Everyone);
    }
    if !bindings.iter().any(|b| matches(b, topic)) {
        return Err(Refusal::NoBindings);
    }
    // ferry writes the topic, so some binding must let it: if none names the principal ferry worked
    // out, the broker names it otherwise (principal mapping rules, an RFC 2253 subject written another
    // way, a super user) and a DENY for "everyone else" could be a DENY for ferry itself.
    if !writers.contains(own) {
        return Err(Refusal::NotAWriter);
    }
    Ok(writers.iter().filter(|p| p.as_str() != own).map(|p| denial(topic, p)).collect())
}

/// What one protection round did.
#[derive(Debug, Default)]
pub struct Protected {
    /// The bindings created on the target.
    pub created: Vec<AclBinding>,
    /// Per remote topic that is not protected: why (a refusal, or a binding the target refused).
    pub failed: BTreeMap<String, String>,
    /// Remote topics no binding matches (nothing created: see the module doc).
    pub unbound: Vec<String>,
    /// ferry's bindings deleted from promoted remote topics.
    pub lifted: Vec<AclBinding>,
}

/// Creates the missing DENY Write bindings of `remotes` on `target`, and deletes ferry's bindings (see
/// [`is_ours`]) from the promoted remote topics `lift`. A refusal to list or create
/// bindings at all (no Alter on the cluster, no authorizer) fails the whole round (`Err`, naming the
/// right); one binding the target refuses fails its topic.
pub async fn protect(
    target: &str,
    admin: &Admin,
    own: &str,
    remotes: &[String],
    lift: &BTreeSet<String>,
) -> Result<Protected, String> {
    const NOT_AUTHORIZED: &str = "CLUSTER_AUTHORIZATION_FAILED";
    const NO_AUTHORIZER: &str = "SECURITY_DISABLED";
    let refused =
        || format!("protect_remote_topics: {}", kafka::not_authorized("cluster", target, "Alter", NOT_AUTHORIZED));
    let unsecured = || {
        format!(
            "protect_remote_topics: `{target}` has no ACL authorizer, so nothing keeps other producers off the \
             remote topics; configure one or set protect_remote_topics = false"
        )
    };
    // librdkafka 2.12 reads a DescribeAcls refusal as no bindings (see `raw_admin::describe_acls`): ask
    // what this principal may do with the cluster first (KIP-430). CreateAcls needs Alter.
    if let Ok(d) = raw_admin::describe_cluster(admin, kafka::ADMIN_TIMEOUT).await
        && let Some(ops) = d.authorized_operations
        && !ops.iter().any(|op| matches!(op, AclOperation::Alter | AclOperation::All))
    {
        return Err(refused());
    }
    let filter = AclFilter { resource: AclResource::Topic, name: None, pattern: None };
    let bindings = match raw_admin::describe_acls(admin, &filter, kafka::ADMIN_TIMEOUT).await {
        Ok(b) => b,
        Err(e) if e.name == NO_AUTHORIZER => return Err(unsecured()),
        Err(e) if e.name == NOT_AUTHORIZED => return Err(refused()),
        Err(e) => return Err(format!("protect_remote_topics: list the ACL bindings on `{target}`: {e}")),
    };
    let have: BTreeSet<&AclBinding> = bindings.iter().collect();
    let mut done = Protected::default();
    let mut todo = Vec::new();
    for topic in remotes {
        match wanted(&bindings, topic, own) {
            Ok(w) => todo.extend(w.into_iter().filter(|b| !have.contains(b))),
            Err(Refusal::Everyone) => {
                done.failed.insert(
                    topic.clone(),
                    format!(
                        "protect_remote_topics: an ALLOW binding lets User:* write remote topic {topic} on \
                         `{target}`; a DENY for User:* would deny ferry too: grant Write by name instead"
                    ),
                );
            }
            Err(Refusal::NoBindings) => done.unbound.push(topic.clone()),
            Err(Refusal::NotAWriter) => {
                done.failed.insert(
                    topic.clone(),
                    format!(
                        "protect_remote_topics: no ALLOW binding lets {own} (ferry's principal as its client \
                         properties say it) write remote topic {topic} on `{target}`, so ferry cannot tell \
                         itself from the other writers (a principal mapping rule, a super user?); nothing \
                         is denied on it: grant {own} Write on it by name"
                    ),
                );
            }
        }
    }
    let results = raw_admin::create_acls(admin, &todo, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("protect_remote_topics: create ACL bindings on `{target}`: {e}"))?;
    for (binding, error) in todo.into_iter().zip(results) {
        match error {
            None => done.created.push(binding),
            Some(e) if e.name == NO_AUTHORIZER => return Err(unsecured()),
            Some(e) if e.name == NOT_AUTHORIZED => return Err(refused()),
            Some(e) => {
                done.failed.entry(binding.name.clone()).or_insert_with(|| {
                    format!(
                        "protect_remote_topics: DENY Write for {} on remote topic {}: {e}",
                        binding.principal, binding.name
                    )
                });
            }
        }
    }
    let ours: Vec<AclBinding> = bindings.iter().filter(|b| is_ours(b, lift, own)).cloned().collect();
    let results = raw_admin::delete_acls(admin, &ours, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("protect_remote_topics: delete ACL bindings on `{target}`: {e}"))?;
    for (binding, error) in ours.into_iter().zip(results) {
        match error {
            None => done.lifted.push(binding),
            Some(e) if e.name == NOT_AUTHORIZED => return Err(refused()),
            Some(e) => {
                let topic = binding.name.clone();
                done.failed.entry(topic).or_insert_with(|| {
                    format!("promoted remote topic {}: lift DENY Write for {}: {e}", binding.name, binding.principal)
                });
            }
        }
    }
    Ok(done)
}

/// ferry's bindings (see [`is_ours`]) on the remote topics `remotes` of `target`.
pub async fn ours<C: rdkafka::client::ClientContext + 'static>(
    target: &str,
    admin: &rdkafka::admin::AdminClient<C>,
    own: &str,
    remotes: &BTreeSet<String>,
) -> Result<Vec<AclBinding>, String> {
    let filter = AclFilter { resource: AclResource::Topic, name: None, pattern: Some(AclPattern::Literal) };
    let bindings = raw_admin::describe_acls(admin, &filter, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("list the ACL bindings on `{target}`: {e}"))?;
    Ok(bindings.into_iter().filter(|b| is_ours(b, remotes, own)).collect())
}

/// Deletes `bindings` from `target` (`ferry promote`); one that is gone already (the flow's leader
/// lifted it) counts as deleted.
pub async fn delete<C: rdkafka::client::ClientContext + 'static>(
    target: &str,
    admin: &rdkafka::admin::AdminClient<C>,
    bindings: Vec<AclBinding>,
) -> Result<Vec<AclBinding>, String> {
    let results = raw_admin::delete_acls(admin, &bindings, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("delete ACL bindings on `{target}`: {e}"))?;
    for (binding, error) in bindings.iter().zip(results) {
        if let Some(e) = error {
            return Err(format!("delete {binding} on `{target}`: {e}"));
        }
    }
    Ok(bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str, pattern: AclPattern, principal: &str, permission: AclPermission, op: AclOperation) -> AclBinding {
        AclBinding {
            resource: AclResource::Topic,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission,
        }
    }

    fn allow(name: &str, pattern: AclPattern, principal: &str, op: AclOperation) -> AclBinding {
        b(name, pattern, principal, AclPermission::Allow, op)
    }

    const FERRY: &str = "User:syncer";

    #[test]
    fn every_writer_but_ferry_is_denied_write_on_the_literal_topic() {
        let bindings = [
            allow("east.orders", AclPattern::Literal, "User:bob", AclOperation::Write),
            allow("east.", AclPattern::Prefixed, "User:carol", AclOperation::All),
            allow("*", AclPattern::Literal, "User:dave", AclOperation::Write),
            allow("east.", AclPattern::Prefixed, FERRY, AclOperation::Write),
        ];
        let got = wanted(&bindings, "east.orders", FERRY).unwrap();
        let want: Vec<AclBinding> =
            ["User:bob", "User:carol", "User:dave"].iter().map(|p| denial("east.orders", p)).collect();
        assert_eq!(got, want);
        assert!(got.iter().all(|d| d.pattern == AclPattern::Literal && d.host == "*"));
    }

    #[test]
    fn readers_and_other_topics_writers_are_left_alone() {
        let bindings = [
            allow("east.orders", AclPattern::Literal, "User:alice", AclOperation::Read),
            allow("east.orders", AclPattern::Literal, "User:alice", AclOperation::Describe),
            allow("east.payments", AclPattern::Literal, "User:bob", AclOperation::Write),
            allow("west.", AclPattern::Prefixed, "User:carol", AclOperation::Write),
            b("east.orders", AclPattern::Literal, "User:erin", AclPermission::Deny, AclOperation::Write),
            AclBinding {
                resource: AclResource::Group,
                ..allow("east.orders", AclPattern::Literal, "User:x", AclOperation::All)
            },
            allow("east.orders", AclPattern::Literal, FERRY, AclOperation::Write),
        ];
        assert_eq!(wanted(&bindings, "east.orders", FERRY), Ok(vec![]));
    }

    #[test]
    fn a_ferry_that_no_binding_lets_write_denies_nobody() {
        // The broker names ferry otherwise (a mapping rule, an RFC 2253 subject with escapes, a super
        // user): a DENY for "everyone but ferry" could hit ferry itself.
        let bindings = [
            allow("east.orders", AclPattern::Literal, "User:bob", AclOperation::Write),
            allow("east.", AclPattern::Prefixed, "User:CN=ferry,O=Acme\\, Inc", AclOperation::Write),
        ];
        assert_eq!(wanted(&bindings, "east.orders", "User:CN=ferry,O=Acme, Inc"), Err(Refusal::NotAWriter));
    }

    #[test]
    fn a_wildcard_writer_or_a_topic_without_bindings_cannot_be_protected_by_bindings() {
        let everyone = [allow("east.", AclPattern::Prefixed, "User:*", AclOperation::Write)];
        assert_eq!(wanted(&everyone, "east.orders", FERRY), Err(Refusal::Everyone));
        let elsewhere = [allow("west.orders", AclPattern::Literal, "User:bob", AclOperation::Write)];
        assert_eq!(wanted(&elsewhere, "east.orders", FERRY), Err(Refusal::NoBindings));
    }

    #[test]
    fn ferrys_bindings_are_exactly_its_denials_on_its_remote_topics() {
        let remotes: BTreeSet<String> = ["east.orders".to_string()].into();
        assert!(is_ours(&denial("east.orders", "User:bob"), &remotes, FERRY));
        assert!(!is_ours(&denial("east.other", "User:bob"), &remotes, FERRY), "not a remote topic of the flow");
        assert!(!is_ours(&denial("east.orders", FERRY), &remotes, FERRY));
        let from_a_host = AclBinding { host: "10.0.0.1".into(), ..denial("east.orders", "User:bob") };
        assert!(!is_ours(&from_a_host, &remotes, FERRY));
        let deny_all = AclBinding { operation: AclOperation::All, ..denial("east.orders", "User:bob") };
        assert!(!is_ours(&deny_all, &remotes, FERRY));
    }
}
