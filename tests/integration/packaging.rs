//! The packaging around ferry, checked without a container engine or Kafka: the alert rules (with
//! `promtool`) and their runbooks, the Grafana dashboards and provisioning, `docker/Dockerfile`,
//! `docker/compose.yaml` and the flows it mounts, and the Kubernetes manifests in `docker/kubernetes/`
//! (the PrometheusRule must hold exactly `dashboards/prometheus-rules.yaml`'s groups, the ServiceMonitor
//! must scrape the metrics Service once as job `ferry`). Each test names the file and the key that is
//! wrong.
//!
//! Nothing here builds or pulls an image; what can be checked on the files and with the `ferry`
//! binary Cargo built is: the compose file's services, ports and mounts agree with the Dockerfile,
//! with Prometheus' and Grafana's configuration and with files that exist in the repository; the
//! Kafka image is the test bed's version (pom.xml); the mounted flows pass `ferry validate`; the
//! runtime image installs every shared library the binary links; the HEALTHCHECK command works; the
//! Kubernetes StatefulSet runs several nodes with stable ids, whole-directory (hot-reloadable) mounts,
//! probes, a graceful stop and no privileges, and its ConfigMap's flows pass `ferry validate` with the
//! Secrets it mounts, without showing them.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use support::prometheus::{dashboards, dashboards_dir, label_values, panel_queries, panels, substitute, variables};
use support::{ferry_bin, free_port, repo_root};

/// The uids the dashboards keep forever (links and bookmarks use them).
const DASHBOARD_UIDS: [(&str, &str); 2] = [("ferry-flow.json", "ferry-flow"), ("ferry-node.json", "ferry-node")];
/// Where docker/compose.yaml and the image expect things.
const FLOWS_IN_CONTAINER: &str = "/etc/ferry/flows";
const FERRY_PORT: u16 = 9464;
const GRAFANA_MOUNT: &str = "/etc/grafana/ferry";
const RUNTIME_IMAGE: &str = "debian:bookworm-slim";
const BUILD_COMMAND: &str = "cargo build --release --locked";

