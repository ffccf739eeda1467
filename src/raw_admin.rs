//! Safe wrappers over the librdkafka admin calls that rdkafka 0.39 does not expose: incremental topic
//! config changes (IncrementalAlterConfigs), listing and describing consumer groups with their state
//! (ListGroups / ConsumerGroupDescribe / DescribeGroups) and the cluster (DescribeCluster), each with the
//! caller's authorized operations where asked (KIP-430), reading and writing the committed
//! offsets of any group (OffsetFetch / OffsetCommit with generation -1, as MM2's admin client does),
//! and committing any group's offsets inside a producer's transaction (rdkafka takes the group's
//! metadata only from a consumer of that group), and ACL bindings (DescribeAcls / CreateAcls, in
//! [`acls`]). Besides, one client-side query: a consumer's positions of chosen partitions
//! ([`consumer_positions`]).
//!
//! This module owns all of ferry's `unsafe` code. It does not own the client: every call borrows an
//! existing [`AdminClient`] and uses its native handle. Each call
//! 1. copies its arguments into owned C data (an interior NUL is an `_INVALID_ARG` error, not a panic),
//! 2. on a `spawn_blocking` thread creates a dedicated result queue, submits the request with an
//!    explicit request timeout, waits for the one result event with `rd_kafka_queue_poll` and
//!    copies the result out into plain Rust values,
//! 3. frees every librdkafka object it created (options, requests, event, queue) through small RAII
//!    guards, on every path.
//!
//! Broker and librdkafka error codes are read as plain `i32` through our own declarations of the few
//! C functions that return them: the bindings type them as a Rust enum, and a code that enum does not
//! list (a newer broker's) would be undefined behaviour. Group states are read the same way.
//!
//! Lifetime of the native handle: librdkafka queues do not keep their `rd_kafka_t` alive, so the
//! blocking work must end before the `AdminClient` can be dropped. The async functions hold the
//! borrow until the blocking closure has finished; if such a future is dropped mid-call (cancelled),
//! its drop tells the blocking thread to stop and waits for it (about one 50 ms poll slice once
//! that thread runs).
//!
//! librdkafka 2.12 quirks this module papers over or documents:
//! - it knows only the classic group states: KIP-848 groups in `Assigning` or `Reconciling` are
//!   reported as [`GroupState::Unknown`] (the state string is mapped by name, unknown names to 0);
//! - DescribeConsumerGroups rejects an empty or duplicated group list: we return nothing for an
//!   empty one and de-duplicate;
//! - AlterConsumerGroupOffsets rejects an empty list and negative offsets;
//! - DescribeAcls drops the response's top-level error: refused or unsecured, it answers no bindings.

use std::ffi::{CStr, CString, c_char, c_int};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::types::{RDKafka, RDKafkaAdminOptions, RDKafkaConfigResource, RDKafkaEvent, RDKafkaQueue};
use rdkafka::{Offset, TopicPartitionList};

mod acls;
pub use acls::{AclBinding, AclFilter, AclPattern, AclPermission, AclResource, create_acls, describe_acls};

// librdkafka error codes this module produces or recognises itself.
const ERR_FAIL: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__FAIL as i32;
const ERR_INVALID_ARG: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__INVALID_ARG as i32;
const ERR_TIMED_OUT: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__TIMED_OUT as i32;
const ERR_STATE: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__STATE as i32;
const ERR_DESTROY: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__DESTROY as i32;
const ERR_GROUP_ID_NOT_FOUND: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND as i32;

/// How long one `rd_kafka_queue_poll` waits before the blocking thread looks at its cancel flag.
const POLL_SLICE: Duration = Duration::from_millis(50);
/// librdkafka answers with a `_TIMED_OUT` result once the request timeout passed; we stop waiting
/// for that answer only this much later.
const DEADLINE_GRACE: Duration = Duration::from_secs(5);

// Our own declarations of the librdkafka functions whose results carry an error code or a group
// state, typed as plain integers (see the module doc). Same symbols and C signatures as in
// `rdkafka::bindings`; C enums are `int`-sized.
unsafe extern "C" {
    fn rd_kafka_position(rk: *mut RDKafka, partitions: *mut rd::rd_kafka_topic_partition_list_t) -> c_int;
    fn rd_kafka_err2name(err: c_int) -> *const c_char;
    fn rd_kafka_err2str(err: c_int) -> *const c_char;
    fn rd_kafka_event_error(rkev: *mut rd::rd_kafka_event_t) -> c_int;
    fn rd_kafka_error_code(error: *const rd::rd_kafka_error_t) -> c_int;
    fn rd_kafka_ConfigResource_error(config: *const rd::rd_kafka_ConfigResource_t) -> c_int;
    fn rd_kafka_AdminOptions_set_request_timeout(
        options: *mut rd::rd_kafka_AdminOptions_t,
        timeout_ms: c_int,
        errstr: *mut c_char,
        errstr_size: usize,
    ) -> c_int;
    fn rd_kafka_ConsumerGroupListing_state(grplist: *const rd::rd_kafka_ConsumerGroupListing_t) -> c_int;
    fn rd_kafka_ConsumerGroupDescription_state(grpdesc: *const rd::rd_kafka_ConsumerGroupDescription_t) -> c_int;
    fn rd_kafka_TopicDescription_authorized_operations(
        topicdesc: *const rd::rd_kafka_TopicDescription_t,
        cntp: *mut usize,
    ) -> *const c_int;
    fn rd_kafka_ConsumerGroupDescription_authorized_operations(
        grpdesc: *const rd::rd_kafka_ConsumerGroupDescription_t,
        cntp: *mut usize,
    ) -> *const c_int;
    fn rd_kafka_DescribeCluster_result_authorized_operations(
        result: *const rd::rd_kafka_DescribeCluster_result_t,
        cntp: *mut usize,
    ) -> *const c_int;
}

// ---------------------------------------------------------------------------------------------
// Public types

