//! `ferry check`: a preflight of a flows directory against its clusters, changing nothing. For each flow
//! it lists the topics the flow would copy (with their remote names) and the groups it would checkpoint,
//! with the copier's and checkpoint computer's own filters; judges every right the flow needs
//! ([`rights`], the README's ACL tables) from the operations the brokers report for this principal
//! (KIP-430) and, for a topic that does not exist yet, a validate-only CreateTopics; and shows the state of
//! its internal topics ([`internal`]), all into a [`Report`]. Nothing is written: no right is tried by
//! using it.
//!
//! What cannot be known this way is said so: rights on a transactional id (no API reports them), and
//! the rights other than Create on a topic that does not exist yet.

pub mod internal;
mod report;
pub mod rights;

pub use report::{ClusterReport, CopiedTopic, FlowReport, InternalCheck, RegistryCheck, Report, RightCheck};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clients::{Admin, Connection, Isolation};
use crate::config::{ClusterSpec, FlowId, FlowPlan, FlowSet, secrets};
use crate::flow::Identity;
use crate::kafka::{self, TopicSpec};
use crate::raw_admin;
use internal::{Internal, Observed};
use rights::{Known, Need, Resource};

/// How long a cluster may take to answer the first request before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long each later request may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a topic created by someone else during the check is described again until a broker knows it.
const CREATED_MEANWHILE_WAIT: Duration = Duration::from_secs(5);

/// Checks the enabled flows of `set` (or only `only`, enabled or not) as deployment `deployment` would run
/// them. An `Err` when `only` names no flow of the set.
pub fn run(set: &FlowSet, deployment: &str, only: Option<&FlowId>) -> Result<Report, String> {
    let plans: Vec<&FlowPlan> = match only {
        Some(id) => vec![set.flows.get(id).ok_or_else(|| format!("no flow {id} in the flows directory"))?],
        None => set.flows.values().filter(|p| p.settings.enabled).collect(),
    };
    let aliases: BTreeSet<&String> = plans.iter().flat_map(|p| [&p.source.alias, &p.target.alias]).collect();
    // Every cluster at once: an unreachable one costs its timeout once, not once per cluster.
    let clusters: BTreeMap<String, Cluster> = std::thread::scope(|s| {
        let probes: Vec<_> =
            aliases.iter().map(|a| (a.to_string(), s.spawn(|| Cluster::probe(&set.clusters[*a])))).collect();
        probes
            .into_iter()
            .map(|(a, h)| {
                let probed = h.join().unwrap_or_else(|_| panic!("probe of `{a}` panicked"));
                (a, probed)
            })
            .collect()
    });
    let identity = Identity { node_id: String::new(), deployment: deployment.to_string() };
    let flows = plans.iter().map(|p| check_flow(p, &identity, &clusters)).collect();
    let disabled = match only {
        Some(_) => Vec::new(),
        None => set.flows.values().filter(|p| !p.settings.enabled).map(|p| p.id.to_string()).collect(),
    };
    Ok(Report {
        deployment: deployment.to_string(),
        clusters: clusters.values().map(Cluster::report).collect(),
        flows,
        disabled,
    })
}

/// A cluster's connection and what its probe found.
struct Cluster {
    spec: ClusterSpec,
    conn: Arc<Connection>,
    /// The description, or why the cluster did not answer.
    described: Result<raw_admin::ClusterDescription, String>,
}

