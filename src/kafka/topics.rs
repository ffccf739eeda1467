//! Topic admin operations: create (one or many, cut below the controller's limit), grow, describe
//! configs, and "ensure" for ferry's internal topics.

use super::errors::topic_refusal;
use super::*;

/// Topic name → partition count, for every topic the cluster reports (blocking; call off the actor thread).
pub fn topic_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cluster: &str,
) -> Result<HashMap<String, i32>, KafkaOpError> {
    // A consumer used only for metadata is never polled otherwise: serve its queued events (errors
    // and logs librdkafka queues while a cluster is away) so they do not pile up.
    let _ = consumer.poll(Duration::ZERO);
    let md: Metadata =
        consumer.fetch_metadata(None, ADMIN_TIMEOUT).map_err(|e| KafkaOpError::kafka(cluster, "fetch metadata", e))?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect())
}

/// What a topic should look like when ferry creates it.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// `None`: the cluster's default replication factor.
    pub replication_factor: Option<i32>,
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    /// A compacted, single-partition topic as MM2 makes its internal topics.
    pub fn compacted(name: impl Into<String>, partitions: i32, replication_factor: Option<i32>) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication_factor,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        }
    }
}

/// Create `spec` unless it exists. Returns true when this call created it.
pub async fn create_topic(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    spec: &TopicSpec,
) -> Result<bool, KafkaOpError> {
    let mut topic =
        NewTopic::new(&spec.name, spec.partitions, TopicReplication::Fixed(spec.replication_factor.unwrap_or(-1)));
    for (k, v) in &spec.configs {
        topic = topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .create_topics([&topic], &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, format!("create topic {}", spec.name), e))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((_, code))) if authorization_code(code).is_some() => Err(KafkaOpError::NotAuthorized(not_authorized(
            &format!("topic {}", spec.name),
            cluster,
            "Create",
            authorization_code(code).unwrap_or(""),
        ))),
        Some(Err((_, code))) => Err(KafkaOpError::Other {
            cluster: cluster.to_string(),
            op: format!("create topic {}", spec.name),
            reason: code.to_string(),
        }),
        None => Ok(false),
    }
}

/// What a validate-only CreateTopics answers for each of `specs` (the broker checks the rights and the
/// request and creates nothing): `Err((code, message))` with the broker's code name, e.g.
/// `TOPIC_AUTHORIZATION_FAILED`. An empty `specs` asks nothing.
pub async fn validate_create_topics(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    specs: &[TopicSpec],
    timeout: Duration,
) -> Result<HashMap<String, Result<(), (String, String)>>, KafkaOpError> {
    if specs.is_empty() {
        return Ok(HashMap::new());
    }
    let topics: Vec<NewTopic<'_>> = specs
        .iter()
        .map(|s| NewTopic::new(&s.name, s.partitions, TopicReplication::Fixed(s.replication_factor.unwrap_or(-1))))
        .collect();
    let opts = AdminOptions::new().validate_only(true).operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    let results = admin
        .create_topics(&topics, &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, "validate-only create topics", e))?;
    Ok(results
        .into_iter()
        .map(|r| match r {
            Ok(name) => (name, Ok(())),
            Err((name, code)) => {
                let code_name = authorization_code(code).map_or_else(|| format!("{code:?}"), str::to_string);
                (name, Err((code_name, code.to_string())))
            }
        })
        .collect())
}