/// A failed admin call, or a failed part of one (a topic, a group, a partition).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {name} ({code}): {message}")]
pub struct AdminError {
    /// The broker's error code (positive) or librdkafka's local one (negative, e.g. -185 `_TIMED_OUT`).
    pub code: i32,
    /// librdkafka's name for the code without its prefix: `UNKNOWN_MEMBER_ID`, `_TIMED_OUT`, or
    /// `ERR_<code>?` for a code librdkafka does not know.
    pub name: String,
    /// The human-readable message, prefixed with the subject (topic, group, partition) where known.
    pub message: String,
    /// The admin operation: `IncrementalAlterConfigs`, `ListConsumerGroups`, ...
    pub op: &'static str,
}

impl AdminError {
    /// An error for `code` with librdkafka's description of it as the message (or `message`).
    fn from_code(op: &'static str, code: i32, message: Option<String>) -> AdminError {
        // SAFETY: err2name/err2str accept any int (unknown codes get a generic text) and return a
        // NUL-terminated string that stays valid at least until the next call on this thread;
        // `cstring` copies it at once.
        let (name, text) = unsafe { (cstring(rd_kafka_err2name(code)), cstring(rd_kafka_err2str(code))) };
        let message = message.filter(|m| !m.is_empty()).unwrap_or(text);
        AdminError { code, name, message, op }
    }

    /// Like [`AdminError::from_code`], with `subject: ` before the message.
    fn about(op: &'static str, code: i32, subject: &str, message: Option<String>) -> AdminError {
        let mut e = AdminError::from_code(op, code, message);
        e.message = format!("{subject}: {}", e.message);
        e
    }

    /// Reads a librdkafka error object; `None` if `err` is NULL.
    ///
    /// # Safety
    /// `err` is NULL or a valid `rd_kafka_error_t`.
    unsafe fn from_error_object(op: &'static str, err: *const rd::rd_kafka_error_t) -> Option<AdminError> {
        if err.is_null() {
            return None;
        }
        // SAFETY: `err` is a valid error object (caller); the accessors only read it, and the
        // returned strings live as long as it does; `cstring` copies them.
        unsafe {
            Some(AdminError {
                code: rd_kafka_error_code(err),
                name: cstring(rd::rd_kafka_error_name(err)),
                message: cstring(rd::rd_kafka_error_string(err)),
                op,
            })
        }
    }
}

/// One change of [`incremental_alter_topic_configs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set the topic-level override to this value.
    Set(String),
    /// Remove the topic-level override (the topic falls back to the broker default).
    Delete,
}

/// A consumer group's state as librdkafka reports it.
///
/// librdkafka 2.12 knows only the classic states; a KIP-848 group in `Assigning` or `Reconciling`
/// comes back as `Unknown`. Those two variants exist for a later librdkafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupState {
    Unknown,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
    Empty,
    Assigning,
    Reconciling,
}

impl GroupState {
    /// librdkafka's `rd_kafka_consumer_group_state_t` value; anything it may add later is `Unknown`.
    fn from_code(code: c_int) -> GroupState {
        match code {
            1 => GroupState::PreparingRebalance,
            2 => GroupState::CompletingRebalance,
            3 => GroupState::Stable,
            4 => GroupState::Dead,
            5 => GroupState::Empty,
            _ => GroupState::Unknown,
        }
    }

