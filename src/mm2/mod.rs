//! MirrorMaker 2's on-the-wire formats: the records ferry writes to and reads from MM2's
//! internal topics, and Kafka Connect's source-offset encoding used for copy progress.

pub mod connect_offsets;
pub mod murmur2;
pub mod records;