impl Cluster {
    fn probe(spec: &ClusterSpec) -> Cluster {
        let conn = Connection::standalone(spec);
        let alias = &spec.alias;
        let described = conn
            .admin()
            .map_err(|e| e.to_string())
            .and_then(|admin| {
                kafka::block_on(alias, raw_admin::describe_cluster(&admin, CONNECT_TIMEOUT))
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| {
                let cause = kafka::connection_problem(alias).map(|c| format!(" (last connection error: {c})"));
                secrets::scrub_with(&format!("{e}{}", cause.unwrap_or_default()), &spec.secret_values())
            });
        Cluster { spec: spec.clone(), conn, described }
    }

    fn report(&self) -> ClusterReport {
        let (d, e) = (self.described.as_ref().ok(), self.described.as_ref().err());
        ClusterReport {
            alias: self.spec.alias.clone(),
            bootstrap_servers: self.spec.bootstrap_servers.clone(),
            reachable: d.is_some(),
            cluster_id: d.and_then(|d| d.cluster_id.clone()),
            brokers: d.map(|d| d.brokers),
            error: e.cloned(),
        }
    }

    /// Whether this principal may do everything on the cluster (see [`rights::unrestricted`]).
    fn unrestricted(&self) -> bool {
        self.described.as_ref().ok().and_then(|d| d.authorized_operations.as_deref()).is_some_and(rights::unrestricted)
    }

    fn admin(&self) -> Result<Admin, String> {
        self.conn.admin().map_err(|e| e.to_string())
    }

    /// `e` in words, scrubbed of this cluster's secrets.
    fn said(&self, e: impl std::fmt::Display) -> String {
        secrets::scrub_with(&e.to_string(), &self.spec.secret_values())
    }
}

/// What one cluster told about a flow's topics and groups.
#[derive(Default)]
struct Facts {
    topics: HashMap<String, Known>,
    groups: HashMap<String, Known>,
    /// `cleanup.policy` of existing topics (`Err`: why unknown).
    cleanup: HashMap<String, Result<String, String>>,
    partitions: HashMap<String, i32>,
    /// The whole cluster could not be asked.
    failed: Option<String>,
}

fn check_flow(plan: &FlowPlan, identity: &Identity, clusters: &BTreeMap<String, Cluster>) -> FlowReport {
    let mut report = FlowReport {
        flow: plan.id.to_string(),
        file: plan.file.display().to_string(),
        topics: Vec::new(),
        groups: Vec::new(),
        rights: Vec::new(),
        internal_topics: Vec::new(),
        errors: Vec::new(),
        notes: Vec::new(),
        registries: Vec::new(),
    };
    let source = &clusters[&plan.source.alias];
    for c in [source, &clusters[&plan.target.alias]] {
        if c.described.is_err() {
            report.errors.push(format!(
                "cluster `{}` ({}) unreachable: not checked there",
                c.spec.alias, c.spec.bootstrap_servers
            ));
        }
    }
    let hidden = if source.described.is_ok() { list_source(plan, source, &mut report) } else { BTreeMap::new() };
    let copied = report.topics.iter().map(|t| t.topic.clone());
    let topics_with_hidden: Vec<String> = copied.chain(hidden.keys().cloned()).collect();
    let needs =
        rights::needs(plan, identity, &rights::Selected { topics: &topics_with_hidden, groups: &report.groups });
    let internals = internal::topics(plan);

    let specs = creation_specs(plan, &internals, &needs, &report.topics);

    let mut facts: HashMap<String, Facts> = HashMap::new();
    for alias in [&plan.source.alias, &plan.target.alias] {
        let cluster = &clusters[alias];
        if cluster.described.is_err() || facts.contains_key(alias) {
            continue;
        }
        let topics: BTreeSet<String> = needs
            .iter()
            .filter(|n| &n.cluster == alias)
            .filter_map(|n| match &n.resource {
                Resource::Topic(t) if !hidden.contains_key(t) || alias != &plan.source.alias => Some(t.clone()),
                _ => None,
            })
            .chain(internals.iter().filter(|t| &t.cluster == alias).map(|t| t.spec.name.clone()))
            .collect();
        let groups: BTreeSet<String> = needs
            .iter()
            .filter(|n| &n.cluster == alias)
            .filter_map(|n| match &n.resource {
                Resource::Group(g) => Some(g.clone()),
                _ => None,
            })
            .collect();
        let internal_names: Vec<String> =
            internals.iter().filter(|t| &t.cluster == alias).map(|t| t.spec.name.clone()).collect();
        let spec_of = |name: &str| specs.get(&(alias.clone(), name.to_string())).cloned();
        facts.insert(alias.clone(), gather(cluster, &topics, &groups, &internal_names, &spec_of));
    }
    if let Some(f) = facts.get_mut(&plan.source.alias) {
        f.topics.extend(hidden);
    }

    for need in &needs {
        let Some(f) = facts.get(&need.cluster) else { continue };
        let known = match (&need.resource, &f.failed) {
            (_, Some(e)) => Known::Failed(e.clone()),
            (Resource::Topic(t), None) => f.topics.get(t).cloned().unwrap_or(Known::Described(None)),
            (Resource::Group(g), None) => f.groups.get(g).cloned().unwrap_or(Known::Described(None)),
            // What the cluster's probe (DescribeCluster) reported this principal may do with it.
            (Resource::Cluster, None) => Known::Described(
                clusters[&need.cluster].described.as_ref().ok().and_then(|d| d.authorized_operations.clone()),
            ),
            (Resource::TransactionalId(_), None) => {
                let cluster = &clusters[&need.cluster];
                Known::NoApi { unrestricted: cluster.unrestricted(), bootstrap: cluster.spec.bootstrap_servers.clone() }
            }
        };
        report.rights.push(right_check(plan, need, &known));
    }
    for t in &internals {
        let Some(f) = facts.get(&t.cluster) else { continue };
        let observed = observed(t, f);
        report.internal_topics.push(InternalCheck {
            cluster: t.cluster.clone(),
            role: t.role,
            topic: t.spec.name.clone(),
            state: internal::judge(t, &observed),
        });
    }
    report.registries = registries(plan);
    report
}

/// The schema registries of a flow with `schemas` on: the source's must answer and let ferry read, the
/// target's must also let it write. Writing is tried with a schema that is not one: refused as invalid
/// (422) means allowed, refused as forbidden (401, 403) means not; nothing is registered.
fn registries(plan: &FlowPlan) -> Vec<RegistryCheck> {
    use crate::schemas::Registry;
    let s = &plan.settings.schemas;
    let mut out = Vec::new();
    for (role, spec, write) in [("source", &s.source, false), ("target", &s.target, true)] {
        let Some(spec) = spec else { continue };
        let registry = Registry::new(spec.clone());
        let mut check = RegistryCheck {
            cluster: spec.cluster.clone(),
            role,
            url: spec.url.clone(),
            read: None,
            write: None,
            subjects: None,
        };
        match registry.subjects() {
            Ok(subjects) => {
                check.read = Some(Ok(()));
                check.subjects = Some(subjects.len());
            }
            Err(e) => check.read = Some(Err(e.to_string())),
        }
        if write && check.read.as_ref().is_some_and(Result::is_ok) {
            check.write = Some(registry.probe_write().map_err(|e| e.to_string()));
        }
        out.push(check);
    }
    out
}

/// Lists what the flow would copy and checkpoint on its source into `report`; returns the topics named
/// literally in `topics` that the source hides from this principal (what it said of each).
fn list_source(plan: &FlowPlan, source: &Cluster, report: &mut FlowReport) -> BTreeMap<String, Known> {
    let mut hidden = BTreeMap::new();
    match selected_topics(plan, source) {
        Ok((selected, literal)) => {
            for (topic, partitions) in &selected {
                report.topics.push(CopiedTopic {
                    topic: topic.clone(),
                    remote: rights::remote_topic(plan, topic),
                    partitions: *partitions,
                });
            }
            for (topic, known) in literal {
                match known {
                    Known::Absent { .. } => report
                        .notes
                        .push(format!("topic {topic} (named in `topics`) does not exist on `{}`", plan.source.alias)),
                    known => {
                        hidden.insert(topic, known);
                    }
                }
            }
        }
        Err(e) => report.errors.push(format!("cannot list the topics of `{}`: {e}", plan.source.alias)),
    }
    // A flow whose checkpoint computer does not run (no checkpoints, no group sync) follows no group.
    let groups =
        if plan.settings.runs_checkpoints() { checkpointed_groups(plan, source) } else { Ok((Vec::new(), None)) };
    match groups {
        Ok((groups, partial)) => {
            report.groups = groups;
            if let Some(e) = partial {
                report.notes.push(format!(
                    "listing the groups of `{}`: a broker did not answer, its groups are missing: {e}",
                    plan.source.alias
                ));
            }
        }
        Err(e) => report.errors.push(format!("cannot list the groups of `{}`: {e}", plan.source.alias)),
    }
    hidden
}

/// The topics ferry would create, by (cluster, name), as it would create them: for the validate-only
/// creation of the absent ones. Remote topics get their source topic's partitions (remote heartbeats: 1
/// until the source has them).
fn creation_specs(
    plan: &FlowPlan,
    internals: &[Internal],
    needs: &[Need],
    copied: &[CopiedTopic],
) -> HashMap<(String, String), TopicSpec> {
    let mut specs: HashMap<(String, String), TopicSpec> = HashMap::new();
    for t in internals {
        specs.insert((t.cluster.clone(), t.spec.name.clone()), t.spec.clone());
    }
    let partitions: HashMap<String, i32> = copied.iter().map(|t| (t.remote.clone(), t.partitions)).collect();
    for need in needs.iter().filter(|n| n.row.subject == rights::Subject::RemoteTopics) {
        let name = need.resource.name().to_string();
        let spec = TopicSpec {
            partitions: partitions.get(&name).copied().unwrap_or(1),
            name: name.clone(),
            replication_factor: plan.settings.replication_factor,
            configs: Vec::new(),
        };
        specs.entry((need.cluster.clone(), name)).or_insert(spec);
    }
    specs
}

fn right_check(plan: &FlowPlan, need: &Need, known: &Known) -> RightCheck {
    RightCheck {
        row: need.row,
        cluster: need.cluster.clone(),
        resource: need.resource.clone(),
        rights: need.row.rights.iter().map(raw_admin::AclOperation::as_str).collect(),
        used_by: need.row.used_by(&plan.id.source, &plan.id.target),
        verdict: rights::judge(need, known),
    }
}

fn observed(t: &Internal, f: &Facts) -> Observed {
    if let Some(e) = &f.failed {
        return Observed::Unknown(e.clone());
    }
    match f.topics.get(&t.spec.name) {
        Some(Known::Absent { .. }) => Observed::Absent,
        Some(Known::Described(_)) => Observed::Exists {
            partitions: f.partitions.get(&t.spec.name).copied().unwrap_or(0),
            cleanup_policy: f.cleanup.get(&t.spec.name).cloned().unwrap_or_else(|| Err("not described".into())),
        },
        Some(Known::Hidden(code)) => Observed::Unknown(format!("not authorized to Describe it ({code})")),
        Some(Known::Failed(e)) => Observed::Unknown(e.clone()),
        Some(Known::NoApi { .. }) | None => Observed::Unknown("not described".into()),
    }
}

/// The source topics the flow copies (name → partitions), with the copier's filter over the topics the
/// source lists; and what the source says of the topics named literally in `topics` that it does not list.
#[allow(clippy::type_complexity)]
fn selected_topics(plan: &FlowPlan, source: &Cluster) -> Result<(BTreeMap<String, i32>, Vec<(String, Known)>), String> {
    let alias = &plan.source.alias;
    let meta = source.conn.meta(Isolation::AsConfigured).map_err(|e| source.said(e))?;
    let listed = kafka::topic_partitions(&meta, alias).map_err(|e| source.said(e))?;
    let selected: BTreeMap<String, i32> =
        listed.iter().filter(|(t, _)| plan.copies_topic(t)).map(|(t, n)| (t.clone(), *n)).collect();
    let literal: Vec<String> = plan
        .topic_filter
        .include
        .patterns()
        .iter()
        .filter(|p| crate::flow::topics::is_literal(p) && !listed.contains_key(p.as_str()))
        .filter(|t| plan.copies_topic(t))
        .cloned()
        .collect();
    if literal.is_empty() {
        return Ok((selected, Vec::new()));
    }
    let admin = source.admin()?;
    let described = kafka::block_on(alias, raw_admin::describe_topics(&admin, &literal, CALL_TIMEOUT))
        .map_err(|e| source.said(e))?
        .map_err(|e| source.said(e))?;
    let known = described.into_iter().map(|d| (d.name.clone(), topic_known(&d, None))).collect();
    Ok((selected, known))
}

/// The source groups the checkpoint computer would checkpoint (its filter over the listed groups), and
/// a broker's failure if the listing is incomplete.
fn checkpointed_groups(plan: &FlowPlan, source: &Cluster) -> Result<(Vec<String>, Option<String>), String> {
    let admin = source.admin()?;
    let (listed, errors) =
        kafka::block_on(&plan.source.alias, raw_admin::list_consumer_groups_partial(&admin, CALL_TIMEOUT))
            .map_err(|e| source.said(e))?
            .map_err(|e| source.said(e))?;
    let mut groups: Vec<String> =
        listed.into_iter().map(|g| g.group_id).filter(|g| plan.group_filter.should_replicate_group(g)).collect();
    groups.sort();
    Ok((groups, errors.first().map(|e| source.said(e))))
}

/// A validate-only creation's answer for a topic that exists (librdkafka's name or Kafka's).
fn is_already_exists(code: &str) -> bool {
    code == "TopicAlreadyExists" || code == "TOPIC_ALREADY_EXISTS"
}

/// What DescribeTopics answered for one topic (`create`: the validate-only creation of an absent one).
fn topic_known(d: &raw_admin::TopicDescription, create: Option<Result<(), (String, String)>>) -> Known {
    match &d.error {
        None => Known::Described(d.authorized_operations.clone()),
        Some(e) if e.name == "UNKNOWN_TOPIC_OR_PART" => Known::Absent {
            create: create.unwrap_or_else(|| Err(("_NOT_ASKED".into(), "ferry does not create it".into()))),
        },
        Some(e) if e.name == "TOPIC_AUTHORIZATION_FAILED" => Known::Hidden(e.name.clone()),
        Some(e) => Known::Failed(e.to_string()),
    }
}

/// Asks `cluster` about `topics` and `groups`: their descriptions with this principal's operations, a
/// validate-only creation of the absent topics ferry would create (`spec_of`), and the `cleanup.policy`
/// of the existing `internal` ones.
fn gather(
    cluster: &Cluster,
    topics: &BTreeSet<String>,
    groups: &BTreeSet<String>,
    internal: &[String],
    spec_of: &dyn Fn(&str) -> Option<TopicSpec>,
) -> Facts {
    let alias = &cluster.spec.alias;
    let mut facts = Facts::default();
    let admin = match cluster.admin() {
        Ok(a) => a,
        Err(e) => {
            facts.failed = Some(e);
            return facts;
        }
    };
    let names: Vec<String> = topics.iter().cloned().collect();
    let mut described = match kafka::block_on(alias, raw_admin::describe_topics(&admin, &names, CALL_TIMEOUT)) {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            facts.failed = Some(cluster.said(format!("describe topics: {e}")));
            return facts;
        }
        Err(e) => {
            facts.failed = Some(cluster.said(e));
            return facts;
        }
    };
    let absent: Vec<TopicSpec> = described
        .iter()
        .filter(|d| d.error.as_ref().is_some_and(|e| e.name == "UNKNOWN_TOPIC_OR_PART"))
        .filter_map(|d| spec_of(&d.name))
        .collect();
    let mut creatable =
        match kafka::block_on(alias, kafka::validate_create_topics(&admin, alias, &absent, CALL_TIMEOUT)) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => absent.iter().map(|s| (s.name.clone(), Err(("_FAIL".into(), cluster.said(&e))))).collect(),
            Err(e) => absent.iter().map(|s| (s.name.clone(), Err(("_FAIL".into(), cluster.said(&e))))).collect(),
        };
    // A topic created between the description and the validation (another node, or a flow starting at
    // that moment) exists now: described again, for a few seconds while the broker that answers may not
    // know it yet; one still not described is judged by the creation's answer that it exists.
    let mut pending: Vec<String> = creatable
        .iter()
        .filter(|(_, r)| r.as_ref().is_err_and(|(code, _)| is_already_exists(code)))
        .map(|(name, _)| name.clone())
        .collect();
    let until = Instant::now() + CREATED_MEANWHILE_WAIT;
    while !pending.is_empty() {
        if let Ok(Ok(again)) = kafka::block_on(alias, raw_admin::describe_topics(&admin, &pending, CALL_TIMEOUT)) {
            for d in again.into_iter().filter(|d| d.error.is_none()) {
                pending.retain(|p| *p != d.name);
                if let Some(slot) = described.iter_mut().find(|x| x.name == d.name) {
                    *slot = d;
                }
            }
        }
        if pending.is_empty() || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for name in pending {
        creatable.insert(name, Ok(()));
    }
    for d in &described {
        let create = creatable.get(&d.name).cloned();
        facts.topics.insert(d.name.clone(), topic_known(d, create));
        if d.error.is_none() {
            facts.partitions.insert(d.name.clone(), d.partitions);
        }
    }
    let existing: Vec<String> = internal.iter().filter(|t| facts.partitions.contains_key(*t)).cloned().collect();
    match kafka::block_on(alias, kafka::describe_topics_configs(&admin, alias, &existing)) {
        Ok(Ok(configs)) => {
            for (topic, c) in configs {
                // A principal without DescribeConfigs on the topic gets an answer without entries.
                let policy = c.map_err(|e| cluster.said(e)).and_then(|entries| {
                    entries.into_iter().find(|e| e.name == "cleanup.policy").and_then(|e| e.value).ok_or_else(|| {
                        "not reported (this principal may lack DescribeConfigs on the topic)".to_string()
                    })
                });
                facts.cleanup.insert(topic, policy);
            }
        }
        Ok(Err(e)) | Err(e) => {
            for t in existing {
                facts.cleanup.insert(t, Err(cluster.said(&e)));
            }
        }
    }
    facts.groups = describe_groups(cluster, &admin, groups);
    facts
}