/// Create `spec` on `cluster` unless it exists, and wait until it shows in metadata. Returns the topic's
/// actual partition count. Blocking: for worker threads.
pub fn ensure_topic<A: ClientContext + 'static>(
    admin: &AdminClient<A>,
    cluster: &str,
    flow: &impl fmt::Display,
    spec: &TopicSpec,
) -> Result<i32, KafkaOpError> {
    // A principal without CREATE can use a topic an operator created beforehand: the refusal counts
    // only if the topic does not show up below.
    let mut refused = None;
    let timed_out =
        |op: String| KafkaOpError::kafka(cluster, op, KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut));
    let created = block_on(cluster, within(ADMIN_TIMEOUT + ADMIN_GRACE, create_topic(admin, cluster, spec)))?
        .unwrap_or_else(|| Err(timed_out(format!("create topic {}", spec.name))));
    match created {
        Ok(true) => tracing::info!(flow = %flow, cluster = %cluster, topic = %spec.name, "created topic"),
        Ok(false) => {}
        Err(e @ KafkaOpError::NotAuthorized(_)) => refused = Some(e),
        Err(e) => return Err(e),
    }
    // Asked with DescribeTopics, not metadata: a long-lived client's metadata request for one topic
    // kept answering "unknown" for a topic created meanwhile (seen for 30 s on a shared client).
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    let names = [spec.name.clone()];
    loop {
        let describe = crate::raw_admin::describe_topics(admin, &names, ADMIN_TIMEOUT);
        let described = block_on(cluster, within(ADMIN_TIMEOUT + ADMIN_GRACE, describe))?
            .ok_or_else(|| timed_out(format!("describe {}", spec.name)))?
            .map_err(|e| KafkaOpError::Other {
                cluster: cluster.to_string(),
                op: format!("describe {}", spec.name),
                reason: e.to_string(),
            })?;
        let partitions = described.first().filter(|t| t.error.is_none()).map_or(0, |t| t.partitions);
        if partitions > 0 {
            return Ok(partitions);
        }
        if let Some(e) = refused {
            return Err(e);
        }
        if std::time::Instant::now() > deadline {
            return Err(KafkaOpError::Other {
                cluster: cluster.to_string(),
                op: format!("create {}", spec.name),
                reason: "the topic did not appear in metadata".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The outcome of one topic in a batched admin call: `Err` carries the reason.
pub type PerTopic<T> = Result<T, String>;

/// Metadata records a KRaft controller accepts in one user operation (`MAX_RECORDS_PER_USER_OP`): a
/// CreateTopics or CreatePartitions request beyond it is refused for every topic in it ("Excessively
/// large number of partitions per request"). Requests are cut well below it.
const RECORDS_PER_REQUEST: usize = 8_000;

/// `items` cut into consecutive runs whose weights add up to at most `limit` (an item heavier than the
/// limit goes alone: the cluster decides about it).
fn chunks<T>(items: &[T], limit: usize, weight: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let w = weight(item);
        if i > start && sum + w > limit {
            out.push(&items[start..i]);
            (start, sum) = (i, 0);
        }
        sum += w;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// Create every spec that does not exist yet, in as few requests as the controller accepts. Per topic:
/// `Ok(true)` created, `Ok(false)` already there, `Err(reason)`. Only a failure of a whole call is an
/// `Err`.
pub async fn create_topics(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    specs: &[TopicSpec],
) -> Result<HashMap<String, PerTopic<bool>>, KafkaOpError> {
    let mut out = HashMap::new();
    // A topic costs a record, one per partition and one per config.
    let weight = |s: &TopicSpec| 1 + s.partitions.max(0) as usize + s.configs.len();
    for chunk in chunks(specs, RECORDS_PER_REQUEST, weight) {
        let topics: Vec<NewTopic<'_>> = chunk
            .iter()
            .map(|spec| {
                let mut t = NewTopic::new(
                    &spec.name,
                    spec.partitions,
                    TopicReplication::Fixed(spec.replication_factor.unwrap_or(-1)),
                );
                for (k, v) in &spec.configs {
                    t = t.set(k, v);
                }
                t
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        let results =
            admin.create_topics(&topics, &opts).await.map_err(|e| KafkaOpError::kafka(cluster, "create topics", e))?;
        out.extend(results.into_iter().map(|r| match r {
            Ok(name) => (name, Ok(true)),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => (name, Ok(false)),
            Err((name, code)) => (name, Err(topic_refusal(code, "Create", "create refused"))),
        }));
    }
    Ok(out)
}

/// Grow each `(topic, partitions)`, in as few requests as the controller accepts; per-topic outcomes (never shrinks: Kafka cannot).
pub async fn grow_topics(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    grow: &[(String, i32)],
) -> Result<HashMap<String, PerTopic<()>>, KafkaOpError> {
    let mut out = HashMap::new();
    // At most one record per partition added; the new total bounds it.
    for chunk in chunks(grow, RECORDS_PER_REQUEST, |(_, n)| (*n).max(0) as usize) {
        let parts: Vec<NewPartitions<'_>> = chunk.iter().map(|(t, n)| NewPartitions::new(t, *n as usize)).collect();
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        let results = admin
            .create_partitions(&parts, &opts)
            .await
            .map_err(|e| KafkaOpError::kafka(cluster, "add partitions", e))?;
        out.extend(results.into_iter().map(|r| match r {
            Ok(name) | Err((name, RDKafkaErrorCode::InvalidPartitions)) => (name, Ok(())),
            Err((name, code)) => (name, Err(topic_refusal(code, "Alter", "adding partitions refused"))),
        }));
    }
    Ok(out)
}

/// The described configs of each of `topics`, in one request; per-topic outcomes.
pub async fn describe_topics_configs(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    topics: &[String],
) -> Result<HashMap<String, PerTopic<Vec<ConfigEntry>>>, KafkaOpError> {
    if topics.is_empty() {
        return Ok(HashMap::new());
    }
    let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .describe_configs(&specs, &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, "describe topic configs", e))?;
    // Results come in request order.
    Ok(topics
        .iter()
        .zip(results)
        .map(|(t, r)| {
            let r = r
                .map(|resource| resource.entries.into_iter().map(config_entry).collect())
                .map_err(|code| topic_refusal(code, "DescribeConfigs", "describe configs refused"));
            (t.clone(), r)
        })
        .collect())
}

fn config_entry(e: rdkafka::admin::ConfigEntry) -> ConfigEntry {
    ConfigEntry {
        topic_override: matches!(e.source, ConfigSource::DynamicTopic),
        name: e.name,
        value: e.value,
        read_only: e.is_read_only,
        sensitive: e.is_sensitive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_never_answers_is_given_up_at_the_deadline() {
        let start = std::time::Instant::now();
        let gave_up = block_on("c", within(Duration::from_millis(50), std::future::pending::<()>())).unwrap();
        assert_eq!(gave_up, None);
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        assert_eq!(block_on("c", within(Duration::from_secs(5), async { 7 })).unwrap(), Some(7));
    }

    #[test]
    fn requests_are_cut_below_the_controller_limit() {
        let weights = [3_000usize, 3_000, 3_000, 9_000, 1, 1];
        let cut: Vec<Vec<usize>> = chunks(&weights, 8_000, |w| *w).into_iter().map(<[usize]>::to_vec).collect();
        // In order, nothing lost; an item over the limit goes alone.
        assert_eq!(cut, vec![vec![3_000, 3_000], vec![3_000], vec![9_000], vec![1, 1]]);
        assert!(chunks(&[] as &[usize], 8_000, |w| *w).is_empty());
        // Ten topics of 1,000 partitions (the bench's 10,000): two requests.
        assert_eq!(chunks(&[1_001usize; 10], RECORDS_PER_REQUEST, |w| *w).len(), 2);
    }
}
