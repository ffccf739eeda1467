//! Errors of Kafka operations as an operator reads them: the cluster and the operation named, refusals
//! of this principal by the broker's name, no configuration value ever quoted.

use super::diagnosis::connection_problem;
use super::*;

/// A failed Kafka operation, naming the cluster and what was being done.
///
/// Its text never carries a configuration value: librdkafka quotes the value of a property it refuses
/// ("Invalid value \"...\" for configuration property ..."), so such errors are rebuilt from the
/// property's name ([`KafkaOpError::kafka`]), and everything else is scrubbed of known secrets when
/// shown. It deliberately reports no `source()`: an error chain printer would show librdkafka's raw text.
#[derive(Debug)]
pub enum KafkaOpError {
    Kafka {
        cluster: String,
        op: String,
        source: Box<KafkaError>,
        /// Why the cluster is not answering, when librdkafka said so recently (see [`note_client_log`]):
        /// a timeout alone does not tell an operator that the password is wrong.
        cause: Option<String>,
    },
    Other {
        cluster: String,
        op: String,
        reason: String,
    },
    /// The cluster refused this principal an operation on a resource: the text names both and the grant
    /// that fixes it ([`not_authorized`]).
    NotAuthorized(String),
}

impl std::fmt::Display for KafkaOpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kafka { cluster, op, source, cause } => {
                write!(f, "cluster `{cluster}`: {op}: {}", secrets::scrub(&source.to_string()))?;
                match cause {
                    Some(cause) => write!(f, " (last connection error: {})", secrets::scrub(cause)),
                    None => Ok(()),
                }
            }
            Self::Other { cluster, op, reason } => write!(f, "cluster `{cluster}`: {op}: {}", secrets::scrub(reason)),
            Self::NotAuthorized(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for KafkaOpError {}

impl KafkaOpError {
    pub fn kafka(cluster: &str, op: impl Into<String>, source: KafkaError) -> Self {
        let (cluster, op) = (cluster.to_string(), op.into());
        match &source {
            // The one variant whose text is built around the value: keep only the property's name.
            KafkaError::ClientConfig(result, desc, key, value) => {
                Self::Other { cluster, op, reason: property_refusal(*result, key, desc, value) }
            }
            _ => {
                let cause = is_unanswered(&source).then(|| connection_problem(&cluster)).flatten();
                Self::Kafka { cluster, op, source: Box::new(source), cause }
            }
        }
    }
}

/// Errors that mean "the cluster did not answer", whose real cause librdkafka reports elsewhere.
fn is_unanswered(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    let code = match e {
        KafkaError::Global(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    matches!(
        code,
        Some(
            C::OperationTimedOut
                | C::RequestTimedOut
                | C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::Authentication
                | C::SSL
                | C::MessageTimedOut
        )
    )
}

/// The broker's name of an authorization error (`TOPIC_AUTHORIZATION_FAILED`, ...), `None` for any
/// other error.
pub fn authorization_code(code: RDKafkaErrorCode) -> Option<&'static str> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
        C::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
        C::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
        C::TransactionalIdAuthorizationFailed => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        _ => return None,
    })
}

/// [`authorization_code`] of a client error.
pub fn authorization_error(e: &KafkaError) -> Option<&'static str> {
    let code = match e {
        KafkaError::Global(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    code.and_then(authorization_code)
}

/// What an operator reads when `cluster` refuses this principal `operation` (`Read`, `Write`, ...) on
/// `resource` (e.g. "offset-syncs topic mm2-offset-syncs.west.internal"): the resource, the right it
/// lacks, the broker's code and the grant that fixes it (operations as `kafka-acls --operation` names
/// them).
pub fn not_authorized(resource: &str, cluster: &str, operation: &str, code: &str) -> String {
    format!("{resource} on `{cluster}`: {}", refusal(operation, code))
}

/// The part of [`not_authorized`] after the resource.
pub fn refusal(operation: &str, code: &str) -> String {
    format!("not authorized to {operation} ({code}); grant {operation} on it to this principal")
}

/// A refusal of this principal that repeats while it lasts (librdkafka retries the request behind it, e.g.
/// joining a group it may not use): kept with when it was last seen, so that it is reported while it
/// lasts and logged once.
#[derive(Default)]
pub struct Refusal(Mutex<Option<(std::time::Instant, String)>>);

impl Refusal {
    /// Records `reason`; true when it is new (not the refusal already recorded).
    pub fn seen(&self, reason: String) -> bool {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let new = slot.as_ref().is_none_or(|(_, r)| *r != reason);
        *slot = Some((std::time::Instant::now(), reason));
        new
    }

    /// The refusal, if it was seen within `window`.
    pub fn current(&self, window: Duration) -> Option<String> {
        let slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().filter(|(at, _)| at.elapsed() <= window).map(|(_, r)| r.clone())
    }

    /// Forgets it (the refused request succeeded). True if there was one.
    pub fn clear(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }
}

/// A per-topic refusal of an admin call: [`refusal`] when the broker refused the principal `operation`,
/// else `what` and the code.
pub(super) fn topic_refusal(code: RDKafkaErrorCode, operation: &str, what: &str) -> String {
    match authorization_code(code) {
        Some(name) => refusal(operation, name),
        None => format!("{what}: {code}"),
    }
}

/// Errors a freshly created or re-electing partition gives for a short while.
pub fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::UnknownTopicOrPartition
                | C::UnknownPartition
                | C::OperationTimedOut
                | C::RequestTimedOut
        )
    )
}

/// Producer context for small control producers (checkpoints, heartbeats): remembers the first
/// delivery error until the caller, after a flush, takes it.
#[derive(Default)]
pub struct ErrorCapture {
    error: Mutex<Option<Captured>>,
}

/// A delivery error kept by [`ErrorCapture`].
#[derive(Debug)]
pub struct Captured {
    pub text: String,
    /// The broker's code when it refused this principal ([`authorization_code`]).
    pub refused: Option<&'static str>,
}

impl std::fmt::Display for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl ErrorCapture {
    pub fn take(&self) -> Option<Captured> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for ErrorCapture {}

impl ProducerContext for ErrorCapture {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| Captured { text: e.to_string(), refused: authorization_error(e) });
        }
    }
}
