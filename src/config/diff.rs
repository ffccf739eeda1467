//! The difference between the flow set a node runs and a new one: which flows start, stop, restart, and
//! which are left alone. Startup is the same diff from an empty set, so the reload path runs on every boot.
//!
//! A flow is *changed* when anything that affects how it runs differs: its settings, or either of its
//! clusters (address or client properties). Where a flow or cluster is written (which file) does not
//! matter, so moving definitions between files restarts nothing. A disabled flow is not running: enabling
//! it starts it, disabling it stops it.

use std::collections::BTreeMap;

use super::{FlowId, FlowPlan, FlowSet};

/// What to do to go from the running flows to a new flow set.
#[derive(Debug, Default, PartialEq)]
pub struct FlowSetDiff {
    /// Enabled in the new set and not running now.
    pub added: Vec<FlowId>,
    /// Running now and gone from the new set, or disabled in it.
    pub removed: Vec<FlowId>,
    /// Running now and enabled in the new set with a different plan.
    pub changed: Vec<FlowId>,
    /// Running now with the same plan: not touched.
    pub unchanged: Vec<FlowId>,
}

impl FlowSetDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Diff the plans running now against `next`.
pub fn diff(running: &BTreeMap<FlowId, FlowPlan>, next: &FlowSet) -> FlowSetDiff {
    let mut d = FlowSetDiff::default();
    for (id, plan) in running {
        match next.flows.get(id) {
            Some(new) if new.settings.enabled => {
                if new == plan {
                    d.unchanged.push(id.clone());
                } else {
                    d.changed.push(id.clone());
                }
            }
            _ => d.removed.push(id.clone()),
        }
    }
    for (id, plan) in &next.flows {
        if plan.settings.enabled && !running.contains_key(id) {
            d.added.push(id.clone());
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::raw::RawFile;
    use crate::config::validate::validate;

    fn set(files: &[(&str, &str)]) -> FlowSet {
        let parsed = files
            .iter()
            .map(|(name, text)| (PathBuf::from(name), toml::from_str::<RawFile>(text).expect("test TOML parses")))
            .collect();
        validate(parsed, &|_: &str| None, crate::kafka::check_client_properties).expect("valid")
    }

    const CLUSTERS: &str = r#"
        [clusters.east]
        bootstrap_servers = "e:1"
        [clusters.west]
        bootstrap_servers = "w:1"
        [clusters.north]
        bootstrap_servers = "n:1"
    "#;

    fn running(s: &FlowSet) -> BTreeMap<FlowId, FlowPlan> {
        s.flows.iter().filter(|(_, p)| p.settings.enabled).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    fn ids(v: &[FlowId]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn startup_is_a_diff_from_nothing() {
        let s = set(&[("c.toml", CLUSTERS), ("f.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n")]);
        let d = diff(&BTreeMap::new(), &s);
        assert_eq!(ids(&d.added), ["east->west"]);
        assert!(d.removed.is_empty() && d.changed.is_empty() && d.unchanged.is_empty());
    }

    #[test]
    fn added_removed_changed_and_untouched_flows() {
        let before = set(&[
            ("c.toml", CLUSTERS),
            ("a.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n"),
            ("b.toml", "[[flows]]\nsource = \"west\"\ntarget = \"east\"\ntopics = [\"x\"]\n"),
            ("gone.toml", "[[flows]]\nsource = \"north\"\ntarget = \"east\"\n"),
        ]);
        let after = set(&[
            ("c.toml", CLUSTERS),
            ("a.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n"),
            ("b.toml", "[[flows]]\nsource = \"west\"\ntarget = \"east\"\ntopics = [\"y\"]\n"),
            ("new.toml", "[[flows]]\nsource = \"east\"\ntarget = \"north\"\n"),
        ]);
        let d = diff(&running(&before), &after);
        assert_eq!(ids(&d.added), ["east->north"]);
        assert_eq!(ids(&d.removed), ["north->east"]);
        assert_eq!(ids(&d.changed), ["west->east"]);
        assert_eq!(ids(&d.unchanged), ["east->west"]);
    }

    #[test]
    fn a_cluster_change_restarts_exactly_the_flows_that_use_it() {
        let flows = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n[[flows]]\nsource = \"north\"\ntarget = \"west\"\n\
                     [[flows]]\nsource = \"east\"\ntarget = \"north\"\n";
        let before = set(&[("c.toml", CLUSTERS), ("f.toml", flows)]);
        let moved = CLUSTERS.replace("n:1", "n:2");
        let after = set(&[("c.toml", &moved), ("f.toml", flows)]);
        let d = diff(&running(&before), &after);
        assert_eq!(ids(&d.changed), ["east->north", "north->west"]);
        assert_eq!(ids(&d.unchanged), ["east->west"]);
        // Client properties are part of a cluster.
        let with_props = format!("{CLUSTERS}\n[clusters.east.client]\n\"linger.ms\" = 5\n");
        let d = diff(&running(&before), &set(&[("c.toml", &with_props), ("f.toml", flows)]));
        assert_eq!(ids(&d.changed), ["east->north", "east->west"]);
    }

    #[test]
    fn a_rewritten_certificate_restarts_exactly_the_flows_of_its_cluster() {
        let certs = tempfile::tempdir().expect("dir");
        let ca = certs.path().join("ca.pem");
        std::fs::write(&ca, crate::config::client_files::tests::self_signed("CA1", 5).0).expect("write");
        let clusters =
            format!("{CLUSTERS}\n[clusters.east.client]\n\"ssl.ca.location\" = {:?}\n", ca.display().to_string());
        let flows =
            "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n[[flows]]\nsource = \"north\"\ntarget = \"west\"\n";
        let before = set(&[("c.toml", &clusters), ("f.toml", flows)]);
        assert!(diff(&running(&before), &set(&[("c.toml", &clusters), ("f.toml", flows)])).is_empty(), "same files");
        std::fs::write(&ca, crate::config::client_files::tests::self_signed("CA2", 50).0).expect("rewrite");
        let after = set(&[("c.toml", &clusters), ("f.toml", flows)]);
        assert_eq!(after.clusters["east"].client, before.clusters["east"].client, "the same path");
        let d = diff(&running(&before), &after);
        assert_eq!(ids(&d.changed), ["east->west"]);
        assert_eq!(ids(&d.unchanged), ["north->west"]);
    }

    #[test]
    fn moving_definitions_between_files_restarts_nothing() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n";
        let before = set(&[("c.toml", CLUSTERS), ("f.toml", flow)]);
        let after = set(&[("all.toml", &format!("{CLUSTERS}\n{flow}"))]);
        let d = diff(&running(&before), &after);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(ids(&d.unchanged), ["east->west"]);
    }

    #[test]
    fn a_changed_naming_template_restarts_just_its_flow() {
        let flows = |template: &str| {
            format!(
                "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nremote_topic = \"{template}\"\n\
                 [[flows]]\nsource = \"north\"\ntarget = \"west\"\nremote_topic = \"{{topic}}.{{source}}\"\n"
            )
        };
        let before = set(&[("c.toml", CLUSTERS), ("f.toml", &flows("{topic}.{source}"))]);
        let after = set(&[("c.toml", CLUSTERS), ("f.toml", &flows("{topic}-{source}"))]);
        let d = diff(&running(&before), &after);
        assert_eq!(ids(&d.changed), ["east->west"]);
        assert_eq!(ids(&d.unchanged), ["north->west"]);
    }

    #[test]
    fn disabling_stops_and_enabling_starts() {
        let on = set(&[("c.toml", CLUSTERS), ("f.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n")]);
        let off = set(&[
            ("c.toml", CLUSTERS),
            ("f.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nenabled = false\n"),
        ]);
        assert_eq!(ids(&diff(&running(&on), &off).removed), ["east->west"]);
        assert_eq!(ids(&diff(&running(&off), &on).added), ["east->west"]);
    }
}
