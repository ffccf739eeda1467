//! A consumer-group member kept alive on a background thread, so that a group is *active* while a test
//! checks that nothing writes its offsets behind its back; and a plain HTTP GET for ferry's endpoints.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::{group_offsets, wait_for};

pub struct ActiveMember {
    bootstrap: String,
    group: String,
    topic: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ActiveMember {
    /// Subscribe to `topic` as a member of `group` (never committing) and keep polling until dropped.
    /// Returns once the member owns partitions, i.e. the group is Stable with one member.
    pub fn join(bootstrap: &str, group: &str, topic: &str) -> ActiveMember {
        let stop = Arc::new(AtomicBool::new(false));
        let assigned = Arc::new(AtomicBool::new(false));
        let (b, g, t, s, a) =
            (bootstrap.to_string(), group.to_string(), topic.to_string(), stop.clone(), assigned.clone());
        let thread = std::thread::spawn(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("group.id", &g)
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "latest")
                .create()
                .expect("member consumer");
            consumer.subscribe(&[&t]).expect("subscribe");
            while !s.load(Ordering::SeqCst) {
                let _ = consumer.poll(Duration::from_millis(100));
                if consumer.assignment().is_ok_and(|a| a.count() > 0) {
                    a.store(true, Ordering::SeqCst);
                }
            }
        });
        wait_for(Duration::from_secs(60), "the member owns partitions", || assigned.load(Ordering::SeqCst));
        ActiveMember {
            bootstrap: bootstrap.into(),
            group: group.into(),
            topic: topic.into(),
            stop,
            thread: Some(thread),
        }
    }

    /// The group's committed offset for partition 0 of the topic.
    pub fn committed(&self) -> Option<i64> {
        group_offsets(&self.bootstrap, &self.group, &[(&self.topic, 0)])[0]
    }
}

impl Drop for ActiveMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `GET path` on `addr`; returns the body (panics on connection errors).
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}