fn docker_dir() -> PathBuf {
    repo_root().join("docker")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn yaml(path: &Path) -> Yaml {
    let mut docs =
        YamlLoader::load_from_str(&read(path)).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{}: one YAML document", path.display());
    docs.remove(0)
}

/// A YAML scalar as text (strings, numbers and booleans alike), `None` for anything else.
fn text(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A mapping with YAML 1.1 merge keys (`<<: *anchor`, which compose supports) applied: the map's
/// own keys win.
fn mapping(y: &Yaml) -> BTreeMap<String, Yaml> {
    let mut out = BTreeMap::new();
    let Some(hash) = y.as_hash() else { return out };
    if let Some(base) = hash.get(&Yaml::String("<<".into())) {
        out.extend(mapping(base));
    }
    for (k, v) in hash {
        if let Some(k) = text(k).filter(|k| k != "<<") {
            out.insert(k, v.clone());
        }
    }
    out
}

/// A list of scalars (a YAML sequence), or one string split on whitespace (compose's short forms).
fn strings(y: &Yaml) -> Vec<String> {
    match y {
        Yaml::Array(a) => a.iter().filter_map(text).collect(),
        other => text(other).map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------------------
// Alert rules

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = dashboards_dir();
    let promtool = std::env::var_os("FERRY_PROMTOOL").map(PathBuf::from).unwrap_or_else(|| "promtool".into());
    for args in [["check", "rules", "prometheus-rules.yaml"], ["test", "rules", "prometheus-rules.test.yaml"]] {
        let out = Command::new(&promtool).args(args).current_dir(&dir).output().unwrap_or_else(|e| {
            panic!("run {}: {e} (install it: apt-get install prometheus; .ci/run does)", promtool.display())
        });
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("promtool {}:\n{output}", args.join(" "));
        assert!(out.status.success(), "promtool {} failed ({}):\n{output}", args.join(" "), out.status);
    }
}

#[test]
fn every_alert_has_severity_annotations_and_firing_and_quiet_unit_tests() {
    let dir = dashboards_dir();
    let rules = yaml(&dir.join("prometheus-rules.yaml"));
    let tests = yaml(&dir.join("prometheus-rules.test.yaml"));
    let mut problems = Vec::new();
    let mut alerts = BTreeSet::new();
    let anchors = runbook_anchors(&read(&dir.join(RUNBOOKS)));
    for group in rules["groups"].as_vec().into_iter().flatten() {
        for rule in group["rules"].as_vec().into_iter().flatten() {
            let Some(name) = rule["alert"].as_str() else { continue };
            alerts.insert(name.to_string());
            // The runbook: a section of dashboards/RUNBOOKS.md named for the alert.
            let url = rule["annotations"]["runbook_url"].as_str().unwrap_or_default();
            match url.split_once(&format!("dashboards/{RUNBOOKS}#")) {
                Some((_, anchor)) if anchor == name.to_lowercase() && anchors.contains(anchor) => {}
                Some((_, anchor)) => problems.push(format!(
                    "{name}: runbook_url {url:?}: want the anchor #{} of a `## {name}` section of {RUNBOOKS} \
                     (#{anchor} exists: {})",
                    name.to_lowercase(),
                    anchors.contains(anchor)
                )),
                None => {
                    problems.push(format!("{name}: annotations.runbook_url must point at dashboards/{RUNBOOKS}#..."))
                }
            }
            if text(&rule["for"]).is_none() {
                problems.push(format!("{name}: no `for:`"));
            }
            if !matches!(rule["labels"]["severity"].as_str(), Some("critical" | "warning" | "info")) {
                problems.push(format!("{name}: labels.severity must be critical, warning or info"));
            }
            for key in ["summary", "description"] {
                if rule["annotations"][key].as_str().is_none_or(|s| s.trim().is_empty()) {
                    problems.push(format!("{name}: no annotations.{key}"));
                }
            }
        }
    }
    assert!(alerts.len() >= 8, "expected the alerts of the brief, found {alerts:?}");
    for required in ["FerryDown", "FerrySourceRecordsLost", "FerryCheckpointStale"] {
        if !alerts.contains(required) {
            problems.push(format!("no alert {required}"));
        }
    }
    // Every runbook section is an alert's (a renamed alert leaves no orphan).
    for anchor in &anchors {
        if !alerts.iter().any(|a| a.to_lowercase() == *anchor) {
            problems.push(format!("{RUNBOOKS}: section #{anchor} is no alert's runbook"));
        }
    }
    if tests["rule_files"]
        .as_vec()
        .is_none_or(|files| !files.iter().any(|f| f.as_str() == Some("prometheus-rules.yaml")))
    {
        problems.push("prometheus-rules.test.yaml: rule_files must name prometheus-rules.yaml".into());
    }
    // For each alert: the eval cases that expect it firing, and those that expect it quiet.
    let mut firing: BTreeMap<String, usize> = BTreeMap::new();
    let mut quiet: BTreeMap<String, usize> = BTreeMap::new();
    for test in tests["tests"].as_vec().into_iter().flatten() {
        for case in test["alert_rule_test"].as_vec().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap_or_default().to_string();
            if !alerts.contains(&name) {
                problems.push(format!("a unit test names unknown alert {name:?}"));
            }
            let expected = case["exp_alerts"].as_vec().map_or(0, Vec::len);
            *(if expected > 0 { &mut firing } else { &mut quiet }).entry(name).or_default() += 1;
        }
    }
    for name in &alerts {
        if !firing.contains_key(name) {
            problems.push(format!("{name}: no unit test where it fires"));
        }
        if !quiet.contains_key(name) {
            problems.push(format!("{name}: no unit test where it does not fire"));
        }
    }
    println!(
        "{} alerts, {} unit test cases firing, {} not firing",
        alerts.len(),
        firing.values().sum::<usize>(),
        quiet.values().sum::<usize>()
    );
    assert!(problems.is_empty(), "alert rules:\n  {}", problems.join("\n  "));
}

/// The runbooks of the alerts, beside the rules (each alert's `runbook_url` ends in `RUNBOOKS.md#<alert>`).
const RUNBOOKS: &str = "RUNBOOKS.md";

/// The anchors of a Markdown file's `## ` sections as GitHub renders them (lowercase, spaces as `-`).
fn runbook_anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_kubernetes_prometheus_rule_holds_exactly_the_alert_rules() {
    let rules = yaml(&dashboards_dir().join("prometheus-rules.yaml"));
    let path = docker_dir().join("kubernetes").join("prometheus-rule.yaml");
    let rule = yaml(&path);
    assert_eq!(rule["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"), "{}: apiVersion", path.display());
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"), "{}: kind", path.display());
    assert!(!rules["groups"].is_badvalue(), "dashboards/prometheus-rules.yaml has groups");
    assert!(
        rule["spec"]["groups"] == rules["groups"],
        "{} differs from dashboards/prometheus-rules.yaml: regenerate it with \
         `scripts/prometheus-rule.sh > docker/kubernetes/prometheus-rule.yaml`",
        path.display()
    );
    // The script reproduces the file byte for byte (so the comment in the file stays true).
    let out = Command::new(repo_root().join("scripts").join("prometheus-rule.sh")).output().expect("run the script");
    assert!(out.status.success(), "scripts/prometheus-rule.sh: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout) == read(&path),
        "{} is not what scripts/prometheus-rule.sh prints: regenerate it",
        path.display()
    );
}

#[test]
fn the_service_monitor_scrapes_the_metrics_service_once_as_job_ferry() {
    let m = Manifests::load();
    let (set, _) = m.ferry();
    let pod_labels = &set["spec"]["template"]["metadata"]["labels"];
    let monitors = m.of_kind("ServiceMonitor");
    assert_eq!(monitors.len(), 1, "docker/kubernetes/: one ServiceMonitor");
    let sm = monitors[0];
    let mut problems = Vec::new();
    if sm["apiVersion"].as_str() != Some("monitoring.coreos.com/v1") {
        problems.push("ServiceMonitor: apiVersion monitoring.coreos.com/v1".to_string());
    }
    // It selects exactly one Service (scraping the headless one too would count every node twice),
    // which selects the pods and names the port the endpoints scrape.
    let services: Vec<&Yaml> = m
        .of_kind("Service")
        .into_iter()
        .filter(|s| selects(&sm["spec"]["selector"]["matchLabels"], &s["metadata"]["labels"]))
        .collect();
    if services.len() != 1 {
        let names: Vec<Option<&str>> = services.iter().map(|s| s["metadata"]["name"].as_str()).collect();
        problems.push(format!("ServiceMonitor: spec.selector must match exactly one Service, matches {names:?}"));
    }
    for s in &services {
        if !selects(&s["spec"]["selector"], pod_labels) {
            problems.push("ServiceMonitor: its Service must select the StatefulSet's pods".into());
        }
        let ports: Vec<&str> =
            s["spec"]["ports"].as_vec().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
        for e in sm["spec"]["endpoints"].as_vec().into_iter().flatten() {
            let port = e["port"].as_str().unwrap_or_default();
            if !ports.contains(&port) {
                problems
                    .push(format!("ServiceMonitor: endpoint port {port:?} is not a port of its Service: {ports:?}"));
            }
            if e["path"].as_str().is_some_and(|p| p != "/metrics") {
                problems.push(format!("ServiceMonitor: endpoint path {:?}, ferry serves /metrics", e["path"]));
            }
        }
        // The job label: the operator takes it from the Service label named by jobLabel.
        let job = sm["spec"]["jobLabel"].as_str().and_then(|l| s["metadata"]["labels"][l].as_str());
        if job != Some("ferry") {
            problems
                .push(format!("ServiceMonitor: the job label would be {job:?}; the alert rules select job=\"ferry\""));
        }
    }
    if sm["spec"]["endpoints"].as_vec().is_none_or(Vec::is_empty) {
        problems.push("ServiceMonitor: no endpoints".into());
    }
    assert!(problems.is_empty(), "docker/kubernetes/service-monitor.yaml:\n  {}", problems.join("\n  "));
}

// ---------------------------------------------------------------------------------------------------
// Dashboards and provisioning

#[test]
fn dashboards_have_fixed_uids_variables_and_prometheus_queries() {
    let all = dashboards();
    let files: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, DASHBOARD_UIDS.map(|(f, _)| f), "dashboards/grafana/ holds exactly these dashboards");
    let mut problems = Vec::new();
    let builtins: BTreeMap<String, String> =
        ["__rate_interval", "__interval", "__range"].iter().map(|b| (b.to_string(), "1m".to_string())).collect();
    for ((file, d), (_, uid)) in all.iter().zip(DASHBOARD_UIDS) {
        let mut p = |m: String| problems.push(format!("{file}: {m}"));
        if d["uid"] != uid {
            p(format!("uid is {}, must stay {uid}", d["uid"]));
        }
        if d["id"].as_i64().is_some() {
            p("has a numeric id (an export artefact; Grafana assigns it)".into());
        }
        let vars = variables(d);
        let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
        let want: &[&str] = if uid == "ferry-flow" {
            &["datasource", "job", "namespace", "flow", "topic"]
        } else {
            &["datasource", "job", "namespace", "instance", "flow"]
        };
        if names != want {
            p(format!("variables are {names:?}, want {want:?}"));
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            let name = v["name"].as_str().unwrap_or_default();
            if v["type"] == "datasource" {
                if v["query"] != "prometheus" {
                    p(format!("${name} must list Prometheus datasources"));
                }
                continue;
            }
            if v["multi"] != true || v["includeAll"] != true {
                p(format!("${name} must be multi-value with All"));
            }
            if v["datasource"]["uid"] != "${datasource}" {
                p(format!("${name} must query ${{datasource}}"));
            }
            let query = vars.iter().find(|x| x.name == name).and_then(|x| x.query.clone()).unwrap_or_default();
            if label_values(&query).is_none() {
                p(format!("${name} query is not label_values(SELECTOR, LABEL): {query:?}"));
            }
        }
        // Every panel queries Prometheus through $datasource; ids are unique; the grid has no overlap.
        let mut values = builtins.clone();
        values.extend(vars.iter().map(|v| (v.name.clone(), ".*".to_string())));
        let mut ids = BTreeSet::new();
        let mut cells: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        for panel in d["panels"].as_array().into_iter().flatten() {
            let id = panel["id"].as_i64().unwrap_or(-1);
            if !ids.insert(id) {
                p(format!("panel id {id} is not unique"));
            }
            let g = &panel["gridPos"];
            let (x, y, w, h) = (g["x"].as_i64(), g["y"].as_i64(), g["w"].as_i64(), g["h"].as_i64());
            let (Some(x), Some(y), Some(w), Some(h)) = (x, y, w, h) else {
                p(format!("panel {id} has no gridPos"));
                continue;
            };
            if x < 0 || w <= 0 || x + w > 24 {
                p(format!("panel {id} does not fit the 24-column grid"));
            }
            for cx in x..x + w {
                for cy in y..y + h {
                    if let Some(other) = cells.insert((cx, cy), id) {
                        p(format!("panels {other} and {id} overlap at ({cx}, {cy})"));
                    }
                }
            }
        }
        for panel in panels(d) {
            let title = panel["title"].as_str().unwrap_or_default();
            if panel["datasource"]["uid"] != "${datasource}" {
                p(format!("panel {title:?}: datasource must be ${{datasource}}"));
            }
            if panel["targets"].as_array().is_none_or(Vec::is_empty) {
                p(format!("panel {title:?}: no queries"));
            }
            if panel["description"].as_str().is_none_or(str::is_empty) {
                p(format!("panel {title:?}: no description"));
            }
            for t in panel["targets"].as_array().into_iter().flatten() {
                if t["datasource"]["uid"] != "${datasource}" {
                    p(format!("panel {title:?} {}: datasource must be ${{datasource}}", t["refId"]));
                }
            }
        }
        for q in panel_queries(d) {
            if q.expr.trim().is_empty() {
                p(format!("panel {:?} {}: empty expr", q.panel, q.ref_id));
            } else if let Err(e) = substitute(&q.expr, &values) {
                p(format!("panel {:?} {}: {e}", q.panel, q.ref_id));
            }
            for selector in unfiltered_selectors(&q.expr) {
                p(format!("panel {:?} {}: {selector} is not filtered by $job and $namespace", q.panel, q.ref_id));
            }
        }
        for v in vars.iter().filter(|v| v.name != "datasource" && v.name != "job") {
            for selector in unfiltered_selectors(v.query.as_deref().unwrap_or_default()) {
                if v.name != "namespace" || !selector.contains("job=~\"$job\"") {
                    p(format!("${}: {selector} is not filtered by $job and $namespace", v.name));
                }
            }
        }
        // Annotations: reloads and actor restarts, queried like the panels.
        let annotations: Vec<&serde_json::Value> = d["annotations"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["builtIn"].as_i64() != Some(1))
            .collect();
        for metric in ["ferry_config_reloads_total", "ferry_actor_restarts_total"] {
            if !annotations.iter().any(|a| a["expr"].as_str().is_some_and(|e| e.contains(metric))) {
                p(format!("no annotation queries {metric}"));
            }
        }
        for a in &annotations {
            let name = a["name"].as_str().unwrap_or_default();
            let expr = a["expr"].as_str().unwrap_or_default();
            if a["datasource"]["uid"] != "${datasource}" {
                p(format!("annotation {name:?}: datasource must be ${{datasource}}"));
            }
            if let Err(e) = substitute(expr, &values) {
                p(format!("annotation {name:?}: {e}"));
            }
            for selector in unfiltered_selectors(expr) {
                p(format!("annotation {name:?}: {selector} is not filtered by $job and $namespace"));
            }
        }
        let count = panels(d).len();
        println!("{file}: uid {uid}, {count} panels, {} queries", panel_queries(d).len());
    }
    assert!(problems.is_empty(), "dashboards:\n  {}", problems.join("\n  "));
}

/// The `ferry_*` selectors of `expr` that lack `job=~"$job"` or `namespace=~"$namespace"`.
fn unfiltered_selectors(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("ferry_") {
        let boundary = i == 0 || !rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let after = &rest[i..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let labels = after[end..].strip_prefix('{').and_then(|l| l.find('}').map(|j| &l[..j])).unwrap_or("");
        if boundary && !(labels.contains("job=~\"$job\"") && labels.contains("namespace=~\"$namespace\"")) {
            out.push(format!("{}{{{labels}}}", &after[..end]));
        }
        rest = &after[end..];
    }
    out
}

#[test]
fn grafana_provisioning_points_at_the_mounted_dashboards_and_the_compose_prometheus() {
    let dir = dashboards_dir().join("provisioning");
    let compose = Compose::load();
    let grafana = compose.service("grafana");
    let mount = grafana.mounts().into_iter().find(|m| m.target == GRAFANA_MOUNT);
    let mount = mount.unwrap_or_else(|| panic!("compose grafana: dashboards/ must be mounted at {GRAFANA_MOUNT}"));
    assert_eq!(mount.source_path(&docker_dir()), dashboards_dir(), "compose grafana: {GRAFANA_MOUNT} is dashboards/");
    assert_eq!(
        grafana.env("GF_PATHS_PROVISIONING").as_deref(),
        Some(format!("{GRAFANA_MOUNT}/provisioning").as_str()),
        "compose grafana: GF_PATHS_PROVISIONING"
    );
    for (key, value) in mapping(&grafana.y["environment"]) {
        let value = text(&value).unwrap_or_default();
        if let Some(rel) = value.strip_prefix(&format!("{GRAFANA_MOUNT}/")) {
            assert!(dashboards_dir().join(rel).exists(), "compose grafana: {key}={value} is not in dashboards/");
        }
    }

    let mut providers = 0;
    for file in yaml_files(&dir.join("dashboards")) {
        let doc = yaml(&file);
        assert_eq!(doc["apiVersion"].as_i64(), Some(1), "{}: apiVersion 1", file.display());
        for p in doc["providers"].as_vec().into_iter().flatten() {
            providers += 1;
            let path = p["options"]["path"].as_str().unwrap_or_default();
            let rel = path.strip_prefix(&format!("{GRAFANA_MOUNT}/")).unwrap_or_else(|| {
                panic!("{}: provider path {path} is not under the mount {GRAFANA_MOUNT}", file.display())
            });
            let local = dashboards_dir().join(rel);
            let json = std::fs::read_dir(&local).map(|d| d.count()).unwrap_or(0);
            assert!(
                json > 0,
                "{}: provider path {path} is {} here, which holds no dashboards",
                file.display(),
                local.display()
            );
        }
    }
    assert!(providers > 0, "no dashboard provider under {}", dir.display());

    let prometheus = compose.service("prometheus");
    let mut datasources = 0;
    for file in yaml_files(&dir.join("datasources")) {
        for ds in yaml(&file)["datasources"].as_vec().into_iter().flatten() {
            datasources += 1;
            assert_eq!(ds["type"].as_str(), Some("prometheus"), "{}: datasource type", file.display());
            let url = ds["url"].as_str().unwrap_or_default();
            let port = prometheus.container_ports().into_iter().next().unwrap_or(9090);
            assert_eq!(url, format!("http://prometheus:{port}"), "{}: the compose prometheus service", file.display());
        }
    }
    assert!(datasources > 0, "no datasource under {}", dir.display());
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML file in {}", dir.display());
    files
}

// ---------------------------------------------------------------------------------------------------
// docker/compose.yaml

struct Compose {
    doc: Yaml,
}

struct Service<'a> {
    name: String,
    y: &'a Yaml,
}

/// A bind mount (`source:target[:mode]` with a relative or absolute source) or a named volume.
struct Mount {
    source: String,
    target: String,
}

impl Mount {
    fn is_bind(&self) -> bool {
        self.source.starts_with('.') || self.source.starts_with('/')
    }

    /// The host path of a bind mount (see [`resolve`]).
    fn source_path(&self, base: &Path) -> PathBuf {
        resolve(base, &self.source)
    }
}

/// `path` resolved against `base` (compose: the directory of the compose file), `..` and `.` folded.
fn resolve(base: &Path, path: &str) -> PathBuf {
    let mut out = if path.starts_with('/') { PathBuf::new() } else { base.to_path_buf() };
    for part in Path::new(path).components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

impl Compose {
    fn load() -> Compose {
        Compose { doc: yaml(&docker_dir().join("compose.yaml")) }
    }

    fn service(&self, name: &str) -> Service<'_> {
        let y = &self.doc["services"][name];
        assert!(!y.is_badvalue(), "docker/compose.yaml has no service {name}");
        Service { name: name.to_string(), y }
    }

    fn services(&self) -> Vec<Service<'_>> {
        self.doc["services"]
            .as_hash()
            .into_iter()
            .flatten()
            .filter_map(|(k, y)| Some(Service { name: text(k)?, y }))
            .collect()
    }
}

