//! The rights a flow needs on its clusters: the ACL tables of docs/security.md as one table in code ([`RIGHTS`]),
//! resolved for a flow and a deployment into concrete resources ([`needs`]), and judged against what the
//! brokers report this principal may do ([`judge`]). Names come from the functions the actors use
//! (copier and lease groups, transactional id, internal topics), never re-derived here; a unit test
//! checks that those tables say the same.

use serde::Serialize;

use crate::config::FlowPlan;
use crate::flow::Identity;
use crate::raw_admin::AclOperation as Op;

/// The flow's cluster a row of [`RIGHTS`] is about (as the README's two tables split them; the
/// offset-syncs topics move with `offset_syncs_topic_location`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Target,
}

/// The resources a row is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// Every topic the flow copies, `heartbeats` included once it exists.
    CopiedTopics,
    CopierGroup,
    OffsetSyncsTopic,
    Heartbeats,
    CheckpointedGroups,
    /// The remote topic of every copied topic, and of `heartbeats`.
    RemoteTopics,
    ProgressTopic,
    CheckpointsTopic,
    CheckpointsTransactionalId,
    /// The exactly-once copier's transactional id (this node's; the README asks for the prefix).
    CopierTransactionalId,
    LeaseTopic,
    ControlTopic,
    LeaseGroup,
    /// Every checkpointed group, when `sync_group_offsets_enabled`.
    SyncedGroups,
    /// The reverse flow's offset-syncs topic, when it exists.
    ReverseOffsetSyncsTopic,
    /// The cluster resource, when `sync_topic_acls_enabled`: DescribeAcls needs Describe on it,
    /// CreateAcls Alter.
    AclSyncCluster,
    /// The remote topics, when `sync_topic_deletions = true` deletes those whose source topic went.
    DeletedRemoteTopics,
    /// The target's cluster resource, when `protect_remote_topics`: CreateAcls needs Alter on it.
    ProtectCluster,
}

/// One row of the README's tables.
#[derive(Debug)]
pub struct Row {
    pub side: Side,
    pub subject: Subject,
    pub rights: &'static [Op],
    /// Who needs them ([`Row::used_by`]), with `{source}` and `{target}` for the flow's aliases.
    used_by: &'static str,
    /// The README's resource cell, with `{source}`, `{target}` and `{D}` (the deployment) for a flow's.
    readme_resource: &'static str,
    /// What the README's rights cell says beyond [`Row::rights`].
    readme_rights_extra: &'static str,
}

use Op::{Alter, AlterConfigs, Create, Describe, DescribeConfigs, Read, Write};
use Side::{Source, Target};
use Subject::*;

impl Row {
    /// The row as the README's table writes it, for flow `source->target` of `deployment`.
    pub fn readme_line(&self, source: &str, target: &str, deployment: &str) -> String {
        let fill = |t: &str| t.replace("{source}", source).replace("{target}", target).replace("{D}", deployment);
        let rights: Vec<&str> = self.rights.iter().map(Op::as_str).collect();
        format!(
            "| {} | {}{} | {} |",
            fill(self.readme_resource),
            rights.join(", "),
            fill(self.readme_rights_extra),
            self.used_by(source, target)
        )
    }

    /// Who needs the rights, for flow `source->target`.
    pub fn used_by(&self, source: &str, target: &str) -> String {
        self.used_by.replace("{source}", source).replace("{target}", target)
    }
}

