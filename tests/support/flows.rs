//! Flows directories for end-to-end tests: clusters `east` and `west` of a pair, plus flow definitions.

use super::Cluster;

/// A flows directory with clusters `east`/`west` (`clusters.toml`) and `flows` as `flow.toml`.
pub fn flows_dir(east: &Cluster, west: &Cluster, flows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = format!(
        "[clusters.east]\nbootstrap_servers = \"{}\"\n[clusters.west]\nbootstrap_servers = \"{}\"\n",
        east.bootstrap, west.bootstrap
    );
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flow.toml"), flows).expect("write flow");
    dir
}

/// One flow east->west over `topics` (TOML array items, e.g. `"\"orders\""`), with `extra` keys.
pub fn east_west_flow(topics: &str, extra: &str) -> String {
    format!("[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [{topics}]\n{extra}\n")
}
