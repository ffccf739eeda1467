//! ACL bindings: DescribeAcls with a filter and CreateAcls (KIP-140), as plain Rust values. Same
//! pattern as the rest of [`super`]: owned C arguments, one result queue per call on a blocking thread,
//! RAII guards over every librdkafka object we create, enum values read as plain integers.

use std::ffi::{c_char, c_int};
use std::fmt;
use std::ptr;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::ffi::{AdminOptions, ERR_FAIL, ERR_INVALID_ARG, Queue, array, c_string, cstring, run};
use super::types::{AclOperation, AdminError};

// Our own declarations of the ACL functions that take or return librdkafka enums, typed as plain
// integers (see the parent module's doc). Same symbols and C signatures as in `rdkafka::bindings`.
unsafe extern "C" {
    fn rd_kafka_AclBinding_new(
        restype: c_int,
        name: *const c_char,
        resource_pattern_type: c_int,
        principal: *const c_char,
        host: *const c_char,
        operation: c_int,
        permission_type: c_int,
        errstr: *mut c_char,
        errstr_size: usize,
    ) -> *mut rd::rd_kafka_AclBinding_t;
    fn rd_kafka_AclBindingFilter_new(
        restype: c_int,
        name: *const c_char,
        resource_pattern_type: c_int,
        principal: *const c_char,
        host: *const c_char,
        operation: c_int,
        permission_type: c_int,
        errstr: *mut c_char,
        errstr_size: usize,
    ) -> *mut rd::rd_kafka_AclBindingFilter_t;
    fn rd_kafka_AclBinding_restype(acl: *const rd::rd_kafka_AclBinding_t) -> c_int;
    fn rd_kafka_AclBinding_resource_pattern_type(acl: *const rd::rd_kafka_AclBinding_t) -> c_int;
    fn rd_kafka_AclBinding_operation(acl: *const rd::rd_kafka_AclBinding_t) -> c_int;
    fn rd_kafka_AclBinding_permission_type(acl: *const rd::rd_kafka_AclBinding_t) -> c_int;
}

/// `rd_kafka_ResourceType_t` / `rd_kafka_ResourcePatternType_t` / `rd_kafka_AclPermissionType_t` /
/// `rd_kafka_AclOperation_t` "any" value (filters only).
const ANY: c_int = 1;

/// The kind of resource an ACL binding is about, as Kafka's `ResourceType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclResource {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    /// A code this build does not know.
    Other(i32),
}

impl AclResource {
    fn from_code(code: c_int) -> AclResource {
        match code {
            2 => AclResource::Topic,
            3 => AclResource::Group,
            4 => AclResource::Cluster,
            5 => AclResource::TransactionalId,
            other => AclResource::Other(other),
        }
    }

    fn code(self) -> c_int {
        match self {
            AclResource::Topic => 2,
            AclResource::Group => 3,
            AclResource::Cluster => 4,
            AclResource::TransactionalId => 5,
            AclResource::Other(c) => c,
        }
    }
}

/// How a binding's resource name matches resources, as Kafka's `PatternType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclPattern {
    /// The name exactly (or every resource, for `*`).
    Literal,
    /// Every resource whose name starts with it.
    Prefixed,
    /// A code this build does not know.
    Other(i32),
}

impl AclPattern {
    fn from_code(code: c_int) -> AclPattern {
        match code {
            3 => AclPattern::Literal,
            4 => AclPattern::Prefixed,
            other => AclPattern::Other(other),
        }
    }

    fn code(self) -> c_int {
        match self {
            AclPattern::Literal => 3,
            AclPattern::Prefixed => 4,
            AclPattern::Other(c) => c,
        }
    }
}

/// Whether a binding allows or denies its operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclPermission {
    Deny,
    Allow,
    /// A code this build does not know.
    Other(i32),
}

impl AclPermission {
    fn from_code(code: c_int) -> AclPermission {
        match code {
            2 => AclPermission::Deny,
            3 => AclPermission::Allow,
            other => AclPermission::Other(other),
        }
    }

    fn code(self) -> c_int {
        match self {
            AclPermission::Deny => 2,
            AclPermission::Allow => 3,
            AclPermission::Other(c) => c,
        }
    }
}

/// One ACL binding: `principal` from `host` is allowed or denied `operation` on the resources that
/// `resource`, `name` and `pattern` match.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource: AclResource,
    pub name: String,
    pub pattern: AclPattern,
    /// `User:alice`, `User:*`, ...
    pub principal: String,
    /// `*` for any host.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl fmt::Display for AclBinding {
    /// As `kafka-acls --list` prints a binding, with its resource.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {} ({:?}): {} {} {} from {}",
            self.resource,
            self.name,
            self.pattern,
            self.principal,
            match self.permission {
                AclPermission::Allow => "ALLOW",
                AclPermission::Deny => "DENY",
                AclPermission::Other(_) => "UNKNOWN",
            },
            self.operation.as_str(),
            self.host
        )
    }
}

