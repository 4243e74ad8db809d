//! A small HTTP/1.1 server side (request reading, response writing) and a
//! parser for captured HTTP transcripts.
//!
//! Hand-written rather than hyper so the fixture server controls the bytes
//! AMT-style: chunk sizes as four upper-case hex digits, `Connection: close`
//! on 401 and faults, captured transcripts replayed byte for byte, and
//! stalls in the middle of a body.

use std::io;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// Largest request head and body accepted.
const MAX_HEAD: usize = 32 * 1024;
const MAX_BODY: usize = 2 * 1024 * 1024;
/// AMT 15 sends chunks of at most 0x2FA bytes (see the captured transcript).
pub const AMT_CHUNK: usize = 0x2FA;

/// `Server:` of the AMT 15 capture.
pub const AMT_SERVER: &str = "Intel(R) Active Management Technology 15.0.23.1706";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub target: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn wants_close(&self) -> bool {
        self.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

async fn read_line<R: AsyncBufReadExt + Unpin>(r: &mut R, budget: &mut usize) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = (&mut *r).take(*budget as u64 + 1).read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Ok(None);
    }
    if n > *budget {
        return Err(bad("request head too large"));
    }
    *budget -= n;
    if !line.ends_with(b"\n") {
        return Err(bad("connection closed inside the request head"));
    }
    line.pop();
    if line.ends_with(b"\r") {
        line.pop();
    }
    String::from_utf8(line).map(Some).map_err(|_| bad("non-UTF-8 request head"))
}

/// Read one request; `Ok(None)` when the peer closed the connection cleanly.
pub async fn read_request<R: AsyncBufReadExt + Unpin>(r: &mut R) -> io::Result<Option<HttpRequest>> {
    let mut budget = MAX_HEAD;
    let request_line = loop {
        match read_line(r, &mut budget).await? {
            None => return Ok(None),
            Some(l) if l.is_empty() => continue, // tolerate stray CRLF between requests
            Some(l) => break l,
        }
    };
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return Err(bad(format!("bad request line `{request_line}`")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad("not HTTP/1.x"));
    }
    let mut headers = Vec::new();
    loop {
        let line = read_line(r, &mut budget).await?.ok_or_else(|| bad("connection closed in headers"))?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').ok_or_else(|| bad("header without `:`"))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut req = HttpRequest { method: method.into(), target: target.into(), headers, body: Vec::new() };
    if req.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        req.body = read_chunked(r).await?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad Content-Length"))?;
        if len > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).await?;
        req.body = body;
    }
    Ok(Some(req))
}

async fn read_chunked<R: AsyncBufReadExt + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut budget = 1024;
        let line = read_line(r, &mut budget).await?.ok_or_else(|| bad("closed in chunk size"))?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad(format!("bad chunk size `{line}`")))?;
        if size == 0 {
            // trailers
            loop {
                let mut budget = MAX_HEAD;
                match read_line(r, &mut budget).await? {
                    Some(l) if !l.is_empty() => continue,
                    _ => return Ok(body),
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).await?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).await?;
        if &crlf != b"\r\n" {
            return Err(bad("chunk not followed by CRLF"));
        }
    }
}

/// HTTP date of "now" (RFC 9110 IMF-fixdate), as AMT sends in `Date:`.
pub fn http_date() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mon =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][(month - 1) as usize];
    format!("{weekday}, {d:02} {mon} {year} {h:02}:{m:02}:{s:02} GMT")
}

/// How a response body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    ContentLength,
    /// AMT-style chunks of at most [`AMT_CHUNK`] bytes.
    Chunked,
}