impl Service<'_> {
    fn image(&self) -> Option<String> {
        self.y["image"].as_str().map(str::to_string)
    }

    fn env(&self, key: &str) -> Option<String> {
        match &self.y["environment"] {
            Yaml::Array(items) => items
                .iter()
                .filter_map(text)
                .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v.to_string())),
            env => mapping(env).get(key).and_then(text),
        }
    }

    fn mounts(&self) -> Vec<Mount> {
        self.y["volumes"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(|v| match v {
                Yaml::Hash(_) => Mount {
                    source: v["source"].as_str().unwrap_or_default().to_string(),
                    target: v["target"].as_str().unwrap_or_default().to_string(),
                },
                other => {
                    let s = text(other).unwrap_or_default();
                    let mut parts = s.splitn(3, ':');
                    let source = parts.next().unwrap_or_default().to_string();
                    let target = parts.next().unwrap_or_default().to_string();
                    Mount { source, target }
                }
            })
            .collect()
    }

    /// `(host, container)` of each `ports:` entry.
    fn ports(&self) -> Vec<(u16, u16)> {
        strings(&self.y["ports"])
            .iter()
            .map(|p| {
                let (host, container) = p.rsplit_once(':').unwrap_or((p, p));
                let host = host.rsplit(':').next().unwrap_or(host);
                let parse = |s: &str| s.parse().unwrap_or_else(|_| panic!("service {}: bad port {p:?}", self.name));
                (parse(host), parse(container.split('/').next().unwrap_or(container)))
            })
            .collect()
    }

    fn container_ports(&self) -> Vec<u16> {
        self.ports().into_iter().map(|(_, c)| c).collect()
    }

    fn command(&self) -> Vec<String> {
        strings(&self.y["command"])
    }
}

/// `kafka.version` of pom.xml: the Kafka of the test bed.
fn pom_kafka_version() -> String {
    let pom = read(&repo_root().join("pom.xml"));
    let (_, rest) = pom.split_once("<kafka.version>").expect("pom.xml has <kafka.version>");
    let (version, _) = rest.split_once("</kafka.version>").expect("pom.xml closes </kafka.version>");
    version.trim().to_string()
}

