//! A flow set as a graph of clusters (a flow `a->b` is an edge from `a` to `b`), for the two questions
//! identity replication asks about it:
//!
//! - **Which cycles cannot be protected?** Under the identity policy a topic keeps its name, so only
//!   the provenance header (`ferry.path`, see `flow/copier/provenance.rs`) stops a record from going
//!   round a cycle. A cycle is safe when every flow on it carries the header, or when no flow on it
//!   uses the identity policy (default-policy names carry their origin). Anything else is refused by
//!   `ferry validate`, naming the cycle ([`shortest_path`] finds one to show).
//! - **By which flow does a cluster's record reach another cluster?** The header alone stops loops,
//!   but in a mesh (every cluster copies to every other) a record would still reach each cluster once
//!   per route: directly, and again through each third cluster. So the header-carrying flows of a
//!   deployment agree on one route per record origin and target, for every topic: the shortest one,
//!   ties going to the alphabetically first last hop ([`Topology::parents_into`]). A flow copies a
//!   record only if it is the last hop of that route; the routes of one origin form a tree, so each
//!   cluster receives each record exactly once.
//!
//! Pure: no clusters are contacted; the graph is the flow set's.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::filter::{TopicFilter, should_replicate_topic};
use crate::policy::ReplicationPolicy;

/// One flow that carries the provenance header, as the routing sees it.
#[derive(Clone, Debug)]
pub struct Edge {
    pub source: String,
    pub target: String,
    /// What the flow copies: a topic's routes use only the flows that copy it.
    filter: Arc<TopicFilter>,
    policy: ReplicationPolicy,
    /// The filter's patterns, for comparing topologies (compiled filters do not compare).
    patterns: (Vec<String>, Vec<String>),
}

impl Edge {
    pub fn new(
        source: &str,
        target: &str,
        filter: Arc<TopicFilter>,
        policy: ReplicationPolicy,
        topics: &[String],
        topics_exclude: &[String],
    ) -> Self {
        Self {
            source: source.to_string(),
            target: target.to_string(),
            filter,
            policy,
            patterns: (topics.to_vec(), topics_exclude.to_vec()),
        }
    }

    /// The flow copies `topic` (the topic synchroniser's own rule: filters, internal topics, cycles).
    /// Heartbeats topics count as copied even where a flow switched their replication off: a route
    /// the check assumes and the flow never takes is a refusal too many, never a loop let through.
    fn copies(&self, topic: &str) -> bool {
        should_replicate_topic(&self.filter, &self.policy, true, &self.target, topic)
    }
}

impl PartialEq for Edge {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
            && self.target == other.target
            && self.policy == other.policy
            && self.patterns == other.patterns
    }
}

/// The header-carrying flows of a deployment that a flow shares its routes with (its connected part of
/// the graph): part of the flow's plan, so a change of the routes restarts the flows they concern.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    edges: Vec<Edge>,
}

impl Topology {
    pub fn new(mut edges: Vec<Edge>) -> Self {
        edges.sort_by(|a, b| (&a.source, &a.target).cmp(&(&b.source, &b.target)));
        Self { edges }
    }

    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The edges connected to `cluster`, ignoring direction: what the routes of its flows depend on.
    pub fn component_of(&self, cluster: &str) -> Topology {
        let mut seen = BTreeSet::from([cluster.to_string()]);
        let mut todo = vec![cluster.to_string()];
        while let Some(c) = todo.pop() {
            for e in &self.edges {
                let other = if e.source == c {
                    &e.target
                } else if e.target == c {
                    &e.source
                } else {
                    continue;
                };
                if seen.insert(other.clone()) {
                    todo.push(other.clone());
                }
            }
        }
        Topology { edges: self.edges.iter().filter(|e| seen.contains(&e.source)).cloned().collect() }
    }

    /// For records of `topic`, every cluster whose records reach `target` through these flows, with the
    /// cluster they arrive from (the last hop of the route): the flow `parent->target` copies them, every
    /// other flow into `target` leaves them alone. Clusters that cannot reach `target` are absent.
    pub fn parents_into(&self, target: &str, topic: &str) -> BTreeMap<String, String> {
        let edges: Vec<(&str, &str)> =
            self.edges.iter().filter(|e| e.copies(topic)).map(|e| (e.source.as_str(), e.target.as_str())).collect();
        let origins: BTreeSet<&str> = edges.iter().map(|(s, _)| *s).collect();
        let mut parents = BTreeMap::new();
        for origin in origins.into_iter().filter(|o| *o != target) {
            let dist = distances(&edges, origin);
            let Some(&d) = dist.get(target) else { continue };
            // The route's last hop: a neighbour one step closer to the origin, the first by name (every
            // flow computes the same answer, and the routes of one origin form a tree).
            let parent =
                edges.iter().filter(|(s, t)| *t == target && dist.get(s) == Some(&(d - 1))).map(|(s, _)| *s).min();
            if let Some(p) = parent {
                parents.insert(origin.to_string(), p.to_string());
            }
        }
        parents
    }
}