    /// The state's name as Kafka spells it (`Empty`, `PreparingRebalance`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupState::Unknown => "Unknown",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
            GroupState::Empty => "Empty",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One group of [`list_consumer_groups`].
#[derive(Clone, Debug)]
pub struct GroupListing {
    pub group_id: String,
    pub state: GroupState,
    /// No protocol type: a group that only ever had offsets committed to it (like MM2's synced
    /// groups before a consumer joins), never members.
    pub is_simple: bool,
}

/// One group of [`describe_consumer_groups`].
#[derive(Clone, Debug)]
pub struct GroupDescription {
    pub group_id: String,
    /// `Dead` for a group that does not exist.
    pub state: GroupState,
    pub members: usize,
    /// Why this group could not be described (coordinator unavailable, not authorised, ...). A group
    /// that does not exist is not an error here: it is `Dead` with no error.
    pub error: Option<AdminError>,
    /// What the caller's principal may do with the group (KIP-430), also for a group that does not
    /// exist; `None` with an error or when the broker did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// A committed offset of a group for one partition, with the commit's metadata string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

// ---------------------------------------------------------------------------------------------
// Public calls

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

/// Every consumer group of the cluster, classic and KIP-848 (`consumer` protocol) alike; other
/// group types (share, streams) are not listed. ListGroups goes to every broker: if some of them
/// fail, the groups of the others are returned and the failures logged (MM2's `valid()`); only if
/// none answered is it an `Err`.
pub async fn list_consumer_groups<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<Vec<GroupListing>, AdminError> {
    let (groups, errors) = list_consumer_groups_partial(admin, timeout).await?;
    for e in &errors {
        tracing::warn!(error = %e, "listing consumer groups: a broker did not answer; its groups are missing");
    }
    Ok(groups)
}

/// Like [`list_consumer_groups`], with the brokers' failures returned beside the groups: a caller that
/// acts on a group's absence must know whether the list is complete.
pub async fn list_consumer_groups_partial<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<(Vec<GroupListing>, Vec<AdminError>), AdminError> {
    const OP: &str = "ListConsumerGroups";
    run(admin, OP, move |rk, cancel| {
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        // Brokers without ListGroups v5 (before KIP-848) get no type filter and list all groups,
        // which are then all classic.
        let types = [
            rd::rd_kafka_consumer_group_type_t::RD_KAFKA_CONSUMER_GROUP_TYPE_CLASSIC,
            rd::rd_kafka_consumer_group_type_t::RD_KAFKA_CONSUMER_GROUP_TYPE_CONSUMER,
        ];
        // SAFETY: `options` is valid, `types` holds 2 valid values and is copied; a returned error
        // object is ours to destroy.
        let err = ErrorObject(unsafe {
            rd::rd_kafka_AdminOptions_set_match_consumer_group_types(options.0, types.as_ptr(), types.len())
        });
        // SAFETY: NULL or a valid error object owned by `err`.
        if let Some(e) = unsafe { AdminError::from_error_object(OP, err.0) } {
            return Err(e);
        }
        let queue = Queue::new(rk, OP)?;
        // SAFETY: valid handle, options and queue.
        unsafe { rd::rd_kafka_ListConsumerGroups(rk.0, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_LISTCONSUMERGROUPS_RESULT, timeout, cancel, OP)?;
        let mut groups = Vec::new();
        let mut errors = Vec::new();
        // SAFETY: `event` is a ListConsumerGroups result; the arrays, listings and error objects
        // belong to it and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_ListConsumerGroups_result(event.0);
            let mut cnt = 0usize;
            let valid = rd::rd_kafka_ListConsumerGroups_result_valid(result, &mut cnt);
            for &g in array(valid, cnt) {
                groups.push(GroupListing {
                    group_id: cstring(rd::rd_kafka_ConsumerGroupListing_group_id(g)),
                    state: GroupState::from_code(rd_kafka_ConsumerGroupListing_state(g)),
                    is_simple: rd::rd_kafka_ConsumerGroupListing_is_simple_consumer_group(g) != 0,
                });
            }
            let mut cnt = 0usize;
            let errs = rd::rd_kafka_ListConsumerGroups_result_errors(result, &mut cnt);
            for &e in array(errs, cnt) {
                errors.extend(AdminError::from_error_object(OP, e));
            }
        }
        if groups.is_empty()
            && let Some(e) = errors.first()
        {
            return Err(e.clone());
        }
        Ok((groups, errors))
    })
    .await
}

/// Describes `groups` (duplicates are described once; results in first-seen order), classic and
/// KIP-848 groups alike. A group that does not exist comes back as `Dead` with no members and no
/// error; other per-group failures are in [`GroupDescription::error`], with state `Unknown`. Only a
/// failure of the whole call is an `Err`.
///
/// librdkafka first sends ConsumerGroupDescribe; for a classic or unknown group Kafka 4.3 answers
/// `GROUP_ID_NOT_FOUND` and librdkafka falls back to DescribeGroups, which (at the version librdkafka
/// 2.12 uses) reports an unknown group as `Dead` without error. A `GROUP_ID_NOT_FOUND` that still
/// reaches us (DescribeGroups v6, KIP-1043) is mapped to `Dead` as well, as MM2 4.x does.
/// The caller's authorized operations on each group are asked for too.
pub async fn describe_consumer_groups<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    groups: &[String],
    timeout: Duration,
) -> Result<Vec<GroupDescription>, AdminError> {
    const OP: &str = "DescribeConsumerGroups";
    let mut unique: Vec<&String> = Vec::with_capacity(groups.len());
    for g in groups {
        if !unique.contains(&g) {
            unique.push(g);
        }
    }
    if unique.is_empty() {
        return Ok(Vec::new());
    }
    let names = unique.iter().map(|g| c_string(OP, "group id", g)).collect::<Result<Vec<_>, _>>()?;
    run(admin, OP, move |rk, cancel| {
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        options.include_authorized_operations(OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        // SAFETY: valid handle, options and queue; `ptrs` holds `ptrs.len()` valid C strings, which
        // librdkafka copies.
        unsafe { rd::rd_kafka_DescribeConsumerGroups(rk.0, ptrs.as_mut_ptr(), ptrs.len(), options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_DESCRIBECONSUMERGROUPS_RESULT, timeout, cancel, OP)?;
        let mut out = Vec::with_capacity(ptrs.len());
        // SAFETY: `event` is a DescribeConsumerGroups result; the array, descriptions and error
        // objects belong to it and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event.0);
            let mut cnt = 0usize;
            let descs = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut cnt);
            for &d in array(descs, cnt) {
                let group_id = cstring(rd::rd_kafka_ConsumerGroupDescription_group_id(d));
                let error = AdminError::from_error_object(OP, rd::rd_kafka_ConsumerGroupDescription_error(d))
                    .map(|e| AdminError { message: format!("group {group_id}: {}", e.message), ..e });
                let (state, members, error) = match error {
                    Some(e) if e.code == ERR_GROUP_ID_NOT_FOUND => (GroupState::Dead, 0, None),
                    Some(e) => (GroupState::Unknown, 0, Some(e)),
                    None => (
                        GroupState::from_code(rd_kafka_ConsumerGroupDescription_state(d)),
                        rd::rd_kafka_ConsumerGroupDescription_member_count(d),
                        None,
                    ),
                };
                let mut ops_cnt = 0usize;
                let ops = rd_kafka_ConsumerGroupDescription_authorized_operations(d, &mut ops_cnt);
                let authorized_operations = operations(ops, ops_cnt);
                out.push(GroupDescription { group_id, state, members, error, authorized_operations });
            }
        }
        Ok(out)
    })
    .await
}

/// Every offset `group` has committed (OffsetFetch for all partitions, not requiring stable
/// offsets). Entries without a valid offset (< 0) or with a per-partition error are skipped and
/// logged. A group that does not exist has no offsets (Kafka 4.3 answers an empty list; a
/// `GROUP_ID_NOT_FOUND` is treated the same). A group-level error is an `Err`.
pub async fn list_consumer_group_offsets<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    group: &str,
    timeout: Duration,
) -> Result<Vec<CommittedOffset>, AdminError> {
    const OP: &str = "ListConsumerGroupOffsets";
    let group_c = c_string(OP, "group id", group)?;
    let group = group.to_string();
    run(admin, OP, move |rk, cancel| {
        // SAFETY: the group id is a valid C string and copied; NULL partitions means "all". The new
        // request is ours and only the guard frees it.
        let request = unsafe {
            OffsetsRequest::<ListRequest>::new(rd::rd_kafka_ListConsumerGroupOffsets_new(group_c.as_ptr(), ptr::null()))
        }
        .ok_or_else(|| {
            AdminError::about(OP, ERR_FAIL, &format!("group {group}"), Some("could not create the request".into()))
        })?;
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut requests = [request.ptr];
        // SAFETY: valid handle, request, options and queue; librdkafka copies the request.
        unsafe { rd::rd_kafka_ListConsumerGroupOffsets(rk.0, requests.as_mut_ptr(), 1, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_LISTCONSUMERGROUPOFFSETS_RESULT, timeout, cancel, OP)?;
        let mut out = Vec::new();
        // SAFETY: `event` is a ListConsumerGroupOffsets result; group results and their partition
        // lists belong to it and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_ListConsumerGroupOffsets_result(event.0);
            let mut cnt = 0usize;
            let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut cnt);
            for &g in array(groups, cnt) {
                if let Some(e) = AdminError::from_error_object(OP, rd::rd_kafka_group_result_error(g)) {
                    if e.code == ERR_GROUP_ID_NOT_FOUND {
                        continue;
                    }
                    return Err(AdminError { message: format!("group {group}: {}", e.message), ..e });
                }
                for p in partitions(rd::rd_kafka_group_result_partitions(g)) {
                    if p.err != 0 {
                        let e = AdminError::from_code(OP, p.err, None);
                        tracing::warn!(group = %group, topic = %p.topic, partition = p.partition, error = %e,
                            "skipping a committed offset that the broker reported with an error");
                    } else if p.offset < 0 {
                        tracing::debug!(group = %group, topic = %p.topic, partition = p.partition, offset = p.offset,
                            "skipping a partition without a committed offset");
                    } else {
                        out.push(CommittedOffset {
                            topic: p.topic,
                            partition: p.partition,
                            offset: p.offset,
                            metadata: p.metadata,
                        });
                    }
                }
            }
        }
        Ok(out)
    })
    .await
}

