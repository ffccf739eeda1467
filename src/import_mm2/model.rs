//! MM2's configuration in one shape, whichever way it was written (`mm2.properties` or a Strimzi
//! resource): clusters with their Java client properties, flows with their connector properties. Every
//! value remembers the key it was written under, so that the report names what the operator wrote.

use std::collections::BTreeMap;

/// A value and where it was written (`east->west.topics`, `spec.mirrors[0].topicsPattern`).
#[derive(Clone, Debug, PartialEq)]
pub struct Prop {
    pub value: String,
    pub origin: String,
}

impl Prop {
    pub fn new(value: impl Into<String>, origin: impl Into<String>) -> Self {
        Self { value: value.into(), origin: origin.into() }
    }
}

/// How a cluster's client authenticates, from Strimzi's `authentication` (dedicated mode writes Java
/// properties instead, in `client`).
#[derive(Clone, Debug, PartialEq)]
pub enum Login {
    /// SASL PLAIN or SCRAM: the username, and a `${file:}` or `${VAR}` reference to the password.
    Sasl { mechanism: String, username: String, password: String, origin: String },
}

#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub alias: String,
    pub bootstrap: Option<Prop>,
    /// Java client properties (`security.protocol`, `ssl.*`, `sasl.*`, ...), mapped or reported later.
    pub client: BTreeMap<String, Prop>,
    /// librdkafka properties already decided (Strimzi's `tls` and `authentication`).
    pub librdkafka: BTreeMap<String, Prop>,
    pub login: Option<Login>,
}

#[derive(Clone, Debug, Default)]
pub struct Flow {
    pub source: String,
    pub target: String,
    /// Connector properties (`topics`, `emit.checkpoints.interval.seconds`, `tasks.max`, ...).
    pub props: BTreeMap<String, Prop>,
    /// Where the MM2 this replaces kept its copy progress, and under which connector name.
    pub offsets_topic: Option<Prop>,
    pub source_connector: Option<Prop>,
}

/// A key the import did not carry over, and why.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Unmapped {
    pub key: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Mm2Config {
    pub clusters: Vec<Cluster>,
    pub flows: Vec<Flow>,
    /// Keys already known to have no ferry equivalent (Kubernetes settings, MM2's driver settings).
    pub unmapped: Vec<Unmapped>,
}

impl Mm2Config {
    pub fn skip(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.unmapped.push(Unmapped { key: key.into(), reason: reason.into() });
    }
}
