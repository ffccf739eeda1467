//! ferry's dashboards and alert rules against a live node: a real Prometheus scrapes a ferry node
//! that copies a topic and checkpoints a consumer group between the shared east/west clusters, then
//! every query of every panel of every dashboard under `dashboards/grafana/` must evaluate without
//! error and return at least one series, every template variable must list the live flow, topic and
//! node, and every alert rule of `dashboards/prometheus-rules.yaml` must load and evaluate cleanly.
//!
//! A query that returns nothing is a panel that shows "No data" to an operator of a healthy node:
//! either the dashboard asks for a metric ferry does not export (the failure names it) or the query
//! is wrong. Counters that only exist after their first increment (errors, restarts) are written in
//! the dashboards with an `or on (flow) 0 * ...` fallback, so a healthy node shows 0, not nothing.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::prometheus::{
    Prometheus, dashboards, dashboards_dir, label_values, metric_names, panel_queries, regex_escape, substitute,
    variables,
};
use support::scenario::{FLOW, STARTED, commit_at_end, flow, pair_dir, wait_healthy, wait_showing};
use support::{Ferry, Rec, create_topic, produce, shared_pair, unique};

/// Until the node copies, checkpoints and heartbeats, as seen through Prometheus.
const FLOWING: Duration = Duration::from_secs(180);
/// How long a query that returned nothing is retried before it counts as empty (a series that
/// appears a few scrapes late, e.g. group offset syncs, is not a failure).
const SETTLE: Duration = Duration::from_secs(30);
/// Until every alert rule has been evaluated at least once.
const RULES_EVALUATED: Duration = Duration::from_secs(60);

/// Grafana's built-in interval variables, as a 1-hour dashboard over a 1 s scrape would see them.
const RATE_INTERVAL: &str = "1m";
const INTERVAL: &str = "15s";
const RANGE: &str = "5m";

