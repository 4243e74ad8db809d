//! A strict `multipart/form-data` reader (RFC 7578, RFC 2046 §5.1) for the
//! mockup's multipart HTTP push: the boundary from the `Content-Type`,
//! every part's headers and bytes, nothing after the closing delimiter but
//! an epilogue. It is the double's own reading of what a provider sent,
//! independent of the client library that wrote it.

/// One part of a form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormPart {
    /// `name` of its `Content-Disposition: form-data`.
    pub name: String,
    /// `filename`, if any.
    pub filename: Option<String>,
    /// Its `Content-Type`, if any (lower-cased, parameters kept).
    pub content_type: Option<String>,
    pub data: Vec<u8>,
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Result<String, String> {
    let kind = content_type.split(';').next().unwrap_or("").trim();
    if !kind.eq_ignore_ascii_case("multipart/form-data") {
        return Err(format!("content type {kind:?} is not multipart/form-data"));
    }
    let b = param(content_type, "boundary").ok_or("multipart/form-data without a boundary")?;
    if b.is_empty() || b.len() > 70 {
        return Err("the boundary must have 1 to 70 characters".into());
    }
    Ok(b)
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// A quoted or bare parameter of a header value (`name="x"`).
fn param(value: &str, key: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// Every part of `body` delimited by `boundary`.
pub fn parse(body: &[u8], boundary: &str) -> Result<Vec<FormPart>, String> {
    let delim = format!("--{boundary}").into_bytes();
    let next_delim = format!("\r\n--{boundary}").into_bytes();
    let start = find(body, &delim, 0).ok_or("no opening boundary")?;
    // Only a preamble (ignored) may precede the first delimiter.
    let mut at = start + delim.len();
    let mut parts = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            return if parts.is_empty() { Err("a form without parts".into()) } else { Ok(parts) };
        }
        if !body[at..].starts_with(b"\r\n") {
            return Err("a boundary not followed by CRLF".into());
        }
        at += 2;
        let head_end = find(body, b"\r\n\r\n", at).ok_or("a part without the blank line after its headers")?;
        let head = std::str::from_utf8(&body[at..head_end]).map_err(|_| "part headers are not UTF-8")?;
        let (mut name, mut filename, mut content_type) = (None, None, None);
        for line in head.split("\r\n") {
            let (k, v) = line.split_once(':').ok_or_else(|| format!("a malformed part header {line:?}"))?;
            match k.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => {
                    if !v.trim().to_ascii_lowercase().starts_with("form-data") {
                        return Err(format!("a part disposition {v:?} that is not form-data"));
                    }
                    name = param(v, "name");
                    filename = param(v, "filename");
                }
                "content-type" => content_type = Some(v.trim().to_ascii_lowercase()),
                _ => {}
            }
        }
        let data_start = head_end + 4;
        let data_end = find(body, &next_delim, data_start).ok_or("a part without a closing boundary")?;
        parts.push(FormPart {
            name: name.ok_or("a part without a name")?,
            filename,
            content_type,
            data: body[data_start..data_end].to_vec(),
        });
        at = data_end + next_delim.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_of_two_parts() {
        let body = b"pre\r\n--XyZ\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\nContent-Type: application/json\r\n\r\n{\"Targets\":[]}\r\n--XyZ\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\r\n--X\x01\r\n--XyZ--\r\n";
        let b = boundary("multipart/form-data; boundary=\"XyZ\"").unwrap();
        let parts = parse(body, &b).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), parts[0].content_type.as_deref()),
            ("UpdateParameters", Some("application/json"))
        );
        assert_eq!(parts[0].data, b"{\"Targets\":[]}");
        assert_eq!((parts[1].filename.as_deref(), parts[1].data.as_slice()), (Some("a.bin"), &b"\x00\r\n--X\x01"[..]));
        assert!(boundary("application/json").is_err());
        assert!(parse(b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end", "XyZ").is_err());
        assert!(parse(b"--XyZ--\r\n", "XyZ").is_err());
    }
}
