//! What a caught panic said, for the error that replaces it (actors, the producer's report thread).

/// The message of a caught panic (`panic!` with a literal or a formatted string).
pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}