#[test]
fn compose_runs_two_kafka_clusters_ferry_prometheus_and_grafana_from_files_that_exist() {
    let compose = Compose::load();
    let names: BTreeSet<String> = compose.services().iter().map(|s| s.name.clone()).collect();
    let want: BTreeSet<String> = ["east", "west", "ferry", "prometheus", "grafana"].map(String::from).into();
    assert_eq!(names, want, "docker/compose.yaml services");
    let mut problems = Vec::new();

    // Every bind mount's host path exists; named volumes are declared.
    let declared: BTreeSet<String> =
        compose.doc["volumes"].as_hash().into_iter().flatten().filter_map(|(k, _)| text(k)).collect();
    for s in compose.services() {
        for m in s.mounts() {
            if m.target.is_empty() || !m.target.starts_with('/') {
                problems.push(format!("service {}: mount {:?} has no absolute target", s.name, m.source));
            } else if m.is_bind() {
                if !m.source_path(&docker_dir()).exists() {
                    problems.push(format!("service {}: host path {} does not exist", s.name, m.source));
                }
            } else if !declared.contains(&m.source) {
                problems.push(format!("service {}: volume {} is not declared under volumes:", s.name, m.source));
            }
        }
    }

    // Kafka: the test bed's version, one host port each, distinct.
    let kafka = format!("apache/kafka:{}", pom_kafka_version());
    let mut host_ports = BTreeSet::new();
    for s in compose.services() {
        for (host, _) in s.ports() {
            if !host_ports.insert(host) {
                problems.push(format!("host port {host} is published twice"));
            }
        }
    }
    for name in ["east", "west"] {
        let s = compose.service(name);
        if s.image().as_deref() != Some(kafka.as_str()) {
            problems.push(format!("service {name}: image {:?}, want {kafka} (pom.xml kafka.version)", s.image()));
        }
        if s.env("KAFKA_PROCESS_ROLES").as_deref() != Some("broker,controller") {
            problems
                .push(format!("service {name}: a single-node KRaft cluster (KAFKA_PROCESS_ROLES=broker,controller)"));
        }
        let advertised = s.env("KAFKA_ADVERTISED_LISTENERS").unwrap_or_default();
        if !advertised.contains(&format!("PLAINTEXT://{name}:9092")) {
            problems.push(format!("service {name}: advertises {advertised:?}, ferry connects to {name}:9092"));
        }
        if s.y["healthcheck"].is_badvalue() {
            problems.push(format!("service {name}: no healthcheck (ferry waits for service_healthy)"));
        }
    }

    // ferry: built from docker/Dockerfile, flows mounted where the image reads them, same command
    // and port as the image.
    let ferry = compose.service("ferry");
    let context = resolve(&docker_dir(), ferry.y["build"]["context"].as_str().unwrap_or_default());
    let dockerfile = context.join(ferry.y["build"]["dockerfile"].as_str().unwrap_or("Dockerfile"));
    if context != repo_root() || dockerfile != docker_dir().join("Dockerfile") {
        problems.push(format!(
            "service ferry: builds {} in {}, want docker/Dockerfile in the repository root",
            dockerfile.display(),
            context.display()
        ));
    }
    let image = Dockerfile::load();
    if ferry.command() != image.cmd() {
        problems.push(format!(
            "service ferry: command {:?} differs from the image's CMD {:?}",
            ferry.command(),
            image.cmd()
        ));
    }
    let flows = ferry.mounts().into_iter().find(|m| m.target == FLOWS_IN_CONTAINER);
    match flows {
        Some(m) if m.source_path(&docker_dir()) == docker_dir().join("flows") => {}
        _ => problems.push(format!("service ferry: docker/flows must be mounted at {FLOWS_IN_CONTAINER}")),
    }
    if !ferry.container_ports().contains(&FERRY_PORT) || !image.exposed().contains(&FERRY_PORT) {
        problems.push(format!(
            "ferry listens on {FERRY_PORT}: compose publishes {:?}, the image exposes {:?}",
            ferry.container_ports(),
            image.exposed()
        ));
    }
    let grace =
        ferry.y["stop_grace_period"].as_str().and_then(|g| g.strip_suffix('s')).and_then(|g| g.parse::<u64>().ok());
    if grace.is_none_or(|g| g <= 30) {
        problems.push("service ferry: stop_grace_period must exceed ferry's 30 s shutdown timeout".into());
    }
    for dep in ["east", "west"] {
        if ferry.y["depends_on"][dep]["condition"].as_str() != Some("service_healthy") {
            problems.push(format!("service ferry: depends_on {dep} with condition service_healthy"));
        }
    }

    // Prometheus: its config scrapes ferry and loads the rules file where compose mounts it.
    let prometheus = compose.service("prometheus");
    let mounts = prometheus.mounts();
    let config_target = prometheus
        .command()
        .iter()
        .find_map(|a| a.strip_prefix("--config.file=").map(str::to_string))
        .unwrap_or_else(|| "/etc/prometheus/prometheus.yml".into());
    let config = mounts.iter().find(|m| m.target == config_target).map(|m| m.source_path(&docker_dir()));
    let rules = mounts
        .iter()
        .find(|m| m.source_path(&docker_dir()) == dashboards_dir().join("prometheus-rules.yaml"))
        .map(|m| m.target.clone());
    match (config, rules) {
        (Some(config), Some(rules)) => {
            let doc = yaml(&config);
            let files = strings(&doc["rule_files"]);
            if !files.contains(&rules) {
                problems.push(format!("{}: rule_files {files:?} must load {rules} (mounted rules)", config.display()));
            }
            let targets: Vec<String> = doc["scrape_configs"]
                .as_vec()
                .into_iter()
                .flatten()
                .flat_map(|j| j["static_configs"].as_vec().into_iter().flatten().flat_map(|s| strings(&s["targets"])))
                .collect();
            if !targets.contains(&format!("ferry:{FERRY_PORT}")) {
                problems.push(format!("{}: scrapes {targets:?}, not ferry:{FERRY_PORT}", config.display()));
            }
        }
        (config, rules) => problems.push(format!(
            "service prometheus: config mounted at {config_target}: {config:?}; dashboards/prometheus-rules.yaml \
             mounted: {rules:?}"
        )),
    }
    assert!(problems.is_empty(), "docker/compose.yaml:\n  {}", problems.join("\n  "));
}