/// Group errors that pass: a cluster's first group request creates `__consumer_offsets`, whose
/// coordinators answer NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a few seconds.
const RETRIABLE_GROUP_ERRORS: [&str; 3] =
    ["NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"];

/// What describing `groups` answered, each group asked again while its error passes (within [`CALL_TIMEOUT`]).
fn describe_groups(cluster: &Cluster, admin: &Admin, groups: &BTreeSet<String>) -> HashMap<String, Known> {
    let alias = &cluster.spec.alias;
    let deadline = std::time::Instant::now() + CALL_TIMEOUT;
    let mut out = HashMap::new();
    let mut asked: Vec<String> = groups.iter().cloned().collect();
    while !asked.is_empty() {
        let described = match kafka::block_on(alias, raw_admin::describe_consumer_groups(admin, &asked, CALL_TIMEOUT)) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                let e = cluster.said(format!("describe groups: {e}"));
                out.extend(asked.into_iter().map(|g| (g, Known::Failed(e.clone()))));
                return out;
            }
            Err(e) => {
                let e = cluster.said(e);
                out.extend(asked.into_iter().map(|g| (g, Known::Failed(e.clone()))));
                return out;
            }
        };
        let again = std::time::Instant::now() < deadline;
        asked.clear();
        for d in described {
            let known = match &d.error {
                None => Known::Described(d.authorized_operations.clone()),
                Some(e) if e.name == "GROUP_AUTHORIZATION_FAILED" => Known::Hidden(e.name.clone()),
                Some(e) if again && RETRIABLE_GROUP_ERRORS.contains(&e.name.as_str()) => {
                    asked.push(d.group_id);
                    continue;
                }
                Some(e) => Known::Failed(cluster.said(e)),
            };
            out.insert(d.group_id, known);
        }
        if !asked.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    out
}