/// Serialise a response head and body.
pub fn render(status: u16, reason: &str, headers: &[(&str, String)], body: &[u8], framing: Framing) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    match framing {
        Framing::ContentLength => {
            out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
        }
        Framing::Chunked => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            for chunk in body.chunks(AMT_CHUNK) {
                out.extend_from_slice(format!("{:04X}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
    out
}

pub async fn write_all<W: AsyncWriteExt + Unpin>(w: &mut W, bytes: &[u8]) -> io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

/// A captured HTTP response, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    pub status: u16,
    /// Header names as captured.
    pub headers: Vec<(String, String)>,
    /// The body with any chunked framing removed.
    pub body: Vec<u8>,
    /// Whether the body was chunked.
    pub chunked: bool,
}

impl Transcript {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Parse a response transcript (`HTTP/1.1 …\r\n` head, then the body as
    /// sent on the wire). Chunk sizes and CRLFs are checked.
    pub fn parse(raw: &[u8]) -> Result<Transcript, String> {
        let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of head")?;
        let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "head is not UTF-8")?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().ok_or("empty head")?;
        let mut sp = status_line.splitn(3, ' ');
        let (Some(v), Some(code)) = (sp.next(), sp.next()) else {
            return Err(format!("bad status line `{status_line}`"));
        };
        if !v.starts_with("HTTP/1.") {
            return Err("not HTTP/1.x".into());
        }
        let status: u16 = code.parse().map_err(|_| "bad status code")?;
        let mut headers = Vec::new();
        for l in lines {
            let (k, val) = l.split_once(':').ok_or_else(|| format!("bad header `{l}`"))?;
            headers.push((k.trim().to_owned(), val.trim().to_owned()));
        }
        let mut t = Transcript { status, headers, body: Vec::new(), chunked: false };
        let rest = &raw[head_end + 4..];
        if t.header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            t.chunked = true;
            let mut i = 0;
            loop {
                let eol = rest[i..].windows(2).position(|w| w == b"\r\n").ok_or("chunk size without CRLF")? + i;
                let size_text = std::str::from_utf8(&rest[i..eol]).map_err(|_| "bad chunk size")?;
                let size =
                    usize::from_str_radix(size_text.trim(), 16).map_err(|_| format!("bad chunk size `{size_text}`"))?;
                i = eol + 2;
                if size == 0 {
                    break;
                }
                if i + size + 2 > rest.len() {
                    return Err(format!("chunk of {size} bytes overruns the transcript"));
                }
                t.body.extend_from_slice(&rest[i..i + size]);
                if &rest[i + size..i + size + 2] != b"\r\n" {
                    return Err("chunk not followed by CRLF".into());
                }
                i += size + 2;
            }
        } else if let Some(len) = t.header("Content-Length") {
            let len: usize = len.parse().map_err(|_| "bad Content-Length")?;
            if rest.len() < len {
                return Err(format!("Content-Length {len} but {} bytes follow", rest.len()));
            }
            t.body = rest[..len].to_vec();
        } else {
            t.body = rest.to_vec();
        }
        Ok(t)
    }
}

/// Read until the peer closes (used while stalling: returns when the client gives up).
pub async fn until_closed<R: AsyncReadExt + Unpin>(r: &mut R) {
    let mut buf = [0u8; 512];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn reads_requests_with_length_and_chunks() {
        let raw = b"POST /wsman HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcPOST /wsman HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n1\r\nf\r\n0\r\n\r\n";
        let mut r = BufReader::new(&raw[..]);
        let a = read_request(&mut r).await.unwrap().unwrap();
        assert_eq!((a.method.as_str(), a.target.as_str(), a.body.as_slice()), ("POST", "/wsman", &b"abc"[..]));
        assert_eq!(a.header("host"), Some("x"));
        let b = read_request(&mut r).await.unwrap().unwrap();
        assert_eq!(b.body, b"def");
        assert!(read_request(&mut r).await.unwrap().is_none());
    }

    #[test]
    fn render_chunked_round_trips() {
        let body = vec![b'x'; AMT_CHUNK * 2 + 5];
        let raw = render(200, "OK", &[("Server", AMT_SERVER.into())], &body, Framing::Chunked);
        assert!(std::str::from_utf8(&raw).unwrap().contains("\r\n02FA\r\n"));
        let t = Transcript::parse(&raw).unwrap();
        assert!(t.chunked);
        assert_eq!(t.body, body);
        assert_eq!(t.header("server"), Some(AMT_SERVER));
    }

    #[test]
    fn date_format() {
        let d = http_date();
        assert!(d.ends_with(" GMT") && d.len() == 29, "{d}");
    }
}
