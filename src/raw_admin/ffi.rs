//! The unsafe core of the admin calls: our own declarations of the librdkafka functions whose results
//! carry an error code, running one call on a blocking thread with its own result queue, RAII guards
//! over every librdkafka object a call creates, and copying C data out (see the module doc of
//! `raw_admin`).

use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::types::{RDKafka, RDKafkaAdminOptions, RDKafkaConfigResource, RDKafkaEvent, RDKafkaQueue};

use super::types::*;

// librdkafka error codes this module produces or recognises itself.
pub(super) const ERR_FAIL: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__FAIL as i32;
pub(super) const ERR_INVALID_ARG: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__INVALID_ARG as i32;
pub(super) const ERR_TIMED_OUT: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__TIMED_OUT as i32;
pub(super) const ERR_STATE: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__STATE as i32;
pub(super) const ERR_DESTROY: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__DESTROY as i32;
pub(super) const ERR_GROUP_ID_NOT_FOUND: i32 = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND as i32;

/// How long one `rd_kafka_queue_poll` waits before the blocking thread looks at its cancel flag.
pub(super) const POLL_SLICE: Duration = Duration::from_millis(50);
/// librdkafka answers with a `_TIMED_OUT` result once the request timeout passed; we stop waiting
/// for that answer only this much later.
pub(super) const DEADLINE_GRACE: Duration = Duration::from_secs(5);

// Our own declarations of the librdkafka functions whose results carry an error code or a group
// state, typed as plain integers (see the module doc). Same symbols and C signatures as in
// `rdkafka::bindings`; C enums are `int`-sized.
unsafe extern "C" {
    pub(super) fn rd_kafka_position(rk: *mut RDKafka, partitions: *mut rd::rd_kafka_topic_partition_list_t) -> c_int;
    pub(super) fn rd_kafka_err2name(err: c_int) -> *const c_char;
    pub(super) fn rd_kafka_err2str(err: c_int) -> *const c_char;
    pub(super) fn rd_kafka_event_error(rkev: *mut rd::rd_kafka_event_t) -> c_int;
    pub(super) fn rd_kafka_error_code(error: *const rd::rd_kafka_error_t) -> c_int;
    pub(super) fn rd_kafka_ConfigResource_error(config: *const rd::rd_kafka_ConfigResource_t) -> c_int;
    pub(super) fn rd_kafka_AdminOptions_set_request_timeout(
        options: *mut rd::rd_kafka_AdminOptions_t,
        timeout_ms: c_int,
        errstr: *mut c_char,
        errstr_size: usize,
    ) -> c_int;
    pub(super) fn rd_kafka_ConsumerGroupListing_state(grplist: *const rd::rd_kafka_ConsumerGroupListing_t) -> c_int;
    pub(super) fn rd_kafka_ConsumerGroupDescription_state(
        grpdesc: *const rd::rd_kafka_ConsumerGroupDescription_t,
    ) -> c_int;
    pub(super) fn rd_kafka_TopicDescription_authorized_operations(
        topicdesc: *const rd::rd_kafka_TopicDescription_t,
        cntp: *mut usize,
    ) -> *const c_int;
    pub(super) fn rd_kafka_ConsumerGroupDescription_authorized_operations(
        grpdesc: *const rd::rd_kafka_ConsumerGroupDescription_t,
        cntp: *mut usize,
    ) -> *const c_int;
    pub(super) fn rd_kafka_DescribeCluster_result_authorized_operations(
        result: *const rd::rd_kafka_DescribeCluster_result_t,
        cntp: *mut usize,
    ) -> *const c_int;
}

// ---------------------------------------------------------------------------------------------
// Running a call on a blocking thread

/// The native handle of an `AdminClient`, carried to the blocking thread.
#[derive(Clone, Copy)]
pub(super) struct Rk(pub(super) *mut RDKafka);