#[test]
fn every_dashboard_query_and_alert_rule_evaluates_on_a_live_node() {
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("obs");
    let group = unique("obs-group");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
         sync_group_offsets_enabled = true\nsync_group_offsets_interval_seconds = 1\n"
    );
    let flows = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    let mut ferry = Ferry::start(flows.path(), &[]);
    ferry.wait_log("node started", STARTED);
    wait_healthy(&mut ferry, FLOW, STARTED);

    // Load with current timestamps (latency and record age are measured against them), until the end.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (bootstrap, topic, stop) = (east.bootstrap.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64;
                let batch: Vec<Rec> =
                    (n..n + 30).map(|i| Rec::new(i as i32 % 3, format!("obs-{i}").as_bytes(), now)).collect();
                produce(&bootstrap, &topic, &batch);
                n += batch.len();
                std::thread::sleep(Duration::from_millis(200)); // pacing, not synchronisation
            }
        })
    };

    let rules_file = dashboards_dir().join("prometheus-rules.yaml");
    let prometheus = Prometheus::start(&[ferry.listen_addr()], &[&rules_file], "1s");
    let f = format!("flow=\"{FLOW}\"");
    let ready = [
        ("up", "max(up{job=\"ferry\"})".to_string()),
        ("records copied per second", format!("sum(rate(ferry_records_copied_total{{{f}, topic=\"{topic}\"}}[1m]))")),
        ("checkpoints published", format!("sum(ferry_checkpoints_total{{{f}}})")),
        ("heartbeats per second", format!("sum(rate(ferry_heartbeats_total{{{f}}}[1m]))")),
    ];
    // The group keeps consuming (committing at the end of the topic) so that checkpoints keep coming.
    let keep_consuming = || {
        commit_at_end(east, &group, &topic);
    };
    wait_showing(FLOWING, "ferry scraped by Prometheus, copying, checkpointing and heartbeating", || {
        keep_consuming();
        let seen: Vec<(&str, Option<f64>)> = ready.iter().map(|(what, q)| (*what, prometheus.value(q))).collect();
        (seen.iter().all(|(_, v)| v.is_some_and(|v| v > 0.0)), seen)
    });
    let flowing_after = started.elapsed();

    // The values Grafana would put in the dashboards' variables for this flow.
    let live: BTreeMap<&str, String> = BTreeMap::from([
        ("job", "ferry".to_string()),
        ("namespace", Prometheus::NAMESPACE.to_string()),
        ("flow", FLOW.to_string()),
        ("topic", topic.clone()),
        ("instance", ferry.listen_addr().to_string()),
    ]);
    let mut values: BTreeMap<String, String> = live.iter().map(|(k, v)| (k.to_string(), regex_escape(v))).collect();
    values.insert("datasource".into(), "prometheus".into());
    values.insert("__rate_interval".into(), RATE_INTERVAL.into());
    values.insert("__interval".into(), INTERVAL.into());
    values.insert("__range".into(), RANGE.into());

    let mut failures: Vec<String> = Vec::new();
    // Template variables: each query variable lists the live value.
    for (file, dashboard) in dashboards() {
        for var in variables(&dashboard) {
            let Some(query) = var.query.as_deref() else { continue };
            let Some(expected) = live.get(var.name.as_str()) else {
                failures.push(format!("{file}: variable ${} has no live value in this test", var.name));
                continue;
            };
            let listed = substitute(query, &values).map_err(|e| e.to_string()).and_then(|q| {
                let (selector, label) = label_values(&q).ok_or_else(|| format!("not label_values(...): {q}"))?;
                let sets = prometheus.series(&selector, Duration::from_secs(300))?;
                Ok(sets.into_iter().filter_map(|s| s.get(&label).cloned()).collect::<BTreeSet<String>>())
            });
            match listed {
                Err(e) => failures.push(format!("{file}: variable ${} ({query}): {e}", var.name)),
                Ok(listed) if !listed.contains(expected) => failures.push(format!(
                    "{file}: variable ${} ({query}) lists {listed:?}, not {expected:?}{}",
                    var.name,
                    absent_hint(&prometheus, query)
                )),
                Ok(_) => {}
            }
        }
    }

    // Every panel query.
    struct Query {
        label: String,
        expr: String,
        result: Result<usize, String>,
    }
    let mut queries: Vec<Query> = Vec::new();
    for (file, dashboard) in dashboards() {
        for q in panel_queries(&dashboard) {
            let label = format!("{file} panel {} \"{}\" {}", q.panel_id, q.panel, q.ref_id);
            let (expr, result) = match substitute(&q.expr, &values) {
                _ if q.expr.trim().is_empty() => (q.expr.clone(), Err("no expr".to_string())),
                Ok(expr) => {
                    let result = prometheus.query(&expr).map(|s| s.len());
                    (expr, result)
                }
                Err(e) => (q.expr.clone(), Err(e)),
            };
            queries.push(Query { label, expr, result });
        }
    }
    // Annotation queries (reloads, actor restarts): they must evaluate; an empty answer is a quiet node.
    for (file, dashboard) in dashboards() {
        for a in dashboard["annotations"]["list"].as_array().into_iter().flatten() {
            let Some(expr) = a["expr"].as_str() else { continue };
            let name = a["name"].as_str().unwrap_or_default();
            if let Err(e) = substitute(expr, &values).and_then(|q| prometheus.query(&q)) {
                failures.push(format!("{file} annotation {name:?}: error: {e}\n      {expr}"));
            }
        }
    }
    // Re-evaluate the empty ones for a while: some series appear only after a few scrapes.
    let deadline = Instant::now() + SETTLE;
    while queries.iter().any(|q| q.result == Ok(0)) && Instant::now() < deadline {
        keep_consuming();
        for q in queries.iter_mut().filter(|q| q.result == Ok(0)) {
            q.result = prometheus.query(&q.expr).map(|s| s.len());
        }
        std::thread::sleep(Duration::from_secs(1)); // one scrape interval between rounds
    }
    let with_data = queries.iter().filter(|q| matches!(q.result, Ok(n) if n > 0)).count();
    eprintln!(
        "observability: {} dashboard queries evaluated, {with_data} returned data, {} returned no series, {} failed \
         (data flowing after {flowing_after:.1?})",
        queries.len(),
        queries.iter().filter(|q| q.result == Ok(0)).count(),
        queries.iter().filter(|q| q.result.is_err()).count(),
    );
    for q in &queries {
        match &q.result {
            Ok(0) => {
                failures.push(format!("{}: no series{}\n      {}", q.label, absent_hint(&prometheus, &q.expr), q.expr))
            }
            Err(e) => failures.push(format!("{}: error: {e}\n      {}", q.label, q.expr)),
            Ok(_) => {}
        }
    }

    // Alert rules: all of the file's alerts loaded, each evaluated without error.
    let expected_alerts = alert_names(&std::fs::read_to_string(&rules_file).expect("read rules file"));
    let rules = wait_showing(RULES_EVALUATED, "every alert rule evaluated once", || {
        let rules = rule_health(&prometheus);
        (rules.len() >= expected_alerts.len() && rules.values().all(|(h, _)| h != "unknown"), rules)
    });
    let loaded: BTreeSet<String> = rules.keys().cloned().collect();
    if loaded != expected_alerts {
        failures.push(format!("rules loaded {loaded:?}, the file defines {expected_alerts:?}"));
    }
    for (name, (health, error)) in &rules {
        if health != "ok" {
            failures.push(format!("rule {name}: health {health}: {error}"));
        }
    }
    let firing = prometheus.get("/api/v1/alerts").map(|d| d["alerts"].clone()).unwrap_or_default();
    eprintln!("observability: {} alert rules loaded and evaluated; active alerts: {firing}", rules.len());

    stop.store(true, Ordering::SeqCst);
    load.join().expect("load thread");
    ferry.terminate(Duration::from_secs(30));
    eprintln!("observability: test took {:.1?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} problems with the dashboards or rules:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// " (metrics with no series: a, b)" for the metrics `expr` reads that Prometheus has never seen.
fn absent_hint(prometheus: &Prometheus, expr: &str) -> String {
    let absent: Vec<String> = metric_names(expr)
        .into_iter()
        .filter(|m| prometheus.series(m, Duration::from_secs(600)).map(|s| s.is_empty()).unwrap_or(true))
        .collect();
    if absent.is_empty() { String::new() } else { format!(" (metrics with no series: {})", absent.join(", ")) }
}

/// Alert names of a rule file.
fn alert_names(rules_yaml: &str) -> BTreeSet<String> {
    let docs = yaml_rust2::YamlLoader::load_from_str(rules_yaml).expect("rules file is YAML");
    let mut names = BTreeSet::new();
    for group in docs[0]["groups"].as_vec().into_iter().flatten() {
        for rule in group["rules"].as_vec().into_iter().flatten() {
            if let Some(name) = rule["alert"].as_str() {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Every rule Prometheus loaded: name -> (health, last error).
fn rule_health(prometheus: &Prometheus) -> BTreeMap<String, (String, String)> {
    let data = prometheus.get("/api/v1/rules").unwrap_or_else(|e| panic!("/api/v1/rules: {e}"));
    let mut out = BTreeMap::new();
    for group in data["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            out.insert(
                rule["name"].as_str().unwrap_or_default().to_string(),
                (
                    rule["health"].as_str().unwrap_or_default().to_string(),
                    rule["lastError"].as_str().unwrap_or_default().to_string(),
                ),
            );
        }
    }
    out
}
