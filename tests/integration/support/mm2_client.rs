//! MM2's own Java client (`connect-mirror-client`) run against ferry's topics: a tiny Java program,
//! compiled once per test process with the JDK's `javac` against the jars the harness fetched.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::{kafka_libdir, repo_root};

const TRANSLATE_JAVA: &str = r#"
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Translate {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            System.out.println("OFFSET " + e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset());
        }
    }
}
"#;

/// Directory holding the compiled `Translate.class`.
fn classes() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ferry-mm2-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("class dir");
        std::fs::write(dir.join("Translate.java"), TRANSLATE_JAVA).expect("write Translate.java");
        let out = Command::new("javac")
            .arg("-cp")
            .arg(format!("{}/*", kafka_libdir().display()))
            .arg("-d")
            .arg(&dir)
            .arg(dir.join("Translate.java"))
            .output()
            .expect("run javac");
        assert!(out.status.success(), "javac failed: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
    .clone()
}

/// `RemoteClusterUtils.translateOffsets(bootstrap, remote_alias, group)` as MM2's users call it:
/// downstream (topic, partition) → offset.
pub fn remote_cluster_utils_translate(
    bootstrap: &str,
    remote_alias: &str,
    group: &str,
) -> BTreeMap<(String, i32), i64> {
    let classpath = format!("{}:{}/*", classes().display(), kafka_libdir().display());
    let log4j = repo_root().join("scripts/kafka/log4j2.yaml");
    let out = Command::new("java")
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .arg("-cp")
        .arg(classpath)
        .arg("Translate")
        .args([bootstrap, remote_alias, group])
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "Translate failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("OFFSET "))
        .map(|l| {
            let parts: Vec<&str> = l.split(' ').collect();
            let partition = parts[1].parse().expect("partition");
            let offset = parts[2].parse().expect("offset");
            ((parts[0].to_string(), partition), offset)
        })
        .collect()
}