/// Which bindings [`describe_acls`] returns: those of resources of type `resource`, named `name` (any
/// name if `None`), with pattern type `pattern` (any if `None`), for any principal, host, operation
/// and permission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    pub resource: AclResource,
    pub name: Option<String>,
    pub pattern: Option<AclPattern>,
}

/// The bindings `filter` matches (DescribeAcls).
///
/// librdkafka 2.12 quirk: it reads the response's top-level error but does not report it, so a cluster
/// without an authorizer (`SECURITY_DISABLED`) and a principal without Describe on the cluster
/// (`CLUSTER_AUTHORIZATION_FAILED`) both answer an empty list. Such an `Err` comes only from a librdkafka
/// that reports it; callers that must tell a refusal from no bindings ask [`super::describe_cluster`]
/// for the principal's operations on the cluster.
pub async fn describe_acls<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    filter: &AclFilter,
    timeout: Duration,
) -> Result<Vec<AclBinding>, AdminError> {
    const OP: &str = "DescribeAcls";
    let name = filter.name.as_deref().map(|n| c_string(OP, "resource name", n)).transpose()?;
    let (resource, pattern) = (filter.resource.code(), filter.pattern.map_or(ANY, AclPattern::code));
    run(admin, OP, move |rk, cancel| {
        let mut errstr = [0 as c_char; 256];
        // SAFETY: the name is NULL (any) or a valid C string, copied; principal and host NULL mean any;
        // `errstr` is writable for its length. The filter is ours and only the guard frees it.
        let filter = Binding(unsafe {
            rd_kafka_AclBindingFilter_new(
                resource,
                name.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
                pattern,
                ptr::null(),
                ptr::null(),
                ANY,
                ANY,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        });
        if filter.0.is_null() {
            // SAFETY: librdkafka wrote a NUL-terminated message into `errstr` (or left it zeroed).
            let why = unsafe { cstring(errstr.as_ptr()) };
            return Err(AdminError::from_code(OP, ERR_INVALID_ARG, Some(format!("ACL filter: {why}"))));
        }
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        // SAFETY: valid handle, filter, options and queue; librdkafka copies the filter.
        unsafe { rd::rd_kafka_DescribeAcls(rk.0, filter.0, options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_DESCRIBEACLS_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is a DescribeAcls result (its top-level error checked by `wait`); the array
        // and the bindings belong to it, and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_DescribeAcls_result(event.0);
            let mut cnt = 0usize;
            let acls = rd::rd_kafka_DescribeAcls_result_acls(result, &mut cnt);
            Ok(array(acls, cnt).iter().map(|&b| read_binding(b)).collect())
        }
    })
    .await
}

/// Creates `bindings` (CreateAcls); creating one that exists already succeeds. Returns each binding's
/// error (`None`: created), in the order given: a principal without Alter on the cluster gets
/// `CLUSTER_AUTHORIZATION_FAILED` for each, a cluster without an authorizer `SECURITY_DISABLED`. Only a
/// failure of the whole call is an `Err`. An empty list does nothing.
pub async fn create_acls<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    bindings: &[AclBinding],
    timeout: Duration,
) -> Result<Vec<Option<AdminError>>, AdminError> {
    const OP: &str = "CreateAcls";
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let owned = owned(OP, bindings)?;
    run(admin, OP, move |rk, cancel| {
        let created = owned.iter().map(|o| o.build(OP, rd_kafka_AclBinding_new)).collect::<Result<Vec<_>, _>>()?;
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut ptrs: Vec<*mut rd::rd_kafka_AclBinding_t> = created.iter().map(|b| b.0).collect();
        // SAFETY: valid handle, options and queue; `ptrs` holds `ptrs.len()` valid bindings, which
        // librdkafka copies (ours to destroy, through `created`).
        unsafe { rd::rd_kafka_CreateAcls(rk.0, ptrs.as_mut_ptr(), ptrs.len(), options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_CREATEACLS_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is a CreateAcls result; the array, the results and their error objects belong
        // to it, and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_CreateAcls_result(event.0);
            let mut cnt = 0usize;
            let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut cnt);
            per_binding(OP, array(results, cnt).iter().map(|&r| rd::rd_kafka_acl_result_error(r)), &owned)
        }
    })
    .await
}

/// Deletes exactly `bindings` (DeleteAcls with one filter per binding, every field of it given, so a
/// filter matches that binding alone). Returns each binding's error (`None`: deleted, or there was
/// none to delete), in the order given: a principal without Alter on the cluster gets
/// `CLUSTER_AUTHORIZATION_FAILED` for each. Only a failure of the whole call is an `Err`. An empty list
/// does nothing.
pub async fn delete_acls<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    bindings: &[AclBinding],
    timeout: Duration,
) -> Result<Vec<Option<AdminError>>, AdminError> {
    const OP: &str = "DeleteAcls";
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let owned = owned(OP, bindings)?;
    run(admin, OP, move |rk, cancel| {
        let filters =
            owned.iter().map(|o| o.build(OP, rd_kafka_AclBindingFilter_new)).collect::<Result<Vec<_>, _>>()?;
        let options = AdminOptions::new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS, OP)?;
        options.set_request_timeout(timeout, OP)?;
        let queue = Queue::new(rk, OP)?;
        let mut ptrs: Vec<*mut rd::rd_kafka_AclBindingFilter_t> = filters.iter().map(|f| f.0).collect();
        // SAFETY: valid handle, options and queue; `ptrs` holds `ptrs.len()` valid filters, which
        // librdkafka copies (ours to destroy, through `filters`).
        unsafe { rd::rd_kafka_DeleteAcls(rk.0, ptrs.as_mut_ptr(), ptrs.len(), options.0, queue.0) };
        let event = queue.wait(rd::RD_KAFKA_EVENT_DELETEACLS_RESULT, timeout, cancel, OP)?;
        // SAFETY: `event` is a DeleteAcls result; the array, the responses and their error objects
        // belong to it, and it outlives this block.
        unsafe {
            let result = rd::rd_kafka_event_DeleteAcls_result(event.0);
            let mut cnt = 0usize;
            let responses = rd::rd_kafka_DeleteAcls_result_responses(result, &mut cnt);
            let errors = array(responses, cnt).iter().map(|&r| rd::rd_kafka_DeleteAcls_result_response_error(r));
            per_binding(OP, errors, &owned)
        }
    })
    .await
}

