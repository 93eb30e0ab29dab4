//! The smallest HTTP/1.1 server a Prometheus scrape needs, on std: `GET /metrics` (and
//! `HEAD`), 404 for any other path, 405 for any other method, 400 for what is not a
//! request line, 431 past [`MAX_REQUEST`] bytes of request head. One client at a time,
//! `Connection: close`, reads and writes bounded by [`IO_TIMEOUT`]: a slow or hostile
//! client costs the listener at most that, and the data path nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The most bytes of request head read (request line and headers).
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long one read or write of a client may take, and a whole request at most.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The exposition's media type (OpenMetrics 1.0, what Prometheus asks for first).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How often the accept loop looks at the stop flag when no client comes.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// A bound metrics listener (bound at start-up, so an address in use is a start-up
/// error; served once the gateway runs).
#[derive(Debug)]
pub struct MetricsListener {
    listener: TcpListener,
}

impl MetricsListener {
    /// Binds `addr` (TCP).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(MetricsListener { listener })
    }

    /// The address bound (the port chosen when `addr` said 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers clients until `stop` is set, one at a time; `body` renders the metrics of
    /// a `GET /metrics`.
    pub fn serve(&self, stop: &AtomicBool, body: &dyn Fn() -> String) {
        while !stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // A client that fails or stalls is dropped; the next one is served.
                    let _ = handle(stream, body);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(ACCEPT_POLL)
                }
                Err(_) => std::thread::sleep(ACCEPT_POLL),
            }
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Request {
    /// `GET /metrics` (`head`: `HEAD`, headers only).
    Metrics { head: bool },
    /// Another path.
    NotFound,
    /// Another method.
    BadMethod,
    /// Not an HTTP request line.
    Bad,
}

/// Parses a request head's first line.
pub(super) fn parse(head: &[u8]) -> Request {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Request::Bad;
    };
    let mut words = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Bad;
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Request::Metrics {
            head: method == "HEAD",
        },
        ("GET" | "HEAD", _) => Request::NotFound,
        _ => Request::BadMethod,
    }
}

/// Reads one request head from `stream`, answers it and closes.
fn handle(mut stream: TcpStream, body: &dyn Fn() -> String) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = [0u8; MAX_REQUEST];
    let mut n = 0;
    let complete = loop {
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
            || buf[..n].windows(2).any(|w| w == b"\n\n")
        {
            break true;
        }
        if n == buf.len() || Instant::now() > deadline {
            break false;
        }
        match stream.read(&mut buf[n..])? {
            0 => break false,
            k => n += k,
        }
    };
    let (status, content) = if !complete && n == buf.len() {
        ("431 Request Header Fields Too Large", None)
    } else if !complete {
        return Ok(()); // closed or timed out mid-request: nothing to answer
    } else {
        match parse(&buf[..n]) {
            Request::Metrics { head } => ("200 OK", Some((body(), head))),
            Request::NotFound => ("404 Not Found", None),
            Request::BadMethod => ("405 Method Not Allowed", None),
            Request::Bad => ("400 Bad Request", None),
        }
    };
    let reply = match content {
        Some((text, head)) => {
            let mut r = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                text.len()
            )
            .into_bytes();
            if !head {
                r.extend_from_slice(text.as_bytes());
            }
            r
        }
        None => {
            let text = format!("{status}: quicknat serves GET /metrics\n");
            let allow = if status.starts_with("405") {
                "Allow: GET, HEAD\r\n"
            } else {
                ""
            };
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n{allow}Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            )
            .into_bytes()
        }
    };
    stream.write_all(&reply)?;
    stream.flush()
}