/// Commits `offsets` (with their metadata) for `group` as a non-member (generation -1, no member
/// id), the way MM2's `alterConsumerGroupOffsets` does. The broker accepts it only while the group
/// has no members: for an active group this fails with `UNKNOWN_MEMBER_ID`. Any group-level or
/// per-partition error is an `Err` (the first one, naming its partition). An empty `offsets` does
/// nothing; a negative offset is an `_INVALID_ARG` error.
pub async fn alter_consumer_group_offsets<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    group: &str,
    offsets: &[CommittedOffset],
    timeout: Duration,
) -> Result<(), AdminError> {
    const OP: &str = "AlterConsumerGroupOffsets";
    if offsets.is_empty() {
        return Ok(());
    }
    let group_c = c_string(OP, "group id", group)?;
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for o in offsets {
        // rdkafka's list would panic on these; report them instead.
        c_string(OP, "topic name", &o.topic)?;
        if o.offset < 0 {
            return Err(AdminError::about(
                OP,
                ERR_INVALID_ARG,
                &format!("{}-{}", o.topic, o.partition),
                Some(format!("offset {} is not a valid offset to commit", o.offset)),
            ));
        }
        let mut elem = tpl.add_partition(&o.topic, o.partition);
        elem.set_offset(Offset::Offset(o.offset)).map_err(|e| {
            AdminError::about(OP, ERR_INVALID_ARG, &format!("{}-{}", o.topic, o.partition), Some(e.to_string()))
        })?;
        elem.set_metadata(&o.metadata);
    }
    let group = group.to_string();
    run(admin, OP, move |rk, cancel| {
        // SAFETY: the group id is a valid C string and `tpl` a valid list; both are copied. The new
        // request is ours and only the guard frees it.
        let request = unsafe {
            OffsetsRequest::<AlterRequest>::new(rd::rd_kafka_AlterConsumerGroupOffsets_new(group_c.as_ptr(), tpl.ptr()))
        }
        .ok_or_else(|| {
            AdminError::about(OP, ERR_FAIL, &format!("group {group}"), Some("could not create the request".into()))
        })?;
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut requests = [request.ptr];
        // SAFETY: valid handle, request, options and queue; librdkafka copies the request.
        unsafe { rd::rd_kafka_AlterConsumerGroupOffsets(rk.0, requests.as_mut_ptr(), 1, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_ALTERCONSUMERGROUPOFFSETS_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is an AlterConsumerGroupOffsets result; group results and their partition
        // lists belong to it and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_AlterConsumerGroupOffsets_result(event.0);
            let mut cnt = 0usize;
            let groups = rd::rd_kafka_AlterConsumerGroupOffsets_result_groups(result, &mut cnt);
            if cnt == 0 {
                return Err(AdminError::about(OP, ERR_FAIL, &format!("group {group}"), Some("empty result".into())));
            }
            for &g in array(groups, cnt) {
                if let Some(e) = AdminError::from_error_object(OP, rd::rd_kafka_group_result_error(g)) {
                    return Err(AdminError { message: format!("group {group}: {}", e.message), ..e });
                }
                if let Some(p) = partitions(rd::rd_kafka_group_result_partitions(g)).into_iter().find(|p| p.err != 0) {
                    return Err(AdminError::about(
                        OP,
                        p.err,
                        &format!("group {group}, {}-{}", p.topic, p.partition),
                        None,
                    ));
                }
            }
        }
        Ok(())
    })
    .await
}

/// How a [`send_offsets_to_transaction`] failed, as librdkafka classes the error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct TxnError {
    pub error: AdminError,
    /// The producer is unusable (e.g. fenced by a newer producer with its transactional id).
    pub fatal: bool,
    /// The transaction must be aborted before another one begins.
    pub requires_abort: bool,
}

impl TxnError {
    /// Another producer with the same transactional id fenced this one.
    pub fn is_fenced(&self) -> bool {
        matches!(self.error.name.as_str(), "PRODUCER_FENCED" | "INVALID_PRODUCER_EPOCH" | "_FENCED")
    }
}

