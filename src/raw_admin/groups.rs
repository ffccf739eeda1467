//! Consumer groups: listing them with their state, describing them (members, assignments, authorized
//! operations), and reading and writing any group's committed offsets.

use std::ffi::c_char;
use std::ptr;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::{Offset, TopicPartitionList};

use super::ffi::*;
use super::types::*;

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
