//! Who runs a flow, as the groups see it: the copier group's members (each node and how many source
//! partitions it copies) and the node holding the lease. Read with DescribeGroups every
//! [`INTERVAL`] for the lease worker, for `/flows/{id}` and `ferry status`: an operator sees
//! where every partition went without asking each node.

use std::sync::Arc;
use std::time::Duration;

use super::messages::{GroupMembers, Parent};
use crate::clients::{Admin, FlowConnections};
use crate::kafka;
use crate::status::Member;
use crate::ticks;

pub const INTERVAL: Duration = Duration::from_secs(10);

/// Topic partitions as a consumer-protocol assignment lists them.
type Assigned = Vec<(String, Vec<i32>)>;
/// A group member: its client id and assignment.
type Described = (String, Assigned);

/// The node named in a ferry client id (`{flow}|ferry|{role}|{node}`); other clients are not nodes.
pub fn node_of(client_id: &str) -> Option<&str> {
    let (rest, node) = client_id.rsplit_once('|')?;
    (rest.contains("|ferry|") && !node.is_empty()).then_some(node)
}

/// The topic partitions of a consumer-protocol assignment (version, [topic, [partition]], user data).
pub fn parse_assignment(bytes: &[u8]) -> Option<Assigned> {
    let mut r = Reader(bytes);
    let _version = r.i16()?;
    let topics = r.i32()?;
    let mut out = Vec::with_capacity(usize::try_from(topics).ok()?.min(10_000));
    for _ in 0..topics.max(0) {
        let len = usize::try_from(r.i16()?).ok()?;
        let topic = String::from_utf8(r.take(len)?.to_vec()).ok()?;
        let n = r.i32()?;
        let mut partitions = Vec::with_capacity(usize::try_from(n).ok()?.min(100_000));
        for _ in 0..n.max(0) {
            partitions.push(r.i32()?);
        }
        out.push((topic, partitions));
    }
    Some(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// The groups to describe, named by the lease worker that starts the watch (the copier and the lease
/// own their names; this module only reads the groups).
pub struct Watched {
    /// The copier group, on the source cluster.
    pub copier_group: String,
    /// The lease group, on the target cluster, and the topic whose partition its holder is assigned.
    pub lease_group: String,
    pub lease_topic: String,
}

/// Describes both groups every [`INTERVAL`], reporting to the supervisor, until the job is dropped. A
/// job of the node's members ticker ([`ticks::members`]), not a thread per flow: one flow's round is two
/// quick calls on the node's shared admin clients. A cluster that does not answer makes its flows'
/// rounds wait for it (up to [`kafka::ADMIN_TIMEOUT`]), and delays the other flows' member lists
/// meanwhile, never their copying or leadership.
pub fn watch(conns: Arc<FlowConnections>, watched: Watched, supervisor: Parent) -> ticks::Job {
    let Watched { copier_group: copier, lease_group: lease, lease_topic } = watched;
    ticks::members().every(INTERVAL, move || {
        // Asked for each round: making one can fail (a Kerberos login) and works at a later round.
        let (Ok(source), Ok(target)) = (conns.source.admin(), conns.target.admin()) else { return };
        let members = describe(&source, &copier).map(|m| copier_members(&m));
        let leader = describe(&target, &lease).map(|m| lease_holder(&m, &lease_topic));
        supervisor.members.do_send(GroupMembers { members, leader: leader.flatten() });
    })
}

/// (client id, assignment) of every member of `group`; `None` when the cluster does not answer.
fn describe(admin: &Admin, group: &str) -> Option<Vec<Described>> {
    let list = admin.inner().fetch_group_list(Some(group), kafka::ADMIN_TIMEOUT).ok()?;
    let info = list.groups().iter().find(|g| g.name() == group)?;
    Some(
        info.members()
            .iter()
            .map(|m| (m.client_id().to_string(), m.assignment().and_then(parse_assignment).unwrap_or_default()))
            .collect(),
    )
}

fn copier_members(members: &[Described]) -> Vec<Member> {
    let mut out: Vec<Member> = members
        .iter()
        .filter_map(|(client, assigned)| {
            let partitions = assigned.iter().map(|(_, p)| p.len()).sum();
            node_of(client).map(|node| Member { node: node.to_string(), partitions })
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

fn lease_holder(members: &[Described], lease_topic: &str) -> Option<String> {
    members
        .iter()
        .find(|(_, assigned)| assigned.iter().any(|(t, p)| t == lease_topic && !p.is_empty()))
        .and_then(|(client, _)| node_of(client).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = vec![0, 1];
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((-1_i32).to_be_bytes()); // no user data
        b
    }

    #[test]
    fn assignments_parse_and_count() {
        let bytes = assignment(&[("orders", &[0, 2, 4]), ("audit", &[1])]);
        let parsed = parse_assignment(&bytes).expect("parses");
        assert_eq!(parsed, vec![("orders".into(), vec![0, 2, 4]), ("audit".into(), vec![1])]);
        let members = vec![("a->b|ferry|replication-consumer|n2".to_string(), parsed), ("other".into(), Vec::new())];
        assert_eq!(copier_members(&members), vec![Member { node: "n2".into(), partitions: 4 }]);
    }

    #[test]
    fn truncated_assignments_are_refused() {
        let bytes = assignment(&[("orders", &[0, 2, 4])]);
        for cut in [1, 5, 9, bytes.len() - 6] {
            assert_eq!(parse_assignment(&bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn the_lease_holder_is_the_member_with_the_lease_partition() {
        let members = vec![
            ("D|ferry|lease|n1".to_string(), vec![("ferry.leases.c.d".to_string(), vec![0])]),
            ("D|ferry|lease|n3".to_string(), vec![("ferry.leases.a.b".to_string(), vec![0])]),
        ];
        assert_eq!(lease_holder(&members, "ferry.leases.a.b").as_deref(), Some("n3"));
        assert_eq!(node_of("rdkafka"), None);
        assert_eq!(node_of("a->b|ferry|lease|"), None);
    }
}
