//! Plain HTTP/1.0 requests to a node's listener, with the status code (the tests' own client: no
//! dependency, no keep-alive).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// `method path` with `body` (and extra `headers`); returns the status code and the body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    try_http_request(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path} at {addr}: {e}"))
}

/// [`http_request`], with an error instead of a panic when nothing answers (a server still starting).
pub fn try_http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// `POST path` without a body.
pub fn http_post(addr: SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, "POST", path, &[], b"")
}
