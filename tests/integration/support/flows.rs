//! Flows directories for end-to-end tests: clusters `east` and `west` of a pair, plus flow definitions.

use super::Cluster;
use super::cluster::ADMIN;

/// A flows directory with clusters `east`/`west` (`clusters.toml`) and `flows` as `flow.toml`. A
/// secured cluster gets its [`ADMIN`]'s client properties under `[clusters.<alias>.client]`; use
/// [`cluster_toml`] to write a cluster as another user.
pub fn flows_dir(east: &Cluster, west: &Cluster, flows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = format!(
        "{}{}",
        cluster_toml("east", &east.bootstrap, &east.client_props(ADMIN)),
        cluster_toml("west", &west.bootstrap, &west.client_props(ADMIN))
    );
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flow.toml"), flows).expect("write flow");
    dir
}

/// `[clusters.<alias>]` with `bootstrap_servers`, and `[clusters.<alias>.client]` with `client`
/// (librdkafka properties, e.g. [`Cluster::client_props`]) unless it is empty.
pub fn cluster_toml(alias: &str, bootstrap: &str, client: &[(String, String)]) -> String {
    let mut toml = format!("[clusters.{alias}]\nbootstrap_servers = {}\n", toml_string(bootstrap));
    if !client.is_empty() {
        toml.push_str(&format!("[clusters.{alias}.client]\n"));
        for (k, v) in client {
            toml.push_str(&format!("{} = {}\n", toml_string(k), toml_string(v)));
        }
    }
    toml
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// One flow east->west over `topics` (TOML array items, e.g. `"\"orders\""`), with `extra` keys.
pub fn east_west_flow(topics: &str, extra: &str) -> String {
    format!("[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [{topics}]\n{extra}\n")
}

/// Flow keys for tests of secured clusters: checkpoints, group listing and group offset sync every second,
/// topics every 2 s, restarts within 2 s.
pub const FAST_SECURED: &str = "emit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
                                refresh_topics_interval_seconds = 2\nsync_group_offsets_enabled = true\n\
                                sync_group_offsets_interval_seconds = 1\nrestart_backoff_initial_seconds = 0.2\n\
                                restart_backoff_max_seconds = 2\n";

/// `props` with `key` set to `value` (replacing it if present).
pub fn with_prop(props: &[(String, String)], key: &str, value: &str) -> Vec<(String, String)> {
    let mut props: Vec<(String, String)> = props.iter().filter(|(k, _)| k != key).cloned().collect();
    props.push((key.to_string(), value.to_string()));
    props
}