/// The consumer's application position of each of `partitions`: the offset after the last record it
/// handed over or the last transaction marker it passed (a marker is never handed over, but the position
/// moves past it). `None` for a partition without one: not fetched from since it was assigned or sought,
/// or not assigned. rdkafka's `Consumer::position` answers for the whole assignment, a search over the
/// client's topics per partition; this asks about `partitions` only.
pub fn consumer_positions<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    partitions: &[(String, i32)],
) -> Vec<(String, i32, Option<i64>)> {
    use rdkafka::consumer::Consumer as _;
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        tpl.add_partition(topic, *partition);
    }
    // SAFETY: the consumer's live handle (borrowed for the call) and a valid list we own; the call only
    // writes each element's offset and error, and returns a plain code (always "no error").
    unsafe { rd_kafka_position(consumer.client().native_ptr(), tpl.ptr()) };
    tpl.elements()
        .iter()
        .map(|e| {
            let at = match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o),
                _ => None,
            };
            (e.topic().to_string(), e.partition(), at)
        })
        .collect()
}

/// Commits `offsets` of consumer group `group` inside the producer's open transaction
/// (AddOffsetsToTxn + TxnOffsetCommit, as Kafka Connect's exactly-once source tasks and Streams do):
/// they become the group's committed offsets only when the transaction commits, and never once a
/// newer producer with the same transactional id fenced this one. The group is named by id only
/// (generation -1, no member id), as a commit from outside the group. Blocks up to `timeout`.
///
/// rdkafka 0.39 takes the group metadata only from a consumer of that group; this builds it from the id.
pub fn send_offsets_to_transaction<C: rdkafka::producer::ProducerContext>(
    producer: &rdkafka::producer::BaseProducer<C>,
    group: &str,
    offsets: &[CommittedOffset],
    timeout: Duration,
) -> Result<(), TxnError> {
    const OP: &str = "SendOffsetsToTransaction";
    let plain = |error| TxnError { error, fatal: false, requires_abort: false };
    if offsets.is_empty() {
        return Ok(());
    }
    let group_c = c_string(OP, "group id", group).map_err(plain)?;
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for o in offsets {
        c_string(OP, "topic name", &o.topic).map_err(plain)?;
        let subject = format!("{}-{}", o.topic, o.partition);
        if o.offset < 0 {
            let why = format!("offset {} is not a valid offset to commit", o.offset);
            return Err(plain(AdminError::about(OP, ERR_INVALID_ARG, &subject, Some(why))));
        }
        let mut elem = tpl.add_partition(&o.topic, o.partition);
        elem.set_offset(Offset::Offset(o.offset))
            .map_err(|e| plain(AdminError::about(OP, ERR_INVALID_ARG, &subject, Some(e.to_string()))))?;
        elem.set_metadata(&o.metadata);
    }
    use rdkafka::producer::Producer as _;
    let rk = producer.client().native_ptr();
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: the group id is a valid C string (copied by librdkafka); the metadata object is ours and
    // destroyed below, after the call that only reads it.
    let cgm = unsafe { rd::rd_kafka_consumer_group_metadata_new(group_c.as_ptr()) };
    if cgm.is_null() {
        let why = Some("could not create the group metadata".to_string());
        return Err(plain(AdminError::about(OP, ERR_FAIL, &format!("group {group}"), why)));
    }
    // SAFETY: `rk` is the producer's live handle (borrowed for the call), `tpl` a valid list and
    // `cgm` valid metadata; the call blocks until done and returns an error object we own (or NULL).
    let err = ErrorObject(unsafe { rd::rd_kafka_send_offsets_to_transaction(rk, tpl.ptr(), cgm, timeout_ms) });
    // SAFETY: created above, destroyed once.
    unsafe { rd::rd_kafka_consumer_group_metadata_destroy(cgm) };
    // SAFETY: `err.0` is NULL or the valid error object returned above, alive until `err` drops.
    let Some(error) = (unsafe { AdminError::from_error_object(OP, err.0) }) else { return Ok(()) };
    // SAFETY: as above; the accessors only read the object.
    let (fatal, requires_abort) =
        unsafe { (rd::rd_kafka_error_is_fatal(err.0) != 0, rd::rd_kafka_error_txn_requires_abort(err.0) != 0) };
    Err(TxnError {
        error: AdminError { message: format!("group {group}: {}", error.message), ..error },
        fatal,
        requires_abort,
    })
}

/// One topic of [`describe_topics`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    /// Kafka's topic id in its usual text form (22 characters of base64url, as `kafka-topics`
    /// prints it); `None` with an error or from a broker that has no ids.
    pub id: Option<String>,
    pub partitions: i32,
    /// Why this topic could not be described (e.g. `UNKNOWN_TOPIC_OR_PART` for a topic that does not
    /// exist, `TOPIC_AUTHORIZATION_FAILED`).
    pub error: Option<AdminError>,
    /// What the caller's principal may do with the topic (KIP-430), as the broker computed it from its
    /// ACLs; `None` when the broker did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// An ACL operation, as in Kafka's `AclOperation` (what a principal may do with a resource).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    /// A code this build does not know.
    Other(i32),
}

impl AclOperation {
    /// librdkafka's `rd_kafka_AclOperation_t` value.
    fn from_code(code: c_int) -> AclOperation {
        match code {
            2 => AclOperation::All,
            3 => AclOperation::Read,
            4 => AclOperation::Write,
            5 => AclOperation::Create,
            6 => AclOperation::Delete,
            7 => AclOperation::Alter,
            8 => AclOperation::Describe,
            9 => AclOperation::ClusterAction,
            10 => AclOperation::DescribeConfigs,
            11 => AclOperation::AlterConfigs,
            12 => AclOperation::IdempotentWrite,
            other => AclOperation::Other(other),
        }
    }

    /// The inverse of [`AclOperation::from_code`].
    fn code(self) -> c_int {
        match self {
            AclOperation::All => 2,
            AclOperation::Read => 3,
            AclOperation::Write => 4,
            AclOperation::Create => 5,
            AclOperation::Delete => 6,
            AclOperation::Alter => 7,
            AclOperation::Describe => 8,
            AclOperation::ClusterAction => 9,
            AclOperation::DescribeConfigs => 10,
            AclOperation::AlterConfigs => 11,
            AclOperation::IdempotentWrite => 12,
            AclOperation::Other(c) => c,
        }
    }

