//! A plain HTTP/1.1 client: one request per connection, TLS through the OpenSSL librdkafka links anyway.
//! For the `ferry` commands that call a node ([`request`], [`probe`]) and for schema registries
//! ([`call`]): calls are rare, so nothing is pooled, and no dependency is added for them.

use std::path::Path;
use std::time::Duration;

/// `GET url` (http:// or https://) with `timeout` for connecting and for each read and write; returns
/// the response's status code. For `ferry health`: no redirects, no body, no keep-alive. `ca` is a PEM
/// file of certificates to trust for https (besides the system's); `insecure` skips verification.
pub fn probe(url: &str, ca: Option<&Path>, insecure: bool, timeout: Duration) -> Result<u16, String> {
    get(url, ca, insecure, timeout).map(|(code, _)| code)
}

/// `GET url` like [`probe`], returning the status code and the body (for `ferry status`).
pub fn get(url: &str, ca: Option<&Path>, insecure: bool, timeout: Duration) -> Result<(u16, Vec<u8>), String> {
    request("GET", url, &ClientOptions { ca, insecure, bearer: None, timeout })
}

/// How [`request`] talks to a node.
#[derive(Clone, Copy, Debug)]
pub struct ClientOptions<'a> {
    /// PEM file of certificates to trust for https (besides the system's).
    pub ca: Option<&'a Path>,
    /// Skip the verification of an https node's certificate.
    pub insecure: bool,
    /// Sent as `Authorization: Bearer <token>` (the admin token of mutating endpoints).
    pub bearer: Option<&'a str>,
    /// For connecting and for each read and write.
    pub timeout: Duration,
}

/// `method url` (http:// or https://) without a body; returns the status code and the body. For the
/// `ferry` commands that talk to a node: no redirects, no keep-alive. Errors say which step failed
/// (resolving, connecting, the TLS handshake, the exchange), never the token.
pub fn request(method: &str, url: &str, opts: &ClientOptions<'_>) -> Result<(u16, Vec<u8>), String> {
    let ClientOptions { ca, insecure, bearer, timeout } = *opts;
    let authorization = bearer.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("User-Agent", "ferry-cli")];
    if let Some(a) = &authorization {
        headers.push(("Authorization", a));
    }
    let tls = ClientTls { ca, cert: None, key: None, insecure };
    call(&Call { method, url, headers: &headers, body: None, tls, timeout })
}

/// TLS of an outgoing call: what to trust and what to show.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientTls<'a> {
    /// PEM file of certificates to trust for https (besides the system's).
    pub ca: Option<&'a Path>,
    /// A client certificate (PEM) and its key, for servers that ask for one.
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
    /// Skip the verification of the server's certificate.
    pub insecure: bool,
}

/// One HTTP/1.1 exchange. No `Debug`: its headers may carry credentials.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub method: &'a str,
    pub url: &'a str,
    /// Sent as they are (`Host`, `Connection` and `Content-Length` are the client's).
    pub headers: &'a [(&'a str, &'a str)],
    /// A body; a body-less POST or PUT still says `Content-Length: 0`.
    pub body: Option<&'a [u8]>,
    pub tls: ClientTls<'a>,
    /// For connecting and for each read and write.
    pub timeout: Duration,
}

/// The largest answer [`call`] reads.
const MAX_ANSWER: usize = 16 << 20;

/// One request on a connection of its own (`Connection: close`): the status code and the body, a
/// chunked body decoded. No redirects. Errors say which step failed (resolving, connecting, the TLS
/// handshake, the exchange) and never quote a header (they may carry credentials).
pub fn call(c: &Call<'_>) -> Result<(u16, Vec<u8>), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let (tls, rest) = match (c.url.strip_prefix("http://"), c.url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err("the URL must start with http:// or https://".into()),
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or("unclosed `[` in the URL's host")?;
            let port = after.strip_prefix(':').map_or(Ok(default_port), str::parse);
            (host, port.map_err(|_| "bad port in the URL")?)
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().map_err(|_| "bad port in the URL")?),
            None => (authority, default_port),
        },
    };
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let stream = TcpStream::connect_timeout(&addr, c.timeout).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(c.timeout))
        .and_then(|()| stream.set_write_timeout(Some(c.timeout)))
        .map_err(|e| e.to_string())?;
    let mut request = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", c.method);
    for (name, value) in c.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    // A body-less POST still says so: servers (the node among them) refuse a body without a length.
    if c.body.is_some() || !(c.method == "GET" || c.method == "HEAD") {
        request.push_str(&format!("Content-Length: {}\r\n", c.body.map_or(0, <[u8]>::len)));
    }
    request.push_str("Connection: close\r\n\r\n");
    let mut request = request.into_bytes();
    request.extend_from_slice(c.body.unwrap_or_default());
    let mut answer = Vec::new();
    let mut exchange = |s: &mut dyn ReadWrite| -> std::io::Result<()> {
        s.write_all(&request)?;
        let mut buf = [0u8; 8192];
        // The whole answer (the server closes the connection), up to MAX_ANSWER.
        while answer.len() < MAX_ANSWER {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        Ok(())
    };
    if tls {
        use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        if let Some(ca) = c.tls.ca {
            builder.set_ca_file(ca).map_err(|e| format!("cannot use the CA file {}: {e}", ca.display()))?;
        }
        if let Some(cert) = c.tls.cert {
            builder
                .set_certificate_chain_file(cert)
                .map_err(|e| format!("cannot use the certificate file {}: {e}", cert.display()))?;
        }
        if let Some(key) = c.tls.key {
            builder
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| format!("cannot use the key file {}: {e}", key.display()))?;
        }
        if c.tls.insecure {
            builder.set_verify(SslVerifyMode::NONE);
        }
        let mut config = builder.build().configure().map_err(|e| e.to_string())?;
        config.set_verify_hostname(!c.tls.insecure);
        let mut s = config.connect(host, stream).map_err(|e| format!("TLS handshake with {addr} failed: {e}"))?;
        exchange(&mut s).map_err(|e| format!("{addr}: {e}"))?;
    } else {
        let mut s = stream;
        exchange(&mut s).map_err(|e| format!("{addr}: {e}"))?;
    }
    parse_answer(&answer).map_err(|why| format!("{addr}: {why}"))
}

/// An HTTP/1.1 answer read to its end: the status code and the body (de-chunked when it is chunked).
fn parse_answer(answer: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let line_end = answer.windows(2).position(|w| w == b"\r\n").unwrap_or(answer.len());
    let status = String::from_utf8_lossy(&answer[..line_end]).to_string();
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .filter(|_| status.starts_with("HTTP/"))
        .ok_or("not an HTTP answer")?;
    let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok((code, Vec::new())) };
    let head = String::from_utf8_lossy(&answer[..head_end]).to_ascii_lowercase();
    let body = &answer[head_end + 4..];
    let chunked = head
        .lines()
        .any(|l| l.split_once(':').is_some_and(|(k, v)| k.trim() == "transfer-encoding" && v.contains("chunked")));
    if !chunked {
        return Ok((code, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("a chunked body cut short")?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "a malformed chunk size")?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok((code, out));
        }
        if rest.len() < size {
            return Err("a chunked body cut short".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_answer(plain), Ok((200, b"hello".to_vec())));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked), Ok((404, b"hello".to_vec())));
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nhel";
        assert!(parse_answer(cut).is_err());
        assert!(parse_answer(b"SSH-2.0-OpenSSH").is_err());
    }
}