/// Breadth-first distances from `from` along `edges`.
fn distances<'a>(edges: &[(&'a str, &'a str)], from: &'a str) -> BTreeMap<&'a str, usize> {
    let mut dist = BTreeMap::from([(from, 0)]);
    let mut queue = VecDeque::from([from]);
    while let Some(c) = queue.pop_front() {
        let d = dist[c];
        for (_, t) in edges.iter().filter(|(s, _)| *s == c) {
            if !dist.contains_key(t) {
                dist.insert(t, d + 1);
                queue.push_back(t);
            }
        }
    }
    dist
}

/// The clusters of a shortest route from `from` to `to` along `edges` (both ends included; `[from]`
/// when they are the same), `None` if there is none. Ties go to the alphabetically first hop.
pub fn shortest_path(edges: &[(&str, &str)], from: &str, to: &str) -> Option<Vec<String>> {
    let mut sorted = edges.to_vec();
    sorted.sort();
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut seen = BTreeSet::from([from]);
    let mut queue = VecDeque::from([from]);
    while let Some(c) = queue.pop_front() {
        if c == to {
            let mut path = vec![c.to_string()];
            let mut at = c;
            while let Some(p) = previous.get(at) {
                path.push(p.to_string());
                at = p;
            }
            path.reverse();
            return Some(path);
        }
        for (_, t) in sorted.iter().filter(|(s, _)| *s == c) {
            if seen.insert(t) {
                previous.insert(t, c);
                queue.push_back(t);
            }
        }
    }
    None
}

/// A cycle written out: `a->b->c->a`.
pub fn show_cycle(clusters: &[String]) -> String {
    let mut out = clusters.join("->");
    if let Some(first) = clusters.first() {
        out.push_str("->");
        out.push_str(first);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(source: &str, target: &str, topics: &[&str]) -> Edge {
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let filter = TopicFilter::from_patterns(&topics, &[] as &[String]).expect("patterns");
        Edge::new(source, target, Arc::new(filter), ReplicationPolicy::identity(".", Some(source)), &topics, &[])
    }

    fn topology(flows: &[(&str, &str)]) -> Topology {
        Topology::new(flows.iter().map(|(s, t)| edge(s, t, &[".*"])).collect())
    }

    fn parents(t: &Topology, target: &str) -> Vec<(String, String)> {
        t.parents_into(target, "orders").into_iter().collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn in_a_mesh_every_cluster_sends_only_its_own_records() {
        let mesh = topology(&[("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]);
        assert_eq!(parents(&mesh, "a"), pairs(&[("b", "b"), ("c", "c")]));
        assert_eq!(parents(&mesh, "c"), pairs(&[("a", "a"), ("b", "b")]));
    }

    #[test]
    fn a_feeder_into_a_pair_reaches_the_far_side_through_the_pair() {
        let t = topology(&[("a", "b"), ("b", "c"), ("c", "b")]);
        // c gets a's records from b; b gets them from a, never back from c.
        assert_eq!(parents(&t, "c"), pairs(&[("a", "b"), ("b", "b")]));
        assert_eq!(parents(&t, "b"), pairs(&[("a", "a"), ("c", "c")]));
        assert_eq!(parents(&t, "a"), pairs(&[]));
    }

    #[test]
    fn rings_chains_and_diamonds_have_one_route_per_origin() {
        let ring = topology(&[("a", "b"), ("b", "c"), ("c", "a")]);
        assert_eq!(parents(&ring, "a"), pairs(&[("b", "c"), ("c", "c")]));
        let chain = topology(&[("a", "b"), ("b", "c")]);
        assert_eq!(parents(&chain, "c"), pairs(&[("a", "b"), ("b", "b")]));
        // Two routes of the same length into d: the first by name wins, the same for every flow.
        let diamond = topology(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]);
        assert_eq!(parents(&diamond, "d"), pairs(&[("a", "b"), ("b", "b"), ("c", "c")]));
    }

    #[test]
    fn routes_follow_the_flows_that_copy_the_topic() {
        // a->c copies only `payments`: a's `orders` reach c through b.
        let t = Topology::new(vec![
            edge("a", "b", &[".*"]),
            edge("a", "c", &["payments"]),
            edge("b", "c", &[".*"]),
            edge("b", "a", &[".*"]),
        ]);
        assert_eq!(t.parents_into("c", "orders")["a"], "b");
        assert_eq!(t.parents_into("c", "payments")["a"], "a");
    }

    #[test]
    fn a_component_holds_only_connected_flows_and_compares_by_content() {
        let t = topology(&[("a", "b"), ("c", "b"), ("x", "y")]);
        let ab = t.component_of("a");
        assert_eq!(ab.edges().len(), 2);
        assert_eq!(ab, topology(&[("c", "b"), ("a", "b")]));
        assert_eq!(t.component_of("y").edges().len(), 1);
        assert_ne!(ab, Topology::new(vec![edge("a", "b", &["orders"]), edge("c", "b", &[".*"])]));
    }

    #[test]
    fn shortest_paths_and_cycles_are_written_out() {
        let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a")];
        assert_eq!(shortest_path(&edges, "a", "c"), Some(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(shortest_path(&edges, "a", "a"), Some(vec!["a".into()]));
        assert_eq!(shortest_path(&edges, "c", "x"), None);
        assert_eq!(show_cycle(&["a".into(), "b".into()]), "a->b->a");
    }
}