    /// The operation's name as `kafka-acls --operation` takes it (`Read`, `DescribeConfigs`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            AclOperation::All => "All",
            AclOperation::Read => "Read",
            AclOperation::Write => "Write",
            AclOperation::Create => "Create",
            AclOperation::Delete => "Delete",
            AclOperation::Alter => "Alter",
            AclOperation::Describe => "Describe",
            AclOperation::ClusterAction => "ClusterAction",
            AclOperation::DescribeConfigs => "DescribeConfigs",
            AclOperation::AlterConfigs => "AlterConfigs",
            AclOperation::IdempotentWrite => "IdempotentWrite",
            AclOperation::Other(_) => "Unknown",
        }
    }
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

/// The cluster as [`describe_cluster`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    /// How many brokers the cluster reports.
    pub brokers: usize,
    /// What the caller's principal may do with the cluster resource (KIP-430); `None` when the broker
    /// did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// Describes the cluster (DescribeCluster, KIP-700): its id, its brokers and what the caller may do
/// with it. A cluster that does not answer within `timeout` is an `Err` (`_TIMED_OUT`).
pub async fn describe_cluster<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<ClusterDescription, AdminError> {
    const OP: &str = "DescribeCluster";
    run(admin, OP, move |rk, cancel| {
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER, OP)?;
        options.set_request_timeout(timeout, OP)?;
        options.include_authorized_operations(OP)?;
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
fn topic_id_text(msb: i64, lsb: i64) -> Option<String> {
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

// ---------------------------------------------------------------------------------------------
// Running a call on a blocking thread

/// The native handle of an `AdminClient`, carried to the blocking thread.
#[derive(Clone, Copy)]
struct Rk(*mut RDKafka);

// SAFETY: librdkafka handles are thread-safe (every rd_kafka_* call used here may be made from any
// thread). `run` keeps the handle alive: it holds the `&AdminClient` borrow until the blocking
// closure has finished, also when its future is dropped early (see `WaitOnDrop`).
unsafe impl Send for Rk {}

/// Shared between an async call and its blocking closure.
#[derive(Default)]
struct Completion {
    /// Set when the async side is gone: the blocking side stops polling and frees everything.
    cancel: AtomicBool,
    /// Set (under the mutex, with a notify) once the closure has finished or was dropped unrun.
    done: Mutex<bool>,
    finished: Condvar,
}

/// Moved into the blocking closure; dropping it (after the closure's own locals, or with the closure
/// if it never runs) marks the work done.
struct DoneOnDrop(Arc<Completion>);

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        *self.0.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0.finished.notify_all();
    }
}

/// Held by the async side: if its future is dropped before the closure finished, cancel the closure
/// and wait for it, so that the native handle outlives every use (a blocking wait of at most one
/// poll slice, in the rare case of a cancelled call).
struct WaitOnDrop(Arc<Completion>);

impl Drop for WaitOnDrop {
    fn drop(&mut self) {
        self.0.cancel.store(true, Ordering::Relaxed);
        let mut done = self.0.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.0.finished.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs `f` with the client's native handle on a `spawn_blocking` thread and returns its result,
/// never letting the borrow of `admin` end before `f` is done.
async fn run<C, T, F>(admin: &AdminClient<C>, op: &'static str, f: F) -> Result<T, AdminError>
where
    C: ClientContext + 'static,
    T: Send + 'static,
    F: FnOnce(Rk, &AtomicBool) -> Result<T, AdminError> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| AdminError::from_code(op, ERR_STATE, Some("called outside a tokio runtime".into())))?;
    let rk = Rk(admin.inner().native_ptr());
    let completion = Arc::new(Completion::default());
    let done = DoneOnDrop(completion.clone());
    let shared = completion.clone();
    let wait = WaitOnDrop(completion);
    let task = runtime.spawn_blocking(move || {
        let _done = done; // dropped last, after everything `f` created
        if shared.cancel.load(Ordering::Relaxed) {
            return Err(AdminError::from_code(op, ERR_DESTROY, Some("cancelled".into())));
        }
        f(rk, &shared.cancel)
    });
    let result = task.await;
    drop(wait); // the closure has finished or was dropped: returns at once
    match result {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(AdminError::from_code(op, ERR_DESTROY, Some("the runtime is shutting down".into()))),
    }
}

// ---------------------------------------------------------------------------------------------
// RAII guards over librdkafka objects

/// A result queue of our own (`rd_kafka_queue_new`).
struct Queue(*mut RDKafkaQueue);

impl Queue {
    fn new(rk: Rk, op: &'static str) -> Result<Queue, AdminError> {
        // SAFETY: `rk` is a live handle (see `run`).
        let q = unsafe { rd::rd_kafka_queue_new(rk.0) };
        if q.is_null() {
            return Err(AdminError::from_code(op, ERR_FAIL, Some("could not create a result queue".into())));
        }
        Ok(Queue(q))
    }

    /// Waits for the call's one result event of type `expected` and checks its top-level error.
    /// Gives up when `cancel` is set, or [`DEADLINE_GRACE`] after `timeout` (librdkafka should have
    /// answered `_TIMED_OUT` by then).
    fn wait(
        &self,
        expected: c_int,
        timeout: Duration,
        cancel: &AtomicBool,
        op: &'static str,
    ) -> Result<Event, AdminError> {
        let deadline = Instant::now() + timeout + DEADLINE_GRACE;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(AdminError::from_code(op, ERR_DESTROY, Some("cancelled".into())));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AdminError::from_code(op, ERR_TIMED_OUT, Some(format!("no result after {timeout:?}"))));
            }
            let slice = left.min(POLL_SLICE).as_millis().max(1) as c_int;
            // SAFETY: the queue is valid; a returned event is ours and goes into a guard at once.
            let ev = unsafe { rd::rd_kafka_queue_poll(self.0, slice) };
            if ev.is_null() {
                continue;
            }
            let event = Event(ev);
            // SAFETY: `event` is a valid event.
            if unsafe { rd::rd_kafka_event_type(event.0) } != expected {
                continue; // nothing else is routed to this queue; drop it if it happens
            }
            // SAFETY: `event` is valid; the error string belongs to it and is copied.
            let code = unsafe { rd_kafka_event_error(event.0) };
            if code != 0 {
                let msg = unsafe { cstring(rd::rd_kafka_event_error_string(event.0)) };
                return Err(AdminError::from_code(op, code, Some(msg)));
            }
            return Ok(event);
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_queue_new, destroyed once, before the handle can go away.
        unsafe { rd::rd_kafka_queue_destroy(self.0) }
    }
}

