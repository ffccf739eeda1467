//! `ferry validate` as an operator uses it: broken flow files are refused with the file and key named.

use std::path::Path;
use std::process::{Command, Output};

fn validate(dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(["validate", "--flows"]).arg(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("ferry runs")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write flow file");
}

const CLUSTERS: &str = r#"
[clusters.east]
bootstrap_servers = "127.0.0.1:19092"
[clusters.west]
bootstrap_servers = "127.0.0.1:29092"
[clusters.west.client]
"sasl.password" = "${WEST_PASSWORD}"
"#;

#[test]
fn the_shipped_flows_are_valid() {
    let flows = Path::new(env!("CARGO_MANIFEST_DIR")).join("flows");
    let out = validate(&flows, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("flow east->west"), "{stdout}");
}

#[test]
fn each_kind_of_broken_file_is_named_with_its_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "clusters.toml", CLUSTERS);
    write(dir.path(), "syntax.toml", "[[flows]\nsource = \"east\"\n");
    write(dir.path(), "unknown-key.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\ncolour = \"blue\"\n");
    write(
        dir.path(),
        "bad-regex.toml",
        "[[flows]]\nsource = \"west\"\ntarget = \"east\"\ntopics = [\"ok\", \"(oops\"]\n",
    );
    write(dir.path(), "unknown-cluster.toml", "[[flows]]\nsource = \"east\"\ntarget = \"north\"\n");
    // Types are strict: a string is no boolean (nor a number), and is not converted to one.
    write(dir.path(), "wrong-type.toml", "[[flows]]\nsource = \"north\"\ntarget = \"east\"\nenabled = \"off\"\n");

    let out = validate(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "invalid flows must exit 2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expect = [
        ("syntax.toml", "line 1, column 9"),
        ("unknown-key.toml", "flows[0].colour"),
        ("bad-regex.toml", "flows[0].topics[1]"),
        ("unknown-cluster.toml", "flows[0].target: unknown cluster `north`"),
        ("wrong-type.toml", "line 4: flows[0].enabled: invalid type: string \"…\", expected a boolean"),
        ("clusters.toml", "clusters.west.client.\"sasl.password\": environment variable WEST_PASSWORD is not set"),
    ];
    for (file, key) in expect {
        let line = stderr.lines().find(|l| l.contains(file) && l.contains(key));
        assert!(line.is_some(), "expected an error naming {file} and {key}, got:\n{stderr}");
    }
}

#[test]
fn secrets_never_reach_the_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "clusters.toml", CLUSTERS);
    write(dir.path(), "flow.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n");
    let out = validate(dir.path(), &[("WEST_PASSWORD", "hunter2-very-secret")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!all.contains("hunter2-very-secret"), "secret leaked: {all}");
    assert!(all.contains("sasl.password = [redacted]"), "{all}");
}

/// A pair's two flows with different `offset_syncs_topic_location`s write one compacted offset-syncs
/// topic, where compaction can drop one flow's newest sync for the other's: refused, naming both flows,
/// their files and the topic. The same setting on both is fine.
#[test]
fn a_pairs_flows_writing_one_offset_syncs_topic_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "clusters.toml", CLUSTERS);
    let flow = |s: &str, t: &str, location: &str| {
        format!("[[flows]]\nsource = \"{s}\"\ntarget = \"{t}\"\noffset_syncs_topic_location = \"{location}\"\n")
    };
    let env = [("WEST_PASSWORD", "x")];
    write(dir.path(), "east-west.toml", &flow("east", "west", "target"));
    write(dir.path(), "west-east.toml", &flow("west", "east", "target"));
    let out = validate(dir.path(), &env);
    assert!(out.status.success(), "target on both: {}", String::from_utf8_lossy(&out.stderr));

    write(dir.path(), "west-east.toml", &flow("west", "east", "source"));
    let out = validate(dir.path(), &env);
    assert_eq!(out.status.code(), Some(2), "one topic for two flows must exit 2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("west-east.toml") && l.contains("offset_syncs_topic_location"))
        .unwrap_or_else(|| panic!("an error naming west-east.toml and the key, got:\n{stderr}"));
    for part in ["east->west", "east-west.toml", "west->east", "mm2-offset-syncs.east.internal on cluster `west`"] {
        assert!(line.contains(part), "`{part}` in: {line}");
    }
}

/// A pair where only one flow names its topics with a template: the other flow would take the template's
/// names for something else and copy them back, so the set is refused, the misreading flow named with
/// its file; the same template on both flows is valid.
#[test]
fn a_pair_that_would_misread_a_templates_names_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "clusters.toml", CLUSTERS);
    let flow = |s: &str, t: &str, naming: &str| format!("[[flows]]\nsource = \"{s}\"\ntarget = \"{t}\"\n{naming}\n");
    let env = [("WEST_PASSWORD", "x")];
    let template = "remote_topic = \"{topic}.{source}\"";
    write(dir.path(), "east-west.toml", &flow("east", "west", template));
    write(dir.path(), "west-east.toml", &flow("west", "east", template));
    let out = validate(dir.path(), &env);
    assert!(out.status.success(), "one template on both: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("remote_topic=\"{topic}.{source}\""));

    write(dir.path(), "west-east.toml", &flow("west", "east", ""));
    let out = validate(dir.path(), &env);
    assert_eq!(out.status.code(), Some(2), "a misread name must exit 2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("west-east.toml: replication_policy:"))
        .unwrap_or_else(|| panic!("an error naming west-east.toml and its key, got:\n{stderr}"));
    for part in ["flow west->east", "reads `orders.east`", "flow east->west", "east-west.toml", "`east` from `orders`"]
    {
        assert!(line.contains(part), "`{part}` in: {line}");
    }
}