#[test]
fn compose_flows_are_an_active_active_pair_that_passes_ferry_validate() {
    let flows = docker_dir().join("flows");
    let out =
        Command::new(ferry_bin()).arg("validate").arg("--flows").arg(&flows).output().expect("run ferry validate");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("ferry validate --flows docker/flows:\n{output}");
    assert!(out.status.success(), "ferry validate --flows docker/flows failed ({}):\n{output}", out.status);

    // The flows reach the compose clusters by service name, and copy both ways.
    let mut bootstrap = BTreeMap::new();
    let mut pairs = BTreeSet::new();
    for entry in std::fs::read_dir(&flows).expect("read docker/flows") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let doc: toml::Table = toml::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (alias, c) in doc.get("clusters").and_then(|c| c.as_table()).into_iter().flatten() {
            bootstrap.insert(alias.clone(), c["bootstrap_servers"].as_str().unwrap_or_default().to_string());
        }
        for f in doc.get("flows").and_then(|f| f.as_array()).into_iter().flatten() {
            pairs.insert((
                f["source"].as_str().unwrap_or_default().to_string(),
                f["target"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    let expect_bootstrap: BTreeMap<String, String> =
        [("east", "east:9092"), ("west", "west:9092")].map(|(a, b)| (a.to_string(), b.to_string())).into();
    assert_eq!(bootstrap, expect_bootstrap, "docker/flows clusters are the compose services");
    let expect_pairs: BTreeSet<(String, String)> =
        [("east", "west"), ("west", "east")].map(|(s, t)| (s.to_string(), t.to_string())).into();
    assert_eq!(pairs, expect_pairs, "docker/flows: east->west and west->east");
}

// ---------------------------------------------------------------------------------------------------
// docker/Dockerfile

/// The Dockerfile's instructions: (keyword, arguments), continuation lines joined, comments dropped.
struct Dockerfile {
    instructions: Vec<(String, String)>,
}

impl Dockerfile {
    fn load() -> Dockerfile {
        let text = read(&docker_dir().join("Dockerfile"));
        let mut instructions = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
                continue;
            }
            if let Some(body) = trimmed.strip_suffix('\\') {
                current.push_str(body);
                current.push(' ');
                continue;
            }
            current.push_str(trimmed);
            let (keyword, args) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
            instructions.push((keyword.to_uppercase(), args.split_whitespace().collect::<Vec<_>>().join(" ")));
            current.clear();
        }
        Dockerfile { instructions }
    }

    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions.iter().filter(|(k, _)| k == keyword).map(|(_, a)| a.as_str()).collect()
    }

    /// The instructions of the stage starting at the `n`th FROM.
    fn stage(&self, n: usize) -> Vec<(&str, &str)> {
        let mut seen = 0;
        let mut out = Vec::new();
        for (k, a) in &self.instructions {
            if k == "FROM" {
                seen += 1;
            }
            if seen == n + 1 {
                out.push((k.as_str(), a.as_str()));
            }
        }
        out
    }

    /// An exec-form (JSON array) argument, e.g. of CMD.
    fn exec_form(args: &str) -> Vec<String> {
        serde_json::from_str::<Vec<String>>(args)
            .unwrap_or_else(|e| panic!("not an exec-form JSON array ({e}): {args}"))
    }

    fn cmd(&self) -> Vec<String> {
        Dockerfile::exec_form(self.all("CMD").last().expect("Dockerfile has a CMD"))
    }

    fn exposed(&self) -> Vec<u16> {
        self.all("EXPOSE")
            .iter()
            .flat_map(|a| a.split_whitespace())
            .filter_map(|p| p.split('/').next()?.parse().ok())
            .collect()
    }

    /// `ARG NAME=default` values.
    fn arg(&self, name: &str) -> Option<String> {
        self.all("ARG").iter().find_map(|a| a.strip_prefix(&format!("{name}=")).map(str::to_string))
    }

    /// The HEALTHCHECK's command (exec form), options dropped.
    fn healthcheck(&self) -> Vec<String> {
        let hc = self.all("HEALTHCHECK").last().copied().expect("Dockerfile has a HEALTHCHECK");
        let (_, cmd) = hc.split_once("CMD ").expect("HEALTHCHECK ... CMD [...]");
        Dockerfile::exec_form(cmd.trim())
    }
}

#[test]
fn dockerfile_builds_a_locked_release_and_runs_it_unprivileged() {
    let d = Dockerfile::load();
    let mut problems = Vec::new();
    let froms = d.all("FROM");
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");

    // Builder: a pinned rust:<x.y.z>-bookworm, at least the crate's rust-version.
    let rust = d.arg("RUST_VERSION").unwrap_or_default();
    let builder = froms[0].replace("${RUST_VERSION}", &rust);
    let version =
        builder.strip_prefix("rust:").and_then(|b| b.split(' ').next()).and_then(|t| t.strip_suffix("-bookworm"));
    let parts: Vec<u32> = version.unwrap_or_default().split('.').filter_map(|p| p.parse().ok()).collect();
    if parts.len() != 3 {
        problems.push(format!("builder {builder:?} must be rust:<major.minor.patch>-bookworm"));
    }
    let manifest: toml::Table = toml::from_str(&read(&repo_root().join("Cargo.toml"))).expect("Cargo.toml");
    let msrv: Vec<u32> =
        manifest["package"]["rust-version"].as_str().unwrap_or("0").split('.').filter_map(|p| p.parse().ok()).collect();
    if parts < msrv {
        problems.push(format!("builder Rust {version:?} is older than Cargo.toml's rust-version {msrv:?}"));
    }
    let builder_runs: Vec<&str> = d.stage(0).into_iter().filter(|(k, _)| *k == "RUN").map(|(_, a)| a).collect();
    if !builder_runs.iter().any(|r| r.contains(BUILD_COMMAND)) {
        problems.push(format!("the builder must run `{BUILD_COMMAND}`: {builder_runs:?}"));
    }
    if !d.all("RUN").iter().any(|r| r.contains("ferry --version")) {
        problems.push("no `ferry --version` smoke step".into());
    }
    // The build context is the repository root filtered by docker/Dockerfile.dockerignore ("*" then
    // "!path" exceptions): everything the builder copies must be let through.
    let ignore = read(&docker_dir().join("Dockerfile.dockerignore"));
    let allowed: Vec<&str> =
        ignore.lines().filter_map(|l| l.trim().strip_prefix('!')).map(|l| l.trim_end_matches('/')).collect();
    for copy in d.stage(0).into_iter().filter(|(k, _)| *k == "COPY").map(|(_, a)| a) {
        let words: Vec<&str> = copy.split_whitespace().filter(|w| !w.starts_with("--")).collect();
        for source in &words[..words.len().saturating_sub(1)] {
            let source = source.trim_start_matches("./").trim_end_matches('/');
            if !allowed.contains(&source) {
                problems.push(format!("COPY {source}: not let through by docker/Dockerfile.dockerignore"));
            }
            if !repo_root().join(source).exists() {
                problems.push(format!("COPY {source}: no such path in the repository"));
            }
        }
    }

    // Runtime: slim, unprivileged, the port and paths of the compose file.
    if !froms[1].starts_with(RUNTIME_IMAGE) {
        problems.push(format!("runtime {:?} must be {RUNTIME_IMAGE}", froms[1]));
    }
    let user = d.stage(1).into_iter().filter(|(k, _)| *k == "USER").map(|(_, a)| a).next_back().unwrap_or("root");
    if user.split(':').next().is_none_or(|u| u == "root" || u == "0") {
        problems.push(format!("the runtime runs as {user:?}, not an unprivileged user"));
    }
    let cmd = d.cmd();
    let want_cmd: Vec<String> =
        ["run", "--flows", FLOWS_IN_CONTAINER, "--listen", &format!("0.0.0.0:{FERRY_PORT}")].map(String::from).into();
    if cmd != want_cmd {
        problems.push(format!("CMD {cmd:?}, want {want_cmd:?}"));
    }
    if d.all("ENTRYPOINT").last().map(|e| Dockerfile::exec_form(e)) != Some(vec!["ferry".to_string()]) {
        problems.push("ENTRYPOINT must be [\"ferry\"]".into());
    }
    if !d.exposed().contains(&FERRY_PORT) {
        problems.push(format!("EXPOSE {FERRY_PORT}"));
    }
    let hc = d.healthcheck();
    let want_hc: Vec<String> =
        ["ferry", "health", "--url", &format!("http://127.0.0.1:{FERRY_PORT}/health")].map(String::from).into();
    if hc != want_hc {
        problems.push(format!("HEALTHCHECK {hc:?}, want {want_hc:?}"));
    }
    assert!(problems.is_empty(), "docker/Dockerfile:\n  {}", problems.join("\n  "));
}

#[test]
fn the_image_is_built_with_its_revision_and_carries_oci_labels() {
    let d = Dockerfile::load();
    let mut problems = Vec::new();
    // build.rs records FERRY_REVISION for ferry_build_info{revision} (the build context has no .git):
    // the builder stage must have the argument in scope before it runs cargo.
    let build_rs = read(&repo_root().join("build.rs"));
    if !build_rs.contains("std::env::var(\"FERRY_REVISION\")") {
        problems.push("build.rs no longer reads FERRY_REVISION".into());
    }
    let builder = d.stage(0);
    // Cargo runs build.rs only if the builder copies it (without it the revision has no source at all).
    let copies_build_rs = builder.iter().any(|(k, a)| *k == "COPY" && a.split_whitespace().any(|w| w == "build.rs"));
    if repo_root().join("build.rs").exists() && !copies_build_rs {
        problems.push("the builder stage must COPY build.rs (the crate's build script)".into());
    }
    let declared = builder.iter().position(|(k, a)| *k == "ARG" && a.split('=').next() == Some("FERRY_REVISION"));
    let builds = builder.iter().position(|(k, a)| *k == "RUN" && a.contains(BUILD_COMMAND));
    if !matches!((declared, builds), (Some(a), Some(b)) if a < b) {
        problems.push("the builder stage must declare ARG FERRY_REVISION before it runs cargo build".into());
    }
    if d.arg("FERRY_REVISION").is_none() {
        problems.push("a global ARG FERRY_REVISION=<default> (e.g. unknown)".into());
    }
    // The version label defaults to Cargo.toml's version.
    let manifest: toml::Table = toml::from_str(&read(&repo_root().join("Cargo.toml"))).expect("Cargo.toml");
    let version = manifest["package"]["version"].as_str().unwrap_or_default().to_string();
    if d.arg("FERRY_VERSION") != Some(version.clone()) {
        problems.push(format!("ARG FERRY_VERSION={:?}, want Cargo.toml's {version}", d.arg("FERRY_VERSION")));
    }
    let labels = d.stage(1).into_iter().filter(|(k, _)| *k == "LABEL").map(|(_, a)| a).collect::<Vec<_>>().join(" ");
    for (label, arg) in [
        ("org.opencontainers.image.revision", "FERRY_REVISION"),
        ("org.opencontainers.image.version", "FERRY_VERSION"),
        ("org.opencontainers.image.source", "FERRY_SOURCE"),
    ] {
        if !labels.contains(&format!("{label}=\"${{{arg}}}\"")) {
            problems.push(format!("the runtime stage must LABEL {label}=\"${{{arg}}}\""));
        }
        let in_stage = d.stage(1).iter().any(|(k, a)| *k == "ARG" && a.split('=').next() == Some(arg));
        if !in_stage {
            problems.push(format!("the runtime stage must declare ARG {arg} (LABEL sees only its stage's arguments)"));
        }
    }
    // compose passes the revision through.
    let compose = Compose::load();
    if text(&compose.service("ferry").y["build"]["args"]["FERRY_REVISION"]).is_none() {
        problems.push("docker/compose.yaml: service ferry's build.args must pass FERRY_REVISION".into());
    }
    assert!(problems.is_empty(), "docker/Dockerfile revision and labels:\n  {}", problems.join("\n  "));
}

/// Shared libraries the binary may link, and the Debian package of the runtime image that provides
/// each (`None`: part of every Debian image: libc6, libgcc-s1).
const RUNTIME_LIBRARIES: &[(&str, Option<&str>)] = &[
    ("linux-vdso.so.1", None),
    ("libc.so.6", None),
    ("libm.so.6", None),
    ("libdl.so.2", None),
    ("librt.so.1", None),
    ("libpthread.so.0", None),
    ("libgcc_s.so.1", None),
    ("ld-linux-x86-64.so.2", None),
    ("ld-linux-aarch64.so.1", None),
    ("libssl.so.3", Some("libssl3")),
    ("libcrypto.so.3", Some("libssl3")),
    ("libz.so.1", Some("zlib1g")),
    ("libresolv.so.2", None),
    ("libsasl2.so.2", Some("libsasl2-2")),
    ("libcurl.so.4", Some("libcurl4")),
    // What libcurl4 itself links (HTTP/2, IDN, its TLS and LDAP stacks, Kerberos): apt installs them
    // with it, as its dependencies.
    ("libnghttp2.so.14", Some("libcurl4")),
    ("libidn2.so.0", Some("libcurl4")),
    ("librtmp.so.1", Some("libcurl4")),
    ("libssh2.so.1", Some("libcurl4")),
    ("libpsl.so.5", Some("libcurl4")),
    ("libgssapi_krb5.so.2", Some("libcurl4")),
    ("libldap-2.5.so.0", Some("libcurl4")),
    ("liblber-2.5.so.0", Some("libcurl4")),
    ("libzstd.so.1", Some("libcurl4")),
    ("libbrotlidec.so.1", Some("libcurl4")),
    ("libbrotlicommon.so.1", Some("libcurl4")),
    ("libunistring.so.2", Some("libcurl4")),
    ("libgnutls.so.30", Some("libcurl4")),
    ("libhogweed.so.6", Some("libcurl4")),
    ("libnettle.so.8", Some("libcurl4")),
    ("libgmp.so.10", Some("libcurl4")),
    ("libkrb5.so.3", Some("libcurl4")),
    ("libk5crypto.so.3", Some("libcurl4")),
    ("libcom_err.so.2", Some("libcurl4")),
    ("libkrb5support.so.0", Some("libcurl4")),
    ("libkeyutils.so.1", Some("libcurl4")),
    ("libp11-kit.so.0", Some("libcurl4")),
    ("libtasn1.so.6", Some("libcurl4")),
    ("libffi.so.8", Some("libcurl4")),
];

#[test]
fn the_runtime_image_installs_every_shared_library_ferry_links() {
    // The test build has the same rdkafka features (and so the same dynamic libraries) as the
    // release build the image ships.
    let out = Command::new("ldd").arg(ferry_bin()).output().expect("run ldd");
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("ldd {}:\n{listing}", ferry_bin().display());
    assert!(out.status.success(), "ldd failed: {}", String::from_utf8_lossy(&out.stderr));
    let d = Dockerfile::load();
    let runtime_install: String =
        d.stage(1).into_iter().filter(|(k, _)| *k == "RUN").map(|(_, a)| a).collect::<Vec<_>>().join(" ");
    let installed: BTreeSet<&str> = runtime_install.split_whitespace().collect();
    let mut problems = Vec::new();
    for line in listing.lines() {
        let Some(lib) = line.split_whitespace().next() else { continue };
        let lib = lib.rsplit('/').next().unwrap_or(lib);
        match RUNTIME_LIBRARIES.iter().find(|(l, _)| *l == lib) {
            None => problems
                .push(format!("{lib}: unknown library; install its package in the runtime stage and add it here")),
            Some((_, Some(package))) if !installed.contains(package) => {
                problems.push(format!("{lib}: the runtime stage does not install {package}"))
            }
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "docker/Dockerfile runtime stage:\n  {}", problems.join("\n  "));
}

/// Answers every connection with `status` and a small /health document, until the test ends.
fn fake_health_server(status: &str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let body = "{\"status\": \"ok\", \"flows\": {}}\n";
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(response.as_bytes());
        }
    });
    port
}