/// An event taken from our queue.
struct Event(*mut RDKafkaEvent);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: returned by rd_kafka_queue_poll (ownership passes to us), destroyed once.
        unsafe { rd::rd_kafka_event_destroy(self.0) }
    }
}

/// `rd_kafka_AdminOptions_t`.
struct AdminOptions(*mut RDKafkaAdminOptions);

impl AdminOptions {
    fn new(rk: Rk, api: rd::rd_kafka_admin_op_t, op: &'static str) -> Result<AdminOptions, AdminError> {
        // SAFETY: `rk` is a live handle; `api` a valid op.
        let o = unsafe { rd::rd_kafka_AdminOptions_new(rk.0, api) };
        if o.is_null() {
            return Err(AdminError::from_code(op, ERR_FAIL, Some("could not create admin options".into())));
        }
        Ok(AdminOptions(o))
    }

    /// librdkafka's overall timeout of the call (up to 1 hour).
    fn set_request_timeout(&self, timeout: Duration, op: &'static str) -> Result<(), AdminError> {
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as c_int;
        let mut errstr = [0 as c_char; 256];
        // SAFETY: valid options; `errstr` is writable for its length and NUL-terminated by librdkafka.
        let code = unsafe { rd_kafka_AdminOptions_set_request_timeout(self.0, ms, errstr.as_mut_ptr(), errstr.len()) };
        if code != 0 {
            // SAFETY: librdkafka wrote a NUL-terminated message into `errstr` (or left it zeroed).
            let msg = unsafe { cstring(errstr.as_ptr()) };
            return Err(AdminError::from_code(op, code, Some(format!("request timeout {timeout:?}: {msg}"))));
        }
        Ok(())
    }

    /// Asks for the caller's authorized operations on each described resource (KIP-430).
    fn include_authorized_operations(&self, op: &'static str) -> Result<(), AdminError> {
        // SAFETY: valid options; a returned error object is ours to destroy.
        let err = ErrorObject(unsafe { rd::rd_kafka_AdminOptions_set_include_authorized_operations(self.0, 1) });
        // SAFETY: NULL or a valid error object owned by `err`.
        match unsafe { AdminError::from_error_object(op, err.0) } {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for AdminOptions {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_AdminOptions_new, destroyed once (calls copy the options).
        unsafe { rd::rd_kafka_AdminOptions_destroy(self.0) }
    }
}

/// `rd_kafka_ConfigResource_t` that we created.
struct ConfigResource(*mut RDKafkaConfigResource);

impl ConfigResource {
    /// # Safety
    /// `p` is NULL or a freshly created resource that nobody else frees.
    unsafe fn new(p: *mut RDKafkaConfigResource) -> Option<ConfigResource> {
        (!p.is_null()).then_some(ConfigResource(p))
    }
}

impl Drop for ConfigResource {
    fn drop(&mut self) {
        // SAFETY: ours (librdkafka copies resources passed to calls), destroyed once.
        unsafe { rd::rd_kafka_ConfigResource_destroy(self.0) }
    }
}

/// An `rd_kafka_TopicCollection_t` that we created.
struct TopicCollection(*mut rd::rd_kafka_TopicCollection_t);

impl Drop for TopicCollection {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: ours (librdkafka copies collections passed to calls), destroyed once.
            unsafe { rd::rd_kafka_TopicCollection_destroy(self.0) }
        }
    }
}

/// An `rd_kafka_error_t` returned to us (NULL: no error).
struct ErrorObject(*mut rd::rd_kafka_error_t);

impl Drop for ErrorObject {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: returned to the caller to own, destroyed once.
            unsafe { rd::rd_kafka_error_destroy(self.0) }
        }
    }
}

/// The two group-offsets request objects, told apart by a marker type.
trait OffsetsRequestKind {
    type Raw;
    /// # Safety
    /// `p` is a valid request of this kind, destroyed exactly once.
    unsafe fn destroy(p: *mut Self::Raw);
}

struct ListRequest;
impl OffsetsRequestKind for ListRequest {
    type Raw = rd::rd_kafka_ListConsumerGroupOffsets_t;
    unsafe fn destroy(p: *mut Self::Raw) {
        // SAFETY: see the trait.
        unsafe { rd::rd_kafka_ListConsumerGroupOffsets_destroy(p) }
    }
}

struct AlterRequest;
impl OffsetsRequestKind for AlterRequest {
    type Raw = rd::rd_kafka_AlterConsumerGroupOffsets_t;
    unsafe fn destroy(p: *mut Self::Raw) {
        // SAFETY: see the trait.
        unsafe { rd::rd_kafka_AlterConsumerGroupOffsets_destroy(p) }
    }
}

/// A ListConsumerGroupOffsets or AlterConsumerGroupOffsets request that we created.
struct OffsetsRequest<K: OffsetsRequestKind> {
    ptr: *mut K::Raw,
}

impl<K: OffsetsRequestKind> OffsetsRequest<K> {
    /// Takes ownership of a freshly created request; `None` if creating it failed (NULL).
    ///
    /// # Safety
    /// `ptr` is NULL or a request of kind `K` that nobody else frees.
    unsafe fn new(ptr: *mut K::Raw) -> Option<Self> {
        (!ptr.is_null()).then_some(OffsetsRequest { ptr })
    }
}