/// Everything a flow needs, in the README's order.
pub const RIGHTS: &[Row] = &[
    Row {
        side: Source,
        subject: CopiedTopics,
        rights: &[Read, DescribeConfigs],
        used_by: "copier; topic sync (remote topics get the source's configs)",
        readme_resource: "topic: every topic the flow copies, and `heartbeats`",
        readme_rights_extra: "",
    },
    Row {
        side: Source,
        subject: CopierGroup,
        rights: &[Read],
        used_by: "copier group: splits the partitions among the nodes",
        readme_resource: "group `{D}.{source}->{target}`",
        readme_rights_extra: "",
    },
    Row {
        side: Source,
        subject: OffsetSyncsTopic,
        rights: &[Create, Write, Read],
        used_by: "offset-sync emitter writes it, checkpoint computer reads it",
        readme_resource: "topic `mm2-offset-syncs.{target}.internal`",
        readme_rights_extra: "",
    },
    Row {
        side: Source,
        subject: Heartbeats,
        rights: &[Create, Write],
        used_by: "heartbeat emitter (Heartbeat({target}, {source}), as MM2)",
        readme_resource: "topic `heartbeats`",
        readme_rights_extra: "",
    },
    Row {
        side: Source,
        subject: CheckpointedGroups,
        rights: &[Describe],
        used_by: "checkpoint computer lists the groups and reads their offsets",
        readme_resource: "group: every group the flow checkpoints (`groups`)",
        readme_rights_extra: "",
    },
    Row {
        side: Source,
        subject: AclSyncCluster,
        rights: &[Describe],
        used_by: "topic ACL sync lists the topics' ACL bindings (DescribeAcls)",
        readme_resource: "cluster, only with `sync_topic_acls_enabled`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: RemoteTopics,
        rights: &[Create, Write, DescribeConfigs, AlterConfigs, Alter],
        used_by: "topic sync creates them, syncs configs (AlterConfigs), adds partitions (Alter); copier writes",
        readme_resource: "topic `{source}.<topic>` for every copied topic, and `{source}.heartbeats`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: ProgressTopic,
        rights: &[Create, Read, Write],
        used_by: "copy progress",
        readme_resource: "topic `mm2-offsets.{source}.internal`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: CheckpointsTopic,
        rights: &[Create, Read, Write],
        used_by: "checkpoint computer (reads the published checkpoints at start)",
        readme_resource: "topic `{source}.checkpoints.internal`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: CheckpointsTransactionalId,
        rights: &[Write],
        used_by: "checkpoint producer (fences an ex-leader)",
        readme_resource: "transactional id `{D}.{source}->{target}.checkpoints`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: CopierTransactionalId,
        rights: &[Write, Describe],
        used_by: "exactly-once copier: its transactions, and fencing another node's id when it takes over that node's partitions",
        readme_resource: "transactional id `{D}.{source}->{target}.copier.` (prefixed: every node's `{D}.{source}->{target}.copier.<node id>` and `<node id>~1`), only with `delivery = \"exactly_once\"`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: LeaseTopic,
        rights: &[Create, Read],
        used_by: "lease",
        readme_resource: "topic `ferry.leases.{source}.{target}`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: ControlTopic,
        rights: &[Create, Read, Write],
        used_by: "the deployment's pauses and the remote topics it created (every node reads it; the node that takes a pause or creates a remote topic writes it)",
        readme_resource: "topic `ferry.control.internal`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: LeaseGroup,
        rights: &[Read],
        used_by: "leaders group (who leads each flow; one per deployment)",
        readme_resource: "group `{D}.leaders`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: Heartbeats,
        rights: &[Create, Write],
        used_by: "heartbeat emitter",
        readme_resource: "topic `heartbeats`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: SyncedGroups,
        rights: &[Read],
        used_by: "group offset sync (commits in the checkpoint producer's transactions)",
        readme_resource: "group: every group synced (`sync_group_offsets_enabled`)",
        readme_rights_extra: "; Read on its `{source}.<topic>`",
    },
    Row {
        side: Target,
        subject: ReverseOffsetSyncsTopic,
        rights: &[Read],
        used_by: "reverse checkpoints (fail-back)",
        readme_resource: "topic `mm2-offset-syncs.{source}.internal`, if a reverse flow `{target}->{source}` writes it \
                          (its `offset_syncs_topic_location` is `\"source\"`)",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: AclSyncCluster,
        rights: &[Alter],
        used_by: "topic ACL sync creates the remote topics' ACL bindings (CreateAcls; Alter implies Describe)",
        readme_resource: "cluster, only with `sync_topic_acls_enabled`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: DeletedRemoteTopics,
        rights: &[Op::Delete],
        used_by: "deletions that follow: topic sync deletes a remote topic it created once its source topic is gone",
        readme_resource: "topic `{source}.<topic>` for every copied topic, only with `sync_topic_deletions = true`",
        readme_rights_extra: "",
    },
    Row {
        side: Target,
        subject: ProtectCluster,
        rights: &[Alter],
        used_by: "topic synchroniser denies other principals Write on the remote topics (DescribeAcls, CreateAcls)",
        readme_resource: "cluster, only with `protect_remote_topics`",
        readme_rights_extra: "",
    },
];