#[test]
fn the_image_healthcheck_command_passes_when_health_answers_and_fails_when_nothing_listens() {
    let hc = Dockerfile::load().healthcheck();
    assert_eq!(hc.first().map(String::as_str), Some("ferry"), "HEALTHCHECK runs ferry");
    let run = |port: u16| {
        let args: Vec<String> =
            hc[1..].iter().map(|a| a.replace(&format!(":{FERRY_PORT}/"), &format!(":{port}/"))).collect();
        let out = Command::new(ferry_bin()).args(&args).output().expect("run ferry health");
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status, args, output)
    };
    let (status, args, output) = run(fake_health_server("200 OK"));
    assert!(status.success(), "`ferry {}` against a node whose /health answers: {status}\n{output}", args.join(" "));
    let (status, args, output) = run(free_port());
    assert!(!status.success(), "`ferry {}` with nothing listening must fail, got {status}\n{output}", args.join(" "));
}

// ---------------------------------------------------------------------------------------------------
// docker/kubernetes/

/// Every document of every YAML file in docker/kubernetes/ (empty documents dropped), with its file.
struct Manifests {
    docs: Vec<(PathBuf, Yaml)>,
}

/// A container's volume mount, with the volume it mounts.
struct K8sMount {
    path: String,
    sub_path: bool,
    volume: Yaml,
}

impl Manifests {
    fn load() -> Manifests {
        let mut docs = Vec::new();
        for file in yaml_files(&docker_dir().join("kubernetes")) {
            let all = YamlLoader::load_from_str(&read(&file))
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
            for doc in all.into_iter().filter(|d| !d.is_null()) {
                for key in ["apiVersion", "kind"] {
                    assert!(doc[key].as_str().is_some(), "{}: a document without {key}", file.display());
                }
                assert!(
                    doc["metadata"]["name"].as_str().is_some(),
                    "{}: a document without metadata.name",
                    file.display()
                );
                docs.push((file.clone(), doc));
            }
        }
        let mut seen = BTreeSet::new();
        for (file, d) in &docs {
            let id = (text(&d["kind"]).unwrap_or_default(), text(&d["metadata"]["name"]).unwrap_or_default());
            assert!(seen.insert(id.clone()), "{}: {} {} is defined twice", file.display(), id.0, id.1);
        }
        Manifests { docs }
    }

    fn of_kind(&self, kind: &str) -> Vec<&Yaml> {
        self.docs.iter().map(|(_, d)| d).filter(|d| d["kind"].as_str() == Some(kind)).collect()
    }

    fn get(&self, kind: &str, name: &str) -> Option<&Yaml> {
        self.of_kind(kind).into_iter().find(|d| d["metadata"]["name"].as_str() == Some(name))
    }

    /// The one StatefulSet and its `ferry` container.
    fn ferry(&self) -> (&Yaml, &Yaml) {
        let sets = self.of_kind("StatefulSet");
        assert_eq!(sets.len(), 1, "docker/kubernetes/: one StatefulSet");
        let container = sets[0]["spec"]["template"]["spec"]["containers"]
            .as_vec()
            .into_iter()
            .flatten()
            .find(|c| c["name"].as_str() == Some("ferry"))
            .expect("docker/kubernetes/: the StatefulSet has a container named ferry");
        (sets[0], container)
    }

    /// The `ferry run` arguments of the container (the image's CMD when it sets none).
    fn run_args(container: &Yaml) -> Vec<String> {
        let command = strings(&container["command"]);
        assert!(
            command.is_empty() || command == ["ferry"],
            "the ferry container must keep the image's entrypoint ferry: {command:?}"
        );
        let args = strings(&container["args"]);
        let args = if args.is_empty() { Dockerfile::load().cmd() } else { args };
        assert_eq!(args.first().map(String::as_str), Some("run"), "the ferry container runs `ferry run`: {args:?}");
        args
    }

