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
//! - a group call that times out before its coordinator answers aborted the whole process when the
//!   coordinator came back (librdkafka#4605): fixed in the vendored librdkafka (`vendor/README.md`);
//! - it knows only the classic group states: KIP-848 groups in `Assigning` or `Reconciling` are
//!   reported as [`GroupState::Unknown`] (the state string is mapped by name, unknown names to 0);
//! - DescribeConsumerGroups rejects an empty or duplicated group list: we return nothing for an
//!   empty one and de-duplicate;
//! - AlterConsumerGroupOffsets rejects an empty list and negative offsets;
//! - DescribeAcls drops the response's top-level error: refused or unsecured, it answers no bindings.

mod acls;
mod client_calls;
mod cluster;
mod ffi;
mod groups;
mod types;

pub use acls::{
    AclBinding, AclFilter, AclPattern, AclPermission, AclResource, create_acls, delete_acls, describe_acls,
};
pub use client_calls::{consumer_positions, flush, send_offsets_to_transaction};
pub use cluster::{describe_cluster, describe_cluster_plain, describe_topics, incremental_alter_topic_configs};
pub use groups::{
    alter_consumer_group_offsets, describe_consumer_groups, list_consumer_group_offsets, list_consumer_groups,
    list_consumer_groups_partial,
};
pub use types::*;

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rdkafka::admin::AdminClient;

    use super::cluster::topic_id_text;
    use super::ffi::*;
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