/// A resource as `kafka-acls` names its type.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "type", content = "name", rename_all = "snake_case")]
pub enum Resource {
    Topic(String),
    Group(String),
    TransactionalId(String),
    /// The cluster resource (`kafka-acls --cluster`).
    Cluster,
}

impl Resource {
    pub fn kind(&self) -> &'static str {
        match self {
            Resource::Topic(_) => "topic",
            Resource::Group(_) => "group",
            Resource::TransactionalId(_) => "transactional id",
            Resource::Cluster => "cluster",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Resource::Topic(n) | Resource::Group(n) | Resource::TransactionalId(n) => n,
            // Kafka's name of the one cluster resource.
            Resource::Cluster => "kafka-cluster",
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.name())
    }
}

/// One resource a flow needs rights on, on one of its clusters.
#[derive(Clone, Debug)]
pub struct Need {
    /// The alias of the cluster that holds the resource.
    pub cluster: String,
    pub resource: Resource,
    pub row: &'static Row,
}

/// What the flow copies and checkpoints, as listed on its source.
pub struct Selected<'a> {
    pub topics: &'a [String],
    pub groups: &'a [String],
}

/// Whether the flow uses the resources of `row` at all: those of an emitter switched off are not needed
/// (a read-only source, README "Read-only sources", needs no Write anywhere on it).
fn in_use(plan: &FlowPlan, row: &Row) -> bool {
    let s = &plan.settings;
    match row.subject {
        OffsetSyncsTopic => s.emit_offset_syncs_enabled,
        Heartbeats => match row.side {
            Source => s.emit_reverse_heartbeats_enabled,
            Target => s.emit_heartbeats_enabled,
        },
        CheckpointsTopic => s.emit_checkpoints_enabled,
        CheckpointedGroups | CheckpointsTransactionalId | ReverseOffsetSyncsTopic => s.runs_checkpoints(),
        AclSyncCluster => s.sync_topic_acls_enabled,
        DeletedRemoteTopics => s.topic_deletions == crate::config::TopicDeletions::On,
        ProtectCluster => s.protect_remote_topics,
        CopierTransactionalId => s.delivery == crate::config::Delivery::ExactlyOnce,
        CopiedTopics | CopierGroup | RemoteTopics | ProgressTopic | LeaseTopic | ControlTopic | LeaseGroup
        | SyncedGroups => true,
    }
}