    /// The container's volume mounts, each with its volume from the pod spec.
    fn mounts(set: &Yaml, container: &Yaml) -> Vec<K8sMount> {
        let volumes = &set["spec"]["template"]["spec"]["volumes"];
        container["volumeMounts"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(|m| {
                let name = m["name"].as_str().unwrap_or_default();
                let volume = volumes.as_vec().into_iter().flatten().find(|v| v["name"].as_str() == Some(name));
                K8sMount {
                    path: m["mountPath"].as_str().unwrap_or_default().trim_end_matches('/').to_string(),
                    sub_path: !m["subPath"].is_badvalue() || !m["subPathExpr"].is_badvalue(),
                    volume: volume.unwrap_or_else(|| panic!("volume mount {name}: no such volume in the pod")).clone(),
                }
            })
            .collect()
    }

    /// The files a configMap or secret volume holds (see [`Manifests::object_files`]).
    fn volume_files(&self, volume: &Yaml) -> Option<BTreeMap<String, String>> {
        if let Some(name) = volume["configMap"]["name"].as_str() {
            self.object_files("ConfigMap", name)
        } else {
            self.object_files("Secret", volume["secret"]["secretName"].as_str()?)
        }
    }

    /// A ConfigMap's `data`, or a Secret's `data` (decoded) and `stringData`, by key.
    fn object_files(&self, kind: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let object = self.get(kind, name)?;
        let mut files = BTreeMap::new();
        for (k, v) in mapping(&object["data"]) {
            let mut v = text(&v).unwrap_or_default();
            if kind == "Secret" {
                let bytes =
                    openssl::base64::decode_block(&v).unwrap_or_else(|e| panic!("Secret {name} {k}: not base64: {e}"));
                v = String::from_utf8(bytes).unwrap_or_else(|_| panic!("Secret {name} {k}: not UTF-8"));
            }
            files.insert(k, v);
        }
        for (k, v) in mapping(&object["stringData"]) {
            files.insert(k, text(&v).unwrap_or_default());
        }
        Some(files)
    }
}

/// The value of `--flag VALUE` or `--flag=VALUE`.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name { args.get(i + 1).cloned() } else { a.strip_prefix(&format!("{name}=")).map(str::to_string) }
    })
}

/// Whether every label of `selector` is on `labels` (and the selector is not empty).
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    let (selector, labels) = (mapping(selector), mapping(labels));
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k).and_then(text) == text(v))
}

/// A probe's or Service's port (a number, or the name of one of the container's ports) as a number.
fn container_port(container: &Yaml, port: &Yaml) -> Option<i64> {
    port.as_i64().or_else(|| {
        let name = port.as_str()?;
        let ports = container["ports"].as_vec()?;
        ports.iter().find(|p| p["name"].as_str() == Some(name))?["containerPort"].as_i64()
    })
}

/// The mount holding `path` (a file directly in the mounted directory), and the file's name.
fn mounted_at<'a>(mounts: &'a [K8sMount], path: &str) -> Option<(&'a K8sMount, String)> {
    mounts.iter().find_map(|m| {
        let name = path.strip_prefix(&format!("{}/", m.path))?;
        (!name.contains('/')).then(|| (m, name.to_string()))
    })
}

#[test]
fn kubernetes_statefulset_runs_several_nodes_with_stable_ids_probes_and_reloadable_mounts() {
    let m = Manifests::load();
    let (set, container) = m.ferry();
    let pod = &set["spec"]["template"];
    let args = Manifests::run_args(container);
    let mounts = Manifests::mounts(set, container);
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(s);

    // Several nodes, each with a stable, unique node id, all in one deployment.
    if set["spec"]["replicas"].as_i64().is_none_or(|r| r < 2) {
        p(format!("spec.replicas is {:?}: several nodes share the flows", text(&set["spec"]["replicas"])));
    }
    if set["spec"]["podManagementPolicy"].as_str() != Some("Parallel") {
        p("spec.podManagementPolicy must be Parallel (nodes do not wait for each other)".into());
    }
    if !selects(&set["spec"]["selector"]["matchLabels"], &pod["metadata"]["labels"]) {
        p("spec.selector.matchLabels must select the pod template's labels".into());
    }
    let governing = set["spec"]["serviceName"].as_str().and_then(|s| m.get("Service", s));
    match governing {
        Some(s)
            if s["spec"]["clusterIP"].as_str() == Some("None")
                && selects(&s["spec"]["selector"], &pod["metadata"]["labels"]) => {}
        _ => p(format!(
            "spec.serviceName {:?} must name a headless Service selecting the pods",
            text(&set["spec"]["serviceName"])
        )),
    }
    let env = |name: &str| {
        container["env"].as_vec().into_iter().flatten().find(|e| e["name"].as_str() == Some(name)).cloned()
    };
    match env("FERRY_NODE_ID") {
        Some(e) if e["valueFrom"]["fieldRef"]["fieldPath"].as_str() == Some("metadata.name") => {}
        _ => p("env FERRY_NODE_ID must come from the downward API's metadata.name (the stable pod name)".into()),
    }
    if flag(&args, "--node-id").is_some() {
        p("--node-id in args would give every node the same id; FERRY_NODE_ID sets it per pod".into());
    }
    let deployment = env("FERRY_DEPLOYMENT").and_then(|e| text(&e["value"])).or_else(|| flag(&args, "--deployment"));
    if deployment.is_none_or(|d| d.is_empty()) {
        p("FERRY_DEPLOYMENT (or --deployment) must be set, the same for every node".into());
    }

    // The flows directory: a ConfigMap of the manifest mounted whole where --flows points.
    let flows = flag(&args, "--flows").unwrap_or_default().trim_end_matches('/').to_string();
    match mounts.iter().find(|k| k.path == flows) {
        None => p(format!("nothing is mounted at --flows {flows:?}")),
        Some(k) => {
            let files = m.volume_files(&k.volume).filter(|_| !k.volume["configMap"].is_badvalue());
            if files.is_none_or(|f| !f.keys().any(|k| k.ends_with(".toml"))) {
                p(format!("{flows} must mount a ConfigMap of this manifest holding *.toml flow files"));
            }
        }
    }
    for k in mounts.iter().filter(|k| k.sub_path) {
        p(format!("the mount at {} uses subPath: it would never see ConfigMap or Secret updates", k.path));
    }
    // Mutating endpoints on a non-loopback listener need a token: a file of a mounted Secret.
    let listen = flag(&args, "--listen").unwrap_or_else(|| "127.0.0.1:9464".into());
    let listen_port: Option<i64> = listen.rsplit_once(':').and_then(|(_, port)| port.parse().ok());
    if !listen.starts_with("127.") {
        let token = flag(&args, "--admin-token-file").unwrap_or_default();
        let in_secret = mounted_at(&mounts, &token).is_some_and(|(k, name)| {
            !k.volume["secret"].is_badvalue() && m.volume_files(&k.volume).is_some_and(|f| f.contains_key(&name))
        });
        if !in_secret {
            p(format!(
                "--listen {listen}: --admin-token-file {token:?} must be a key of a mounted Secret of this manifest"
            ));
        }
    }

    // Port, probes, graceful stop.
    let metrics_port = container_port(container, &Yaml::String("metrics".into()));
    if metrics_port != Some(i64::from(FERRY_PORT)) || listen_port != metrics_port {
        p(format!("container port `metrics` {metrics_port:?} must be --listen's port ({listen}) and {FERRY_PORT}"));
    }
    for (probe, path) in [("readinessProbe", "/ready"), ("livenessProbe", "/health")] {
        let get = &container[probe]["httpGet"];
        if get["path"].as_str() != Some(path) || container_port(container, &get["port"]) != metrics_port {
            p(format!("{probe} must GET {path} on the metrics port"));
        }
    }
    let timeout: f64 =
        flag(&args, "--shutdown-timeout").map_or(30.0, |t| t.parse().expect("--shutdown-timeout seconds"));
    let grace = pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
    if grace as f64 <= timeout {
        p(format!("terminationGracePeriodSeconds {grace} must exceed --shutdown-timeout {timeout}"));
    }

    // Unprivileged (the container's securityContext overrides the pod's).
    let security = |key: &str| {
        let c = &container["securityContext"][key];
        if c.is_badvalue() { pod["spec"]["securityContext"][key].clone() } else { c.clone() }
    };
    if security("runAsNonRoot").as_bool() != Some(true) || security("runAsUser").as_i64() == Some(0) {
        p("securityContext must run as non-root".into());
    }
    if container["securityContext"]["allowPrivilegeEscalation"].as_bool() != Some(false) {
        p("securityContext.allowPrivilegeEscalation must be false".into());
    }
    if container["securityContext"]["readOnlyRootFilesystem"].as_bool() != Some(true) {
        p("securityContext.readOnlyRootFilesystem must be true (ferry writes no files)".into());
    }
    for key in ["requests.cpu", "requests.memory", "limits.memory"] {
        let (a, b) = key.split_once('.').expect("dotted");
        if text(&container["resources"][a][b]).is_none() {
            p(format!("resources.{key} must be set"));
        }
    }

    // The metrics Service: Prometheus scrapes every pod on FERRY_PORT.
    let scraped: Vec<&Yaml> = m
        .of_kind("Service")
        .into_iter()
        .filter(|s| s["metadata"]["annotations"]["prometheus.io/scrape"].as_str() == Some("true"))
        .collect();
    if scraped.is_empty() {
        p("no Service annotated prometheus.io/scrape: \"true\"".into());
    }
    for s in scraped {
        let name = s["metadata"]["name"].as_str().unwrap_or_default();
        if !selects(&s["spec"]["selector"], &pod["metadata"]["labels"]) {
            p(format!("Service {name} must select the StatefulSet's pod labels"));
        }
        let port =
            s["spec"]["ports"].as_vec().into_iter().flatten().find(|port| port["name"].as_str() == Some("metrics"));
        let exposed = port.map(|port| {
            let target = if port["targetPort"].is_badvalue() { &port["port"] } else { &port["targetPort"] };
            (port["port"].as_i64(), container_port(container, target))
        });
        let want = Some(i64::from(FERRY_PORT));
        if exposed != Some((want, want)) {
            p(format!(
                "Service {name} must expose a port named metrics, {FERRY_PORT}, to the container's {FERRY_PORT}"
            ));
        }
        let annotated = text(&s["metadata"]["annotations"]["prometheus.io/port"]);
        if annotated.as_ref().is_some_and(|a| *a != FERRY_PORT.to_string()) {
            p(format!("Service {name}: prometheus.io/port {annotated:?}"));
        }
    }
    for pdb in m.of_kind("PodDisruptionBudget") {
        if !selects(&pdb["spec"]["selector"]["matchLabels"], &pod["metadata"]["labels"]) {
            p("the PodDisruptionBudget must select the StatefulSet's pods".into());
        }
    }
    println!("docker/kubernetes/: {} objects; ferry run {}", m.docs.len(), args.join(" "));
    assert!(problems.is_empty(), "docker/kubernetes/:\n  {}", problems.join("\n  "));
}