// SAFETY: librdkafka handles are thread-safe (every rd_kafka_* call used here may be made from any
// thread). `run` keeps the handle alive: it holds the `&AdminClient` borrow until the blocking
// closure has finished, also when its future is dropped early (see `WaitOnDrop`).
unsafe impl Send for Rk {}

/// Shared between an async call and its blocking closure.
#[derive(Default)]
pub(super) struct Completion {
    /// Set when the async side is gone: the blocking side stops polling and frees everything.
    pub(super) cancel: AtomicBool,
    /// Set (under the mutex, with a notify) once the closure has finished or was dropped unrun.
    pub(super) done: Mutex<bool>,
    pub(super) finished: Condvar,
}

/// Moved into the blocking closure; dropping it (after the closure's own locals, or with the closure
/// if it never runs) marks the work done.
pub(super) struct DoneOnDrop(pub(super) Arc<Completion>);

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        *self.0.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0.finished.notify_all();
    }
}

/// Held by the async side: if its future is dropped before the closure finished, cancel the closure
/// and wait for it, so that the native handle outlives every use (a blocking wait of at most one
/// poll slice, in the rare case of a cancelled call).
pub(super) struct WaitOnDrop(pub(super) Arc<Completion>);

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
pub(super) async fn run<C, T, F>(admin: &AdminClient<C>, op: &'static str, f: F) -> Result<T, AdminError>
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
pub(super) struct Queue(pub(super) *mut RDKafkaQueue);

impl Queue {
    pub(super) fn new(rk: Rk, op: &'static str) -> Result<Queue, AdminError> {
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
    pub(super) fn wait(
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
pub(super) struct Event(pub(super) *mut RDKafkaEvent);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: returned by rd_kafka_queue_poll (ownership passes to us), destroyed once.
        unsafe { rd::rd_kafka_event_destroy(self.0) }
    }
}

/// `rd_kafka_AdminOptions_t`.
pub(super) struct AdminOptions(pub(super) *mut RDKafkaAdminOptions);

impl AdminOptions {
    pub(super) fn new(rk: Rk, api: rd::rd_kafka_admin_op_t, op: &'static str) -> Result<AdminOptions, AdminError> {
        // SAFETY: `rk` is a live handle; `api` a valid op.
        let o = unsafe { rd::rd_kafka_AdminOptions_new(rk.0, api) };
        if o.is_null() {
            return Err(AdminError::from_code(op, ERR_FAIL, Some("could not create admin options".into())));
        }
        Ok(AdminOptions(o))
    }

    /// librdkafka's overall timeout of the call (up to 1 hour).
    pub(super) fn set_request_timeout(&self, timeout: Duration, op: &'static str) -> Result<(), AdminError> {
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
    pub(super) fn include_authorized_operations(&self, op: &'static str) -> Result<(), AdminError> {
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
pub(super) struct ConfigResource(pub(super) *mut RDKafkaConfigResource);

impl ConfigResource {
    /// # Safety
    /// `p` is NULL or a freshly created resource that nobody else frees.
    pub(super) unsafe fn new(p: *mut RDKafkaConfigResource) -> Option<ConfigResource> {
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
pub(super) struct TopicCollection(pub(super) *mut rd::rd_kafka_TopicCollection_t);

impl Drop for TopicCollection {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: ours (librdkafka copies collections passed to calls), destroyed once.
            unsafe { rd::rd_kafka_TopicCollection_destroy(self.0) }
        }
    }
}

/// An `rd_kafka_error_t` returned to us (NULL: no error).
pub(super) struct ErrorObject(pub(super) *mut rd::rd_kafka_error_t);

impl Drop for ErrorObject {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: returned to the caller to own, destroyed once.
            unsafe { rd::rd_kafka_error_destroy(self.0) }
        }
    }
}

/// The two group-offsets request objects, told apart by a marker type.
pub(super) trait OffsetsRequestKind {
    type Raw;
    /// # Safety
    /// `p` is a valid request of this kind, destroyed exactly once.
    unsafe fn destroy(p: *mut Self::Raw);
}

pub(super) struct ListRequest;
impl OffsetsRequestKind for ListRequest {
    type Raw = rd::rd_kafka_ListConsumerGroupOffsets_t;
    unsafe fn destroy(p: *mut Self::Raw) {
        // SAFETY: see the trait.
        unsafe { rd::rd_kafka_ListConsumerGroupOffsets_destroy(p) }
    }
}

pub(super) struct AlterRequest;
impl OffsetsRequestKind for AlterRequest {
    type Raw = rd::rd_kafka_AlterConsumerGroupOffsets_t;
    unsafe fn destroy(p: *mut Self::Raw) {
        // SAFETY: see the trait.
        unsafe { rd::rd_kafka_AlterConsumerGroupOffsets_destroy(p) }
    }
}

/// A ListConsumerGroupOffsets or AlterConsumerGroupOffsets request that we created.
pub(super) struct OffsetsRequest<K: OffsetsRequestKind> {
    pub(super) ptr: *mut K::Raw,
}

impl<K: OffsetsRequestKind> OffsetsRequest<K> {
    /// Takes ownership of a freshly created request; `None` if creating it failed (NULL).
    ///
    /// # Safety
    /// `ptr` is NULL or a request of kind `K` that nobody else frees.
    pub(super) unsafe fn new(ptr: *mut K::Raw) -> Option<Self> {
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
pub(super) struct PartitionEntry {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) metadata: String,
    pub(super) err: i32,
}

/// Copies the entries of a partition list (NULL: none).
///
/// # Safety
/// `list` is NULL or a valid list that is not modified or freed during the call.
pub(super) unsafe fn partitions(list: *const rd::rd_kafka_topic_partition_list_t) -> Vec<PartitionEntry> {
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
pub(super) unsafe fn array<'a, T>(p: *mut *const T, cnt: usize) -> &'a [*const T] {
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
pub(super) unsafe fn operations(ops: *const c_int, cnt: usize) -> Option<Vec<AclOperation>> {
    // SAFETY: see the function's contract.
    (!ops.is_null())
        .then(|| unsafe { std::slice::from_raw_parts(ops, cnt) }.iter().map(|&c| AclOperation::from_code(c)).collect())
}

/// Copies a C string (NULL: empty), replacing invalid UTF-8.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
pub(super) unsafe fn cstring(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: see the function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A Rust string as a C string; an interior NUL is an `_INVALID_ARG` error naming `what`.
pub(super) fn c_string(op: &'static str, what: &str, s: &str) -> Result<CString, AdminError> {
    CString::new(s).map_err(|_| AdminError::from_code(op, ERR_INVALID_ARG, Some(format!("{what} {s:?} contains NUL"))))
}

/// Errors read from librdkafka (its names and texts of codes, its error objects).
impl AdminError {
    /// An error for `code` with librdkafka's description of it as the message (or `message`).
    pub(super) fn from_code(op: &'static str, code: i32, message: Option<String>) -> AdminError {
        // SAFETY: err2name/err2str accept any int (unknown codes get a generic text) and return a
        // NUL-terminated string that stays valid at least until the next call on this thread;
        // `cstring` copies it at once.
        let (name, text) = unsafe { (cstring(rd_kafka_err2name(code)), cstring(rd_kafka_err2str(code))) };
        let message = message.filter(|m| !m.is_empty()).unwrap_or(text);
        AdminError { code, name, message, op }
    }

    /// Like [`AdminError::from_code`], with `subject: ` before the message.
    pub(super) fn about(op: &'static str, code: i32, subject: &str, message: Option<String>) -> AdminError {
        let mut e = AdminError::from_code(op, code, message);
        e.message = format!("{subject}: {}", e.message);
        e
    }

    /// Reads a librdkafka error object; `None` if `err` is NULL.
    ///
    /// # Safety
    /// `err` is NULL or a valid `rd_kafka_error_t`.
    pub(super) unsafe fn from_error_object(op: &'static str, err: *const rd::rd_kafka_error_t) -> Option<AdminError> {
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