/// The resources of every row of [`RIGHTS`] for `plan` run by `identity`'s deployment.
pub fn needs(plan: &FlowPlan, identity: &Identity, selected: &Selected<'_>) -> Vec<Need> {
    let mut out = Vec::new();
    for row in RIGHTS.iter().filter(|r| in_use(plan, r)) {
        let on_side = match row.side {
            Source => &plan.source.alias,
            Target => &plan.target.alias,
        };
        let mut push = |cluster: &str, resource: Resource| {
            out.push(Need { cluster: cluster.to_string(), resource, row });
        };
        match row.subject {
            CopiedTopics => selected.topics.iter().for_each(|t| push(on_side, Resource::Topic(t.clone()))),
            DeletedRemoteTopics => {
                selected.topics.iter().for_each(|t| push(on_side, Resource::Topic(remote_topic(plan, t))));
            }
            RemoteTopics => {
                let heartbeats = plan.policy.heartbeats_topic();
                let mut remotes: Vec<String> = selected.topics.iter().map(|t| remote_topic(plan, t)).collect();
                let remote_heartbeats = remote_topic(plan, heartbeats);
                // Copied from the source's `heartbeats`: listed when it exists there (a selected topic),
                // or when the flow's own reverse heartbeats create it.
                if plan.settings.emit_reverse_heartbeats_enabled && !remotes.contains(&remote_heartbeats) {
                    remotes.push(remote_heartbeats);
                }
                remotes.into_iter().for_each(|t| push(on_side, Resource::Topic(t)));
            }
            CopierGroup => push(on_side, Resource::Group(crate::flow::copier::copier_group(identity, plan))),
            LeaseGroup => push(on_side, Resource::Group(crate::flow::lease::lease_group(identity))),
            CheckpointsTransactionalId => {
                push(on_side, Resource::TransactionalId(crate::flow::checkpoints::transactional_id(identity, plan)));
            }
            CopierTransactionalId => {
                push(
                    on_side,
                    Resource::TransactionalId(crate::flow::copier::transactions::transactional_id(identity, plan)),
                );
            }
            CheckpointedGroups => selected.groups.iter().for_each(|g| push(on_side, Resource::Group(g.clone()))),
            SyncedGroups if plan.settings.sync_group_offsets_enabled => {
                selected.groups.iter().for_each(|g| push(on_side, Resource::Group(g.clone())));
            }
            SyncedGroups => {}
            AclSyncCluster | ProtectCluster => push(on_side, Resource::Cluster),
            OffsetSyncsTopic => {
                let (cluster, topic) = crate::flow::offset_syncs::syncs_location(plan);
                push(&cluster.alias, Resource::Topic(topic));
            }
            ReverseOffsetSyncsTopic => {
                let (cluster, topic) = crate::flow::checkpoints::reverse_syncs_location(plan);
                push(&cluster.alias, Resource::Topic(topic));
            }
            Heartbeats => push(on_side, Resource::Topic(plan.policy.heartbeats_topic().to_string())),
            ProgressTopic => push(on_side, Resource::Topic(crate::flow::progress::topic_spec(plan).name)),
            CheckpointsTopic => push(on_side, Resource::Topic(plan.policy.checkpoints_topic(&plan.id.source))),
            LeaseTopic => push(on_side, Resource::Topic(crate::flow::lease::lease_topic(plan))),
            ControlTopic => push(on_side, Resource::Topic(crate::control::CONTROL_TOPIC.to_string())),
        }
    }
    out
}

/// `topic`'s name on the flow's target.
pub fn remote_topic(plan: &FlowPlan, topic: &str) -> String {
    plan.policy.format_remote_topic(&plan.id.source, topic)
}

/// What the cluster told about one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// The resource was described (a group that does not exist yet is described too): the operations
    /// the broker computed for this principal, `None` when it did not say.
    Described(Option<Vec<Op>>),
    /// A topic that does not exist; what a validate-only CreateTopics of it answered (`Err`: the
    /// broker's error name, e.g. `TOPIC_AUTHORIZATION_FAILED`, and message).
    Absent { create: Result<(), (String, String)> },
    /// The broker refused to describe it: no Describe (the broker's error name).
    Hidden(String),
    /// No API reports rights on it (transactional ids); `unrestricted`: the cluster grants this
    /// principal every cluster operation (no authorizer, or a super user).
    NoApi { unrestricted: bool, bootstrap: String },
    /// The cluster could not be asked.
    Failed(String),
}

/// The verdict on one need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// Every right is granted (for a topic that does not exist: Create, which is all it needs now).
    Granted { note: Option<String> },
    /// These rights are not granted: the flow would fail on them.
    Missing { rights: Vec<&'static str>, reason: String },
    /// A topic that does not exist yet and that this principal may create (a validate-only CreateTopics
    /// said so): ferry creates it at start. Its `later` rights can be judged only once it exists.
    Creatable { later: Vec<&'static str> },
    /// The brokers cannot tell now; not a failure.
    Unknown { reason: String },
    /// No API reports these rights: check them by hand.
    NotCheckable { hint: String },
    /// Asking failed, or creating the topic would fail for another reason than rights.
    Failed { reason: String },
}

impl Verdict {
    /// Whether the flow would fail on it.
    pub fn is_problem(&self) -> bool {
        matches!(self, Verdict::Missing { .. } | Verdict::Failed { .. })
    }

    /// The word shown in the table.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Granted { .. } => "OK",
            Verdict::Creatable { .. } => "CREATE",
            Verdict::Missing { .. } => "MISSING",
            Verdict::Unknown { .. } => "UNKNOWN",
            Verdict::NotCheckable { .. } => "UNCHECKED",
            Verdict::Failed { .. } => "FAILED",
        }
    }
}

