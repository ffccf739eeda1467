//! Topics and the cluster: incremental topic config changes, describing topics (with their ids and
//! authorized operations) and the cluster.

use std::ffi::c_char;
use std::ptr;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::ffi::*;
use super::types::*;

/// Sets or deletes topic-level config overrides of `topic` with IncrementalAlterConfigs (KIP-339),
/// leaving all other overrides alone. Any error, including the topic's own (`UNKNOWN_TOPIC_OR_PART`,
/// `INVALID_CONFIG`, ...), is an `Err`. An empty `ops` does nothing.
pub async fn incremental_alter_topic_configs<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    topic: &str,
    ops: &[(String, ConfigOp)],
    timeout: Duration,
) -> Result<(), AdminError> {
    const OP: &str = "IncrementalAlterConfigs";
    if ops.is_empty() {
        return Ok(());
    }
    let topic_c = c_string(OP, "topic name", topic)?;
    let ops_c = ops
        .iter()
        .map(|(key, op)| {
            let key_c = c_string(OP, "config name", key)?;
            let value_c = match op {
                ConfigOp::Set(v) => Some(c_string(OP, "config value", v)?),
                ConfigOp::Delete => None,
            };
            Ok((key_c, value_c))
        })
        .collect::<Result<Vec<_>, AdminError>>()?;
    let topic = topic.to_string();
    run(admin, OP, move |rk, cancel| {
        // SAFETY: `rk` is the live handle (see `run`); the names are valid C strings that outlive the
        // call (librdkafka copies them).
        let resource = unsafe {
            ConfigResource::new(rd::rd_kafka_ConfigResource_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                topic_c.as_ptr(),
            ))
        }
        .ok_or_else(|| {
            AdminError::about(
                OP,
                ERR_FAIL,
                &format!("topic {topic}"),
                Some("could not create the config resource".into()),
            )
        })?;
        for (key, value) in &ops_c {
            let op_type = match value {
                Some(_) => rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
                None => rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
            };
            let value_ptr = value.as_ref().map_or(ptr::null(), |v| v.as_ptr());
            // SAFETY: `resource` is valid; key and value are valid C strings (value NULL for DELETE,
            // which librdkafka expects) and are copied. A returned error object is ours to destroy.
            let err = ErrorObject(unsafe {
                rd::rd_kafka_ConfigResource_add_incremental_config(resource.0, key.as_ptr(), op_type, value_ptr)
            });
            // SAFETY: NULL or a valid error object, owned by `err` until it is dropped below.
            if let Some(e) = unsafe { AdminError::from_error_object(OP, err.0) } {
                return Err(AdminError { message: format!("topic {topic}: {}", e.message), ..e });
            }
        }
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut resources = [resource.0];
        // SAFETY: all pointers are valid; librdkafka copies the resources and takes nothing over,
        // so `resource` stays ours to destroy.
        unsafe { rd::rd_kafka_IncrementalAlterConfigs(rk.0, resources.as_mut_ptr(), 1, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_INCREMENTALALTERCONFIGS_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is an IncrementalAlterConfigs result (type checked by `wait`); the array
        // and its resources belong to the event, which outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event.0);
            let mut cnt = 0usize;
            let resources = rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut cnt);
            for &res in array(resources, cnt) {
                let code = rd_kafka_ConfigResource_error(res);
                if code != 0 {
                    let msg = cstring(rd::rd_kafka_ConfigResource_error_string(res));
                    return Err(AdminError::about(OP, code, &format!("topic {topic}"), Some(msg)));
                }
            }
        }
        Ok(())
    })
    .await
}