#[test]
fn kubernetes_flows_pass_ferry_validate_with_the_mounted_secrets_and_never_show_them() {
    let m = Manifests::load();
    let (set, container) = m.ferry();
    let args = Manifests::run_args(container);
    let mounts = Manifests::mounts(set, container);
    let flows_path = flag(&args, "--flows").unwrap_or_default().trim_end_matches('/').to_string();
    let flows_mount = mounts.iter().find(|k| k.path == flows_path).expect("the flows directory is mounted");
    let flow_files = m.volume_files(&flows_mount.volume).expect("the flows volume is a ConfigMap of the manifest");
    // The pod's filesystem under a temp root: /etc/ferry/flows is <root>/etc/ferry/flows, ...
    let tmp = tempfile::tempdir().expect("temp dir");
    let dirs: Vec<PathBuf> = mounts.iter().map(|k| tmp.path().join(k.path.trim_start_matches('/'))).collect();
    let local = |path: &str| -> PathBuf {
        mounts
            .iter()
            .zip(&dirs)
            .find_map(|(k, dir)| path.strip_prefix(&format!("{}/", k.path)).map(|rest| dir.join(rest)))
            .unwrap_or_else(|| PathBuf::from(path))
    };

    // Every file the flows read (`${file:...}` secrets and `*.location` files such as the CA) is a key
    // of a volume the container mounts, and passwords are never literal.
    let mut problems = Vec::new();
    let mut pairs = BTreeSet::new();
    let mut cas = BTreeSet::new();
    for (name, content) in flow_files.iter().filter(|(n, _)| n.ends_with(".toml")) {
        let doc: toml::Table = toml::from_str(content).unwrap_or_else(|e| panic!("ConfigMap file {name}: {e}"));
        for (alias, c) in doc.get("clusters").and_then(|c| c.as_table()).into_iter().flatten() {
            let client = c.get("client").and_then(|c| c.as_table()).cloned().unwrap_or_default();
            for (key, value) in &client {
                let value = value.as_str().unwrap_or_default();
                let mut referenced = Vec::new();
                let mut rest = value;
                while let Some(start) = rest.find("${file:") {
                    let after = &rest[start + "${file:".len()..];
                    let end = after.find('}').unwrap_or(after.len());
                    referenced.push(resolve(Path::new(&flows_path), &after[..end]).display().to_string());
                    rest = &after[end..];
                }
                if key.ends_with(".location") {
                    referenced.push(value.to_string());
                }
                if key == "ssl.ca.location" {
                    cas.insert(value.to_string());
                }
                if key.contains("password") && !value.starts_with("${") {
                    problems.push(format!("{name}: clusters.{alias}.client.{key:?} must be a ${{file:...}} reference"));
                }
                for path in referenced {
                    let found = mounted_at(&mounts, &path)
                        .is_some_and(|(k, f)| m.volume_files(&k.volume).is_some_and(|files| files.contains_key(&f)));
                    if !found {
                        problems.push(format!(
                            "{name}: clusters.{alias}.client.{key:?}: {path} is no key of a mounted volume"
                        ));
                    }
                }
            }
            let protocol = client.get("security.protocol").and_then(|v| v.as_str()).unwrap_or_default();
            let mechanism = client.get("sasl.mechanism").and_then(|v| v.as_str()).unwrap_or_default();
            if !protocol.eq_ignore_ascii_case("sasl_ssl") || mechanism != "SCRAM-SHA-512" {
                problems.push(format!("{name}: clusters.{alias}: SASL_SSL with SCRAM-SHA-512"));
            }
        }
        for f in doc.get("flows").and_then(|f| f.as_array()).into_iter().flatten() {
            pairs.insert(format!(
                "{}->{}",
                f["source"].as_str().unwrap_or_default(),
                f["target"].as_str().unwrap_or_default()
            ));
        }
    }
    let want: BTreeSet<String> = ["east->west", "west->east"].map(String::from).into();
    if pairs != want {
        problems.push(format!("the flows are {pairs:?}, want the active-active pair {want:?}"));
    }
    assert!(problems.is_empty(), "docker/kubernetes/ flows:\n  {}", problems.join("\n  "));

    // The pod's view in the temp dir: every mounted ConfigMap and Secret written out, mount paths in
    // the flow files pointed at it, the placeholder CA replaced by a real one (librdkafka loads it).
    // Absolute mount paths in the flow files, longest first (a nested mount wins), each marked once.
    let mut by_length: Vec<&str> = mounts.iter().map(|k| k.path.as_str()).collect();
    by_length.sort_by_key(|path| std::cmp::Reverse(path.len()));
    let rebase = |mut content: String| {
        for (i, path) in by_length.iter().enumerate() {
            content = content.replace(&format!("{path}/"), &format!("\0{i}\0/"));
        }
        for (i, path) in by_length.iter().enumerate() {
            content = content.replace(&format!("\0{i}\0/"), &format!("{}{path}/", tmp.path().display()));
        }
        content
    };
    let mut secret_values = Vec::new();
    for (k, dir) in mounts.iter().zip(&dirs) {
        std::fs::create_dir_all(dir).expect("mount dir");
        for (name, content) in m.volume_files(&k.volume).unwrap_or_default() {
            if !k.volume["secret"].is_badvalue() && !cas.contains(&format!("{}/{name}", k.path)) {
                secret_values.push(content.trim().to_string());
            }
            let content = if k.path == flows_path { rebase(content) } else { content };
            std::fs::write(dir.join(&name), content).expect("write a mounted file");
        }
    }
    let tls = support::tls::Tls::generate(&tmp.path().join("tls"), &[]);
    for ca in &cas {
        std::fs::copy(tls.ca(), local(ca)).expect("replace the placeholder CA");
    }
    // The container's environment, for `${VAR}` references (from plain values and Secret keys).
    let mut validate = Command::new(ferry_bin());
    for e in container["env"].as_vec().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or_default();
        let key = &e["valueFrom"]["secretKeyRef"];
        if let Some(value) = text(&e["value"]) {
            validate.env(name, value);
        } else if let (Some(secret), Some(k)) = (key["name"].as_str(), key["key"].as_str()) {
            let files = m.object_files("Secret", secret).unwrap_or_default();
            let value =
                files.get(k).unwrap_or_else(|| panic!("env {name}: no key {k} in a Secret {secret} of the manifest"));
            secret_values.push(value.trim().to_string());
            validate.env(name, value);
        }
    }
    let flows_dir = local(&format!("{flows_path}/"));
    let out = validate.arg("validate").arg("--flows").arg(&flows_dir).output().expect("run ferry validate");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("ferry validate on the ConfigMap ferry-flows:\n{output}");
    assert!(out.status.success(), "ferry validate on docker/kubernetes/'s flows failed ({}):\n{output}", out.status);
    assert!(secret_values.len() >= 3, "the passwords and the admin token: {} secret values", secret_values.len());
    for value in secret_values.iter().filter(|v| !v.is_empty()) {
        assert!(!output.contains(value.as_str()), "ferry validate shows a secret value from the manifest:\n{output}");
    }
}