/// Every operation Kafka defines on the cluster resource: what a cluster without an authorizer reports
/// for anyone (Kafka 4.3), and what it reports for a super user.
pub const CLUSTER_OPERATIONS: [Op; 7] = [
    Op::Alter,
    Op::AlterConfigs,
    Op::ClusterAction,
    Op::Create,
    Op::Describe,
    Op::DescribeConfigs,
    Op::IdempotentWrite,
];

/// Whether a principal with `ops` on the cluster resource may do everything (no authorizer, or a super
/// user): then nothing is refused to it, transactional ids included.
pub fn unrestricted(ops: &[Op]) -> bool {
    ops.contains(&Op::All) || CLUSTER_OPERATIONS.iter().all(|op| ops.contains(op))
}

/// Judges `need` from what its cluster told about the resource.
pub fn judge(need: &Need, known: &Known) -> Verdict {
    let rights = need.row.rights;
    let names = |ops: &[Op]| ops.iter().map(Op::as_str).collect::<Vec<_>>();
    let is_topic = matches!(need.resource, Resource::Topic(_));
    match known {
        Known::Described(None) => Verdict::Unknown {
            reason: "the broker did not report this principal's operations (KIP-430, Kafka 2.3+)".into(),
        },
        // DescribeCluster needs no right: on the cluster an empty list means none granted.
        Known::Described(Some(ops)) if ops.is_empty() && need.resource != Resource::Cluster => {
            Verdict::Unknown { reason: "the broker reported no operations for this principal (KIP-430)".into() }
        }
        Known::Described(Some(ops)) => {
            // Create matters only for a topic that does not exist yet.
            let missing: Vec<Op> = rights
                .iter()
                .copied()
                .filter(|op| !(is_topic && *op == Op::Create))
                .filter(|op| !ops.contains(&Op::All) && !ops.contains(op))
                .collect();
            if missing.is_empty() {
                Verdict::Granted { note: None }
            } else {
                let list = names(&missing).join(", ");
                Verdict::Missing {
                    rights: names(&missing),
                    reason: format!("not granted {list}; grant {list} on {} to this principal", need.resource),
                }
            }
        }
        Known::Absent { create } if !rights.contains(&Op::Create) => Verdict::Granted {
            note: Some(match create {
                _ if need.row.subject == Subject::ReverseOffsetSyncsTopic => {
                    "not needed: the topic does not exist (no reverse flow writes it)".into()
                }
                _ => "the topic does not exist".into(),
            }),
        },
        Known::Absent { create: Ok(()) } => {
            Verdict::Creatable { later: rights.iter().filter(|op| **op != Op::Create).map(Op::as_str).collect() }
        }
        Known::Absent { create: Err((code, _)) } if code.contains("AUTHORIZATION_FAILED") => Verdict::Missing {
            rights: vec!["Create"],
            reason: format!(
                "does not exist and this principal may not create it ({code}); grant Create on {} to this \
                 principal, or create it beforehand",
                need.resource
            ),
        },
        Known::Absent { create: Err((code, message)) } => {
            Verdict::Failed { reason: format!("does not exist, and creating it would fail: {message} ({code})") }
        }
        // ferry looks for this topic in metadata and reads it only if it shows: hidden is as absent.
        Known::Hidden(code) if need.row.subject == Subject::ReverseOffsetSyncsTopic => Verdict::Unknown {
            reason: format!(
                "not authorized to Describe ({code}), so ferry treats it as absent; if a reverse flow writes it, \
                 grant Describe, Read on {} for fail-back checkpoints",
                need.resource
            ),
        },
        Known::Hidden(code) => {
            let mut missing = vec!["Describe"];
            missing.extend(rights.iter().map(Op::as_str).filter(|r| *r != "Describe"));
            Verdict::Missing {
                reason: format!(
                    "not authorized to Describe ({code}), so ferry cannot tell whether it exists; grant {} on {} to \
                     this principal",
                    missing.join(", "),
                    need.resource
                ),
                rights: missing,
            }
        }
        Known::NoApi { unrestricted: true, .. } => Verdict::Granted {
            note: Some("the cluster grants this principal every operation (no authorizer, or a super user)".into()),
        },
        Known::NoApi { unrestricted: false, bootstrap } => Verdict::NotCheckable {
            hint: format!(
                "no Kafka API reports rights on a {}; check with: kafka-acls --bootstrap-server {bootstrap} \
                 --command-config ADMIN.properties --list --{} {}",
                need.resource.kind(),
                need.resource.kind().replace(' ', "-"),
                need.resource.name()
            ),
        },
        Known::Failed(reason) => Verdict::Failed { reason: reason.clone() },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The flow `east->west` of `[[flows]]` keys `extra`.
    pub(crate) fn plan(extra: &str) -> FlowPlan {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("f.toml"),
            format!(
                "[clusters.east]\nbootstrap_servers = \"e:1\"\n[clusters.west]\nbootstrap_servers = \"w:1\"\n\
                 [[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"orders\"]\n{extra}\n"
            ),
        )
        .expect("write");
        let set = crate::config::load_dir(dir.path(), crate::kafka::check_client_properties).expect("valid");
        set.flows.into_values().next().expect("a flow")
    }

    fn identity() -> Identity {
        Identity { node_id: "n1".into(), deployment: "D".into() }
    }

    fn need(subject: Subject, side: Side, resource: Resource) -> Need {
        let row = RIGHTS.iter().find(|r| r.subject == subject && r.side == side).expect("row");
        Need { cluster: "east".into(), resource, row }
    }

    #[test]
    fn the_docs_acl_tables_say_what_the_code_checks() {
        let page = include_str!("../../docs/security.md");
        for row in RIGHTS {
            let line = row.readme_line("east", "west", "D");
            assert!(
                page.contains(&line),
                "docs/security.md's ACL tables lack this row (or word it otherwise):\n{line}"
            );
        }
    }

    #[test]
    fn resources_are_named_by_the_actors_own_functions() {
        let plan = plan("sync_group_offsets_enabled = true");
        let topics = ["orders".to_string(), "heartbeats".to_string()];
        let groups = ["billing".to_string()];
        let all = needs(&plan, &identity(), &Selected { topics: &topics, groups: &groups });
        let found: Vec<(&str, String)> = all.iter().map(|n| (n.cluster.as_str(), n.resource.to_string())).collect();
        for (cluster, resource) in [
            ("east", "topic orders"),
            ("east", "group D.east->west"),
            ("east", "topic mm2-offset-syncs.west.internal"),
            ("east", "topic heartbeats"),
            ("east", "group billing"),
            ("west", "topic east.orders"),
            ("west", "topic east.heartbeats"),
            ("west", "topic mm2-offsets.east.internal"),
            ("west", "topic east.checkpoints.internal"),
            ("west", "transactional id D.east->west.checkpoints"),
            ("west", "topic ferry.leases.east.west"),
            ("west", "topic ferry.control.internal"),
            ("west", "group D.leaders"),
            ("west", "group billing"),
            ("west", "topic mm2-offset-syncs.east.internal"),
        ] {
            assert!(found.contains(&(cluster, resource.to_string())), "{resource} on {cluster} in {found:?}");
        }
        // The remote heartbeats topic once, though `heartbeats` is also a copied topic.
        assert_eq!(found.iter().filter(|(_, r)| r == "topic east.heartbeats").count(), 1);

        // With the offset-syncs topic on the target, it moves there, and the reverse flow's to the source.
        let plan = super::tests::plan("offset_syncs_topic_location = \"target\"");
        let all = needs(&plan, &identity(), &Selected { topics: &[], groups: &[] });
        let syncs: Vec<(&str, &str)> = all
            .iter()
            .filter(|n| matches!(n.row.subject, OffsetSyncsTopic | ReverseOffsetSyncsTopic))
            .map(|n| (n.cluster.as_str(), n.resource.name()))
            .collect();
        assert_eq!(syncs, [("west", "mm2-offset-syncs.east.internal"), ("east", "mm2-offset-syncs.west.internal")]);
        assert!(!all.iter().any(|n| n.row.subject == SyncedGroups), "no group sync, no synced groups");
    }

    #[test]
    fn acl_sync_needs_describe_on_the_source_cluster_and_alter_on_the_target_cluster() {
        let cluster_rights = |extra: &str| -> Vec<(String, String, Vec<&str>)> {
            needs(&plan(extra), &identity(), &Selected { topics: &[], groups: &[] })
                .iter()
                .filter(|n| n.resource == Resource::Cluster)
                .map(|n| (n.cluster.clone(), n.resource.to_string(), n.row.rights.iter().map(Op::as_str).collect()))
                .collect()
        };
        assert!(cluster_rights("").is_empty(), "no ACL sync, no right on the clusters");
        let c = "cluster kafka-cluster".to_string();
        assert_eq!(
            cluster_rights("sync_topic_acls_enabled = true"),
            [("east".to_string(), c.clone(), vec!["Describe"]), ("west".to_string(), c, vec!["Alter"])]
        );
        let target = need(AclSyncCluster, Target, Resource::Cluster);
        let Verdict::Missing { rights, reason } = judge(&target, &Known::Described(Some(vec![Op::Describe]))) else {
            panic!("Alter is missing")
        };
        assert_eq!(rights, ["Alter"]);
        assert!(reason.contains("grant Alter on cluster kafka-cluster"), "{reason}");
        // A cluster without an authorizer reports every cluster operation.
        let none = judge(&target, &Known::Described(Some(Vec::new())));
        assert!(matches!(&none, Verdict::Missing { rights, .. } if rights == &["Alter"]), "{none:?}");
        let ops = Known::Described(Some(CLUSTER_OPERATIONS.to_vec()));
        assert_eq!(judge(&target, &ops), Verdict::Granted { note: None });
    }

    #[test]
    fn protected_remote_topics_need_alter_on_the_target_cluster() {
        // (Set here: validation refuses protection over this plan's PLAINTEXT target.)
        let mut protected = plan("");
        protected.settings.protect_remote_topics = true;
        let on_clusters: Vec<(String, Vec<&str>)> =
            needs(&protected, &identity(), &Selected { topics: &[], groups: &[] })
                .iter()
                .filter(|n| n.resource == Resource::Cluster)
                .map(|n| (n.cluster.clone(), n.row.rights.iter().map(Op::as_str).collect()))
                .collect();
        assert_eq!(on_clusters, [("west".to_string(), vec!["Alter"])]);
        let target = need(ProtectCluster, Target, Resource::Cluster);
        let Verdict::Missing { rights, reason } = judge(&target, &Known::Described(Some(vec![Op::Describe]))) else {
            panic!("Alter is missing")
        };
        assert_eq!(rights, ["Alter"]);
        assert!(reason.contains("grant Alter on cluster kafka-cluster"), "{reason}");
        assert!(target.row.used_by("east", "west").contains("denies other principals Write"));
    }

    #[test]
    fn a_read_only_source_needs_no_write_on_it_and_switched_off_emitters_need_nothing() {
        let plan = plan(
            "offset_syncs_topic_location = \"target\"\nemit_reverse_heartbeats_enabled = false\n\
             sync_group_offsets_enabled = true",
        );
        let topics = ["orders".to_string()];
        let groups = ["billing".to_string()];
        let all = needs(&plan, &identity(), &Selected { topics: &topics, groups: &groups });
        let on_source: Vec<(String, Vec<&str>)> = all
            .iter()
            .filter(|n| n.cluster == "east")
            .map(|n| (n.resource.to_string(), n.row.rights.iter().map(Op::as_str).collect()))
            .collect();
        for (resource, rights) in &on_source {
            assert!(
                rights.iter().all(|r| ["Read", "Describe", "DescribeConfigs"].contains(r)),
                "{resource}: {rights:?} on a read-only source"
            );
            assert_ne!(resource, "topic heartbeats", "no reverse heartbeats, no source heartbeats topic");
        }
        let found: Vec<String> = all.iter().map(|n| n.resource.to_string()).collect();
        assert!(!found.contains(&"topic east.heartbeats".to_string()), "nothing creates it: {found:?}");

        // Every emitter off: no offset-syncs, checkpoints or heartbeats topics, no checkpointed groups.
        let plan = super::tests::plan(
            "emit_checkpoints_enabled = false\nemit_offset_syncs_enabled = false\n\
             emit_heartbeats_enabled = false\nemit_reverse_heartbeats_enabled = false",
        );
        let all = needs(&plan, &identity(), &Selected { topics: &topics, groups: &groups });
        let subjects: Vec<Subject> = all.iter().map(|n| n.row.subject).collect();
        for off in [OffsetSyncsTopic, Heartbeats, CheckpointsTopic, CheckpointedGroups, CheckpointsTransactionalId] {
            assert!(!subjects.contains(&off), "{off:?} in {subjects:?}");
        }
        assert!(subjects.contains(&CopiedTopics) && subjects.contains(&LeaseGroup));
    }

    #[test]
    fn verdicts_from_what_the_broker_reported() {
        let group = need(CopierGroup, Source, Resource::Group("D.east->west".into()));
        let judged = |n: &Need, k: Known| judge(n, &k);
        assert_eq!(
            judged(&group, Known::Described(Some(vec![Op::Read, Op::Describe]))),
            Verdict::Granted { note: None }
        );
        assert_eq!(judged(&group, Known::Described(Some(vec![Op::All]))), Verdict::Granted { note: None });
        let Verdict::Missing { rights, reason } = judged(&group, Known::Described(Some(vec![Op::Describe]))) else {
            panic!("Read is missing")
        };
        assert_eq!(rights, ["Read"]);
        assert!(reason.contains("grant Read on group D.east->west"), "{reason}");
        assert!(matches!(judged(&group, Known::Described(None)), Verdict::Unknown { .. }));
        let Verdict::Missing { rights, .. } = judged(&group, Known::Hidden("GROUP_AUTHORIZATION_FAILED".into())) else {
            panic!("hidden")
        };
        assert_eq!(rights, ["Describe", "Read"]);

        // A topic that exists needs no Create; one that does not needs only Create now.
        let syncs = need(OffsetSyncsTopic, Source, Resource::Topic("mm2-offset-syncs.west.internal".into()));
        assert_eq!(judged(&syncs, Known::Described(Some(vec![Op::Read, Op::Write]))), Verdict::Granted { note: None });
        assert_eq!(
            judged(&syncs, Known::Absent { create: Ok(()) }),
            Verdict::Creatable { later: vec!["Write", "Read"] }
        );
        let refused = Known::Absent { create: Err(("TOPIC_AUTHORIZATION_FAILED".into(), "Broker: ...".into())) };
        assert!(matches!(judged(&syncs, refused), Verdict::Missing { rights, .. } if rights == ["Create"]));
        let invalid = Known::Absent { create: Err(("InvalidReplicationFactor".into(), "Broker: Invalid".into())) };
        assert!(matches!(judged(&syncs, invalid), Verdict::Failed { .. }));

        // A reverse flow's topic the principal cannot see is as absent to ferry: not a failure.
        let reverse = need(ReverseOffsetSyncsTopic, Target, Resource::Topic("mm2-offset-syncs.east.internal".into()));
        assert!(!judged(&reverse, Known::Hidden("TOPIC_AUTHORIZATION_FAILED".into())).is_problem());
        assert!(!judged(&reverse, Known::Absent { create: Err(("_NOT_ASKED".into(), String::new())) }).is_problem());

        // Transactional ids: nothing reports them, unless the principal may do everything.
        let txn =
            need(CheckpointsTransactionalId, Target, Resource::TransactionalId("D.east->west.checkpoints".into()));
        let Verdict::NotCheckable { hint } =
            judged(&txn, Known::NoApi { unrestricted: false, bootstrap: "w:1".into() })
        else {
            panic!("not checkable")
        };
        assert!(
            hint.contains("--bootstrap-server w:1") && hint.contains("--transactional-id D.east->west.checkpoints")
        );
        assert!(matches!(
            judged(&txn, Known::NoApi { unrestricted: true, bootstrap: "w:1".into() }),
            Verdict::Granted { .. }
        ));
    }

    #[test]
    fn a_cluster_without_authorizer_grants_everything() {
        let all = CLUSTER_OPERATIONS;
        assert!(unrestricted(&all));
        assert!(unrestricted(&[Op::All]));
        assert!(!unrestricted(&[Op::Describe, Op::Create]));
        assert!(!unrestricted(&[]));
    }
}