/// A binding with its strings as owned C strings, made before the call's blocking thread.
struct Owned {
    binding: AclBinding,
    name: std::ffi::CString,
    principal: std::ffi::CString,
    host: std::ffi::CString,
}

/// The C strings of every binding; a string with a NUL fails before any call.
fn owned(op: &'static str, bindings: &[AclBinding]) -> Result<Vec<Owned>, AdminError> {
    bindings
        .iter()
        .map(|b| {
            Ok(Owned {
                binding: b.clone(),
                name: c_string(op, "resource name", &b.name)?,
                principal: c_string(op, "principal", &b.principal)?,
                host: c_string(op, "host", &b.host)?,
            })
        })
        .collect()
}

/// `rd_kafka_AclBinding_new` or `rd_kafka_AclBindingFilter_new` (same signature, same type).
type NewBinding = unsafe extern "C" fn(
    c_int,
    *const c_char,
    c_int,
    *const c_char,
    *const c_char,
    c_int,
    c_int,
    *mut c_char,
    usize,
) -> *mut rd::rd_kafka_AclBinding_t;

impl Owned {
    /// The binding (or the filter matching exactly it) as librdkafka's object, freed by its guard.
    fn build(&self, op: &'static str, new: NewBinding) -> Result<Binding, AdminError> {
        let b = &self.binding;
        let mut errstr = [0 as c_char; 256];
        // SAFETY: the strings are valid C strings, copied; `errstr` is writable for its length. The
        // object is ours and only its guard frees it.
        let built = Binding(unsafe {
            new(
                b.resource.code(),
                self.name.as_ptr(),
                b.pattern.code(),
                self.principal.as_ptr(),
                self.host.as_ptr(),
                b.operation.code(),
                b.permission.code(),
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        });
        if built.0.is_null() {
            // SAFETY: librdkafka wrote a NUL-terminated message into `errstr` (or left it zeroed).
            let why = unsafe { cstring(errstr.as_ptr()) };
            return Err(AdminError::from_code(op, ERR_INVALID_ARG, Some(format!("ACL binding {b}: {why}"))));
        }
        Ok(built)
    }
}

/// Each binding's error from a result's error objects, in order; a result of another length fails.
///
/// # Safety
/// Every pointer `errors` yields is NULL or a valid error object that outlives the call.
unsafe fn per_binding(
    op: &'static str,
    errors: impl ExactSizeIterator<Item = *const rd::rd_kafka_error_t>,
    owned: &[Owned],
) -> Result<Vec<Option<AdminError>>, AdminError> {
    if errors.len() != owned.len() {
        let why = format!("{} results for {} bindings", errors.len(), owned.len());
        return Err(AdminError::from_code(op, ERR_FAIL, Some(why)));
    }
    Ok(errors
        .zip(owned)
        .map(|(e, o)| {
            // SAFETY: `e` is NULL or valid (caller).
            unsafe { AdminError::from_error_object(op, e) }
                .map(|e| AdminError { message: format!("ACL binding {}: {}", o.binding, e.message), ..e })
        })
        .collect())
}

/// Copies a binding out of a result.
///
/// # Safety
/// `b` is a valid binding that stays valid for the call.
unsafe fn read_binding(b: *const rd::rd_kafka_AclBinding_t) -> AclBinding {
    // SAFETY: `b` is valid (caller); the accessors only read it, the strings belong to it and are copied.
    unsafe {
        AclBinding {
            resource: AclResource::from_code(rd_kafka_AclBinding_restype(b)),
            name: cstring(rd::rd_kafka_AclBinding_name(b)),
            pattern: AclPattern::from_code(rd_kafka_AclBinding_resource_pattern_type(b)),
            principal: cstring(rd::rd_kafka_AclBinding_principal(b)),
            host: cstring(rd::rd_kafka_AclBinding_host(b)),
            operation: AclOperation::from_code(rd_kafka_AclBinding_operation(b)),
            permission: AclPermission::from_code(rd_kafka_AclBinding_permission_type(b)),
        }
    }
}

/// An ACL binding or binding filter that we created (`rd_kafka_AclBindingFilter_t` is the same type).
struct Binding(*mut rd::rd_kafka_AclBinding_t);

impl Drop for Binding {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: ours (librdkafka copies bindings and filters passed to calls), destroyed once.
            unsafe { rd::rd_kafka_AclBinding_destroy(self.0) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(operation: AclOperation, permission: AclPermission) -> AclBinding {
        AclBinding {
            resource: AclResource::Topic,
            name: "orders".into(),
            pattern: AclPattern::Literal,
            principal: "User:bob".into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_stay_numbers() {
        for r in [AclResource::Topic, AclResource::Group, AclResource::Cluster, AclResource::TransactionalId] {
            assert_eq!(AclResource::from_code(r.code()), r);
        }
        for p in [AclPattern::Literal, AclPattern::Prefixed] {
            assert_eq!(AclPattern::from_code(p.code()), p);
        }
        for p in [AclPermission::Allow, AclPermission::Deny] {
            assert_eq!(AclPermission::from_code(p.code()), p);
        }
        for op in [AclOperation::All, AclOperation::Read, AclOperation::Write, AclOperation::IdempotentWrite] {
            assert_eq!(AclOperation::from_code(op.code()), op);
        }
        // librdkafka's own numbering, which the codes must match.
        assert_eq!(AclResource::Topic.code(), rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC as c_int);
        assert_eq!(
            AclPattern::Prefixed.code(),
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED as c_int
        );
        assert_eq!(
            AclPermission::Allow.code(),
            rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW as c_int
        );
        assert_eq!(AclOperation::Read.code(), rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_READ as c_int);
        assert_eq!(AclPattern::from_code(99), AclPattern::Other(99));
        assert_eq!(AclPermission::from_code(0), AclPermission::Other(0));
    }

    #[test]
    fn a_binding_reads_like_kafka_acls_prints_it() {
        let b = binding(AclOperation::Read, AclPermission::Allow);
        assert_eq!(b.to_string(), "Topic orders (Literal): User:bob ALLOW Read from *");
    }

    #[test]
    fn bad_strings_fail_before_any_call() {
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1").create().expect("admin client");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut b = binding(AclOperation::Read, AclPermission::Allow);
        b.principal = "User:b\0b".into();
        let e = rt.block_on(create_acls(&admin, &[b], Duration::from_secs(1))).expect_err("NUL in principal");
        assert_eq!(e.name, "_INVALID_ARG");
        // librdkafka refuses a binding it cannot build (an unknown operation) without asking a broker.
        let b = binding(AclOperation::Other(99), AclPermission::Allow);
        let e = rt.block_on(create_acls(&admin, &[b], Duration::from_secs(1))).expect_err("unknown operation");
        assert_eq!(e.name, "_INVALID_ARG", "{e}");
        assert!(rt.block_on(create_acls(&admin, &[], Duration::from_secs(1))).expect("nothing to do").is_empty());
        let filter = AclFilter { resource: AclResource::Topic, name: None, pattern: Some(AclPattern::Literal) };
        let e = rt.block_on(describe_acls(&admin, &filter, Duration::from_millis(300))).expect_err("no broker");
        assert_eq!(e.name, "_TIMED_OUT", "{e}");
    }
}