/// Describes `topics` (DescribeTopics): their ids, partition counts and what the caller may do with
/// them. Per-topic failures are in [`TopicDescription::error`]; only a failure of the whole call is an
/// `Err`. An empty list answers nothing without asking the cluster.
pub async fn describe_topics<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<TopicDescription>, AdminError> {
    const OP: &str = "DescribeTopics";
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let names = topics.iter().map(|t| c_string(OP, "topic", t)).collect::<Result<Vec<_>, _>>()?;
    run(admin, OP, move |rk, cancel| {
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        options.include_authorized_operations(OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        // SAFETY: `ptrs` holds valid C strings, which librdkafka copies into the collection.
        let collection =
            TopicCollection(unsafe { rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len()) });
        if collection.0.is_null() {
            return Err(AdminError::from_code(OP, ERR_INVALID_ARG, Some("could not build the topic list".into())));
        }
        // SAFETY: valid handle, collection, options and queue; librdkafka copies the collection.
        unsafe { rd::rd_kafka_DescribeTopics(rk.0, collection.0, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_DESCRIBETOPICS_RESULT, timeout, cancel, OP)?;
        let mut out = Vec::with_capacity(ptrs.len());
        // SAFETY: `event` is a DescribeTopics result; the array, descriptions, ids and error objects
        // belong to it and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_DescribeTopics_result(event.0);
            let mut cnt = 0usize;
            let descs = rd::rd_kafka_DescribeTopics_result_topics(result, &mut cnt);
            for &d in array(descs, cnt) {
                let name = cstring(rd::rd_kafka_TopicDescription_name(d));
                let error = AdminError::from_error_object(OP, rd::rd_kafka_TopicDescription_error(d))
                    .map(|e| AdminError { message: format!("topic {name}: {}", e.message), ..e });
                let mut parts = 0usize;
                rd::rd_kafka_TopicDescription_partitions(d, &mut parts);
                let uuid = rd::rd_kafka_TopicDescription_topic_id(d);
                let id = (!uuid.is_null() && error.is_none())
                    .then(|| {
                        topic_id_text(
                            rd::rd_kafka_Uuid_most_significant_bits(uuid),
                            rd::rd_kafka_Uuid_least_significant_bits(uuid),
                        )
                    })
                    .flatten();
                let mut ops_cnt = 0usize;
                let ops = rd_kafka_TopicDescription_authorized_operations(d, &mut ops_cnt);
                let authorized_operations = operations(ops, ops_cnt);
                out.push(TopicDescription { name, id, partitions: parts as i32, error, authorized_operations });
            }
        }
        Ok(out)
    })
    .await
}

/// Describes the cluster (DescribeCluster, KIP-700): its id, its brokers and what the caller may do
/// with it. A cluster that does not answer within `timeout` is an `Err` (`_TIMED_OUT`).
pub async fn describe_cluster<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<ClusterDescription, AdminError> {
    describe_cluster_asking(admin, timeout, true).await
}

/// [`describe_cluster`] without asking what the caller may do (`authorized_operations` stays empty):
/// librdkafka sends it as a Metadata request for no topics, which the broker answers without consulting
/// its authorizer, so a principal with no rights on the cluster leaves no denial in the broker's log.
pub async fn describe_cluster_plain<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<ClusterDescription, AdminError> {
    describe_cluster_asking(admin, timeout, false).await
}

async fn describe_cluster_asking<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
    ask_operations: bool,
) -> Result<ClusterDescription, AdminError> {
    const OP: &str = "DescribeCluster";
    run(admin, OP, move |rk, cancel| {
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER, OP)?;
        options.set_request_timeout(timeout, OP)?;
        if ask_operations {
            options.include_authorized_operations(OP)?;
        }
        let queue = Queue::new(rk, OP)?;
        // SAFETY: valid handle, options and queue.
        unsafe { rd::rd_kafka_DescribeCluster(rk.0, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_DESCRIBECLUSTER_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is a DescribeCluster result; the id, node array and operations belong to it
        // and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_DescribeCluster_result(event.0);
            let id = rd::rd_kafka_DescribeCluster_result_cluster_id(result);
            let cluster_id = (!id.is_null()).then(|| cstring(id));
            let mut brokers = 0usize;
            rd::rd_kafka_DescribeCluster_result_nodes(result, &mut brokers);
            let mut ops_cnt = 0usize;
            let ops = rd_kafka_DescribeCluster_result_authorized_operations(result, &mut ops_cnt);
            Ok(ClusterDescription { cluster_id, brokers, authorized_operations: operations(ops, ops_cnt) })
        }
    })
    .await
}

/// Kafka's `Uuid.toString()`: the 16 bytes (most significant half first) in unpadded base64url.
/// `None` for the zero id, which Kafka uses for "no id".
pub(super) fn topic_id_text(msb: i64, lsb: i64) -> Option<String> {
    if msb == 0 && lsb == 0 {
        return None;
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&msb.to_be_bytes());
    bytes[8..].copy_from_slice(&lsb.to_be_bytes());
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    Some(out)
}