impl<K: OffsetsRequestKind> Drop for OffsetsRequest<K> {
    fn drop(&mut self) {
        // SAFETY: non-NULL (checked in `new`), ours (librdkafka copies requests), destroyed once.
        unsafe { K::destroy(self.ptr) }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading C data

/// One entry of a result partition list, copied out.
struct PartitionEntry {
    topic: String,
    partition: i32,
    offset: i64,
    metadata: String,
    err: i32,
}

/// Copies the entries of a partition list (NULL: none).
///
/// # Safety
/// `list` is NULL or a valid list that is not modified or freed during the call.
unsafe fn partitions(list: *const rd::rd_kafka_topic_partition_list_t) -> Vec<PartitionEntry> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: `list` is valid (caller): `elems` points to `cnt` initialised entries whose topic is a C
    // string and whose metadata is `metadata_size` bytes (or NULL). `err` is read through an `i32`
    // pointer, not as the bindings' enum, so an unknown code is just a number (the enum is
    // `repr(i32)`, so the field is an `i32` in memory).
    unsafe {
        let list = &*list;
        let cnt = usize::try_from(list.cnt).unwrap_or(0);
        let mut out = Vec::with_capacity(cnt);
        for i in 0..cnt {
            let e = list.elems.add(i);
            let err = ptr::addr_of!((*e).err).cast::<i32>().read();
            let metadata = if (*e).metadata.is_null() || (*e).metadata_size == 0 {
                String::new()
            } else {
                let bytes = std::slice::from_raw_parts((*e).metadata.cast::<u8>(), (*e).metadata_size);
                String::from_utf8_lossy(bytes).into_owned()
            };
            out.push(PartitionEntry {
                topic: cstring((*e).topic),
                partition: (*e).partition,
                offset: (*e).offset,
                metadata,
                err,
            });
        }
        out
    }
}

/// A C array of `cnt` pointers as a slice (empty for NULL).
///
/// # Safety
/// `p` is NULL or points to `cnt` pointers that stay valid and unchanged for `'a`.
unsafe fn array<'a, T>(p: *mut *const T, cnt: usize) -> &'a [*const T] {
    if p.is_null() || cnt == 0 {
        return &[];
    }
    // SAFETY: see the function's contract.
    unsafe { std::slice::from_raw_parts(p.cast_const(), cnt) }
}

/// The authorized operations librdkafka returned (`ops`, `cnt` of them); `None` for NULL (not asked, or
/// the broker did not say).
///
/// # Safety
/// `ops` is NULL or points to `cnt` ints that stay valid for the call.
unsafe fn operations(ops: *const c_int, cnt: usize) -> Option<Vec<AclOperation>> {
    // SAFETY: see the function's contract.
    (!ops.is_null())
        .then(|| unsafe { std::slice::from_raw_parts(ops, cnt) }.iter().map(|&c| AclOperation::from_code(c)).collect())
}

/// Copies a C string (NULL: empty), replacing invalid UTF-8.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn cstring(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: see the function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A Rust string as a C string; an interior NUL is an `_INVALID_ARG` error naming `what`.
fn c_string(op: &'static str, what: &str, s: &str) -> Result<CString, AdminError> {
    CString::new(s).map_err(|_| AdminError::from_code(op, ERR_INVALID_ARG, Some(format!("{what} {s:?} contains NUL"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_like_kafka() {
        // Kafka's Uuid(0x0123456789abcdef, 0xfedcba9876543210).toString()
        assert_eq!(
            topic_id_text(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210_u64 as i64).as_deref(),
            Some("ASNFZ4mrze_-3LqYdlQyEA")
        );
        assert_eq!(topic_id_text(0, 0), None);
    }

    #[test]
    fn unknown_error_codes_are_plain_numbers() {
        let e = AdminError::from_code("Test", 31337, None);
        assert_eq!(e.code, 31337);
        assert_eq!(e.name, "ERR_31337?");
        let e = AdminError::from_code("Test", 25, None);
        assert_eq!(e.name, "UNKNOWN_MEMBER_ID");
        assert_eq!(e.to_string(), format!("Test: UNKNOWN_MEMBER_ID (25): {}", e.message));
        let e = AdminError::from_code("Test", ERR_TIMED_OUT, Some("slow".into()));
        assert_eq!((e.name.as_str(), e.message.as_str()), ("_TIMED_OUT", "slow"));
    }

    #[test]
    fn group_states_map_by_number_and_unknown_numbers_are_unknown() {
        assert_eq!(GroupState::from_code(5), GroupState::Empty);
        assert_eq!(GroupState::from_code(4), GroupState::Dead);
        assert_eq!(GroupState::from_code(3), GroupState::Stable);
        assert_eq!(GroupState::from_code(6), GroupState::Unknown);
        assert_eq!(GroupState::from_code(-1), GroupState::Unknown);
        assert_eq!(GroupState::Reconciling.to_string(), "Reconciling");
    }

    #[test]
    fn calls_outside_a_runtime_or_with_bad_strings_fail_cleanly() {
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1").create().expect("admin client");
        let fut = list_consumer_groups(&admin, Duration::from_secs(1));
        let e = futures_lite_block_on(fut).expect_err("no runtime");
        assert_eq!(e.code, ERR_STATE);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let e = rt
            .block_on(incremental_alter_topic_configs(
                &admin,
                "bad\0topic",
                &[("retention.ms".into(), ConfigOp::Delete)],
                Duration::from_secs(1),
            ))
            .expect_err("NUL in topic");
        assert_eq!(e.name, "_INVALID_ARG");
        // No broker at all: librdkafka gives up at the request timeout.
        let e = rt.block_on(list_consumer_groups(&admin, Duration::from_millis(300))).expect_err("no broker");
        assert_eq!(e.code, ERR_TIMED_OUT, "{e}");
    }

    #[test]
    fn a_cancelled_call_finishes_before_the_client_can_be_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1").create().expect("admin client");
        let start = Instant::now();
        // No broker: the call would wait its 30 s; the timeout drops it after 100 ms.
        let r = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), list_consumer_groups(&admin, Duration::from_secs(30)))
                .await
        });
        assert!(r.is_err(), "timed out");
        drop(admin);
        assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    }

    /// Polls a future once-per-wake on this thread without any runtime.
    fn futures_lite_block_on<F: std::future::Future>(fut: F) -> F::Output {
        use std::task::{Context, Poll, Wake, Waker};
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park();
        }
    }
}
