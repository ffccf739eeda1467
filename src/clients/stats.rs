//! librdkafka's statistics of the shared clients as metrics, labelled by cluster and client (never by
//! flow: the clients are the connection's): broker round trip and throttle time, request queue and
//! in-flight depth, transmit errors, and the producers' batch sizes. Operators know these series from
//! Strimzi's Kafka client dashboards; they say whether a slow flow waits on its brokers or on ferry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;

use crate::config::secrets;
use crate::kafka;
use crate::metrics::METRICS;

/// The same client error is logged at most once per this window.
const ERROR_LOG_WINDOW: Duration = Duration::from_secs(30);

/// How often librdkafka reports statistics (each report is one JSON document per client).
pub const STATS_INTERVAL_MS: &str = "15000";

/// Turn statistics on for a client built from `cfg`.
pub fn enable(cfg: &mut ClientConfig) {
    cfg.set("statistics.interval.ms", STATS_INTERVAL_MS);
}

/// The context of a shared client: errors logged scrubbed (and fed to the connection diagnosis, as
/// rdkafka's default context would log them), statistics exported.
pub struct StatsContext {
    cluster: String,
    client: &'static str,
    /// Transmit errors last reported per broker: librdkafka counts from the client's start.
    tx_errors: Mutex<HashMap<String, u64>>,
    /// The last error logged, when, and how often it came again since.
    last_error: Mutex<Option<(String, Instant, u64)>>,
}

impl StatsContext {
    pub fn new(cluster: &str, client: &'static str) -> Self {
        Self { cluster: cluster.to_string(), client, tx_errors: Mutex::default(), last_error: Mutex::default() }
    }

    fn labels<'a>(&'a self, broker: &'a str) -> [&'a str; 3] {
        [&self.cluster, self.client, broker]
    }
}

impl ClientContext for StatsContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        // Logged as rdkafka's default context does (target `librdkafka`), so the node's log layer hands
        // warnings to the connection diagnosis (`kafka::note_client_log`).
        let line = secrets::scrub(line);
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", cluster = %self.cluster, client = self.client, "librdkafka: {fac} {line}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", cluster = %self.cluster, client = self.client, "librdkafka: {fac} {line}")
            }
            _ => {
                tracing::debug!(target: "librdkafka", cluster = %self.cluster, client = self.client, "librdkafka: {fac} {line}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if kafka::is_unused_group_refusal(&error) {
            return; // metadata consumers are never assigned: their group is never used
        }
        // librdkafka repeats an error at every reconnect attempt (several a second while a cluster is
        // away): the same text is logged once per window, with how often it came meanwhile.
        let text = error.to_string();
        let repeats = {
            let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
            match last.as_mut() {
                Some((t, at, n)) if *t == text && at.elapsed() < ERROR_LOG_WINDOW => {
                    *n += 1;
                    return;
                }
                _ => {
                    let repeats = last.as_ref().map_or(0, |(_, _, n)| *n);
                    *last = Some((text.clone(), Instant::now(), 0));
                    repeats
                }
            }
        };
        let (error, reason) = (secrets::scrub(&text), secrets::scrub(reason));
        tracing::warn!(cluster = %self.cluster, client = self.client, error, reason, repeats, "client error");
    }

    fn stats(&self, s: Statistics) {
        let m = &*METRICS;
        let mut tx_errors = self.tx_errors.lock().unwrap_or_else(|p| p.into_inner());
        for b in s.brokers.values().filter(|b| b.nodeid >= 0) {
            let labels = self.labels(&b.nodename);
            if let Some(rtt) = &b.rtt {
                m.client_broker_rtt.with_label_values(&labels).set(rtt.avg as f64 / 1e6);
            }
            if let Some(throttle) = &b.throttle {
                m.client_broker_throttle.with_label_values(&labels).set(throttle.avg as f64 / 1e3);
            }
            m.client_broker_requests_queued.with_label_values(&labels).set(b.outbuf_cnt);
            m.client_broker_requests_in_flight.with_label_values(&labels).set(b.waitresp_cnt);
            let last = tx_errors.entry(b.nodename.clone()).or_insert(0);
            m.client_broker_tx_errors.with_label_values(&labels).inc_by(b.txerrs.saturating_sub(*last));
            *last = b.txerrs;
        }
        // Producers only: the average batch over the window, weighted by each topic's batch count.
        let (bytes, records, batches) = s.topics.values().fold((0i64, 0i64, 0i64), |(b, r, n), t| {
            (b + t.batchsize.avg * t.batchsize.cnt, r + t.batchcnt.avg * t.batchcnt.cnt, n + t.batchsize.cnt)
        });
        if batches > 0 {
            let labels = [self.cluster.as_str(), self.client];
            m.client_batch_bytes.with_label_values(&labels).set(bytes / batches);
            m.client_batch_records.with_label_values(&labels).set(records / batches);
        }
    }
}

impl ConsumerContext for StatsContext {}

impl Drop for StatsContext {
    /// The client is gone: so are its series.
    fn drop(&mut self) {
        let m = &*METRICS;
        let brokers = self.tx_errors.lock().unwrap_or_else(|p| p.into_inner());
        for broker in brokers.keys() {
            let labels = self.labels(broker);
            let _ = m.client_broker_rtt.remove_label_values(&labels);
            let _ = m.client_broker_throttle.remove_label_values(&labels);
            let _ = m.client_broker_requests_queued.remove_label_values(&labels);
            let _ = m.client_broker_requests_in_flight.remove_label_values(&labels);
            let _ = m.client_broker_tx_errors.remove_label_values(&labels);
        }
        let labels = [self.cluster.as_str(), self.client];
        let _ = m.client_batch_bytes.remove_label_values(&labels);
        let _ = m.client_batch_records.remove_label_values(&labels);
    }
}
