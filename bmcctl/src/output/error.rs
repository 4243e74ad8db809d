//! An error as one line: its chain joined by `: `, each cause said once.
//! Errors that put their source in their own message (thiserror's
//! `"...: {source}"`) would otherwise repeat it (`cannot connect to NATS at
//! URL: timed out: timed out: timed out`).

/// `e` and its causes on one line, a cause dropped when its text is already said.
pub fn line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to NATS at nats://127.0.0.1:1: {source}")]
    struct Outer {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = anyhow::Error::new(Outer { source: io }).context("the machine registry");
        assert_eq!(line(&e), "the machine registry: cannot connect to NATS at nats://127.0.0.1:1: connection refused");
        let plain = anyhow::anyhow!("a").context("b");
        assert_eq!(line(&plain), "b: a");
    }
}
