//! [`LogCapture`]: a `tracing_subscriber` writer that keeps what a test's
//! subscriber writes, for asserting on log lines.

use std::sync::{Arc, Mutex};

/// Everything written through it (clones share one buffer).
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// The capture of the test binary's global subscriber (every level,
    /// plain text), installed on the first call; later calls return the
    /// same capture. For a test binary of its own: tracing caches callsite
    /// interest process-wide, so a subscriber set for one test among
    /// parallel others may miss events, and the global one sees them all.
    pub fn global() -> LogCapture {
        static CAPTURE: std::sync::OnceLock<LogCapture> = std::sync::OnceLock::new();
        CAPTURE
            .get_or_init(|| {
                let cap = LogCapture::default();
                let subscriber = tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::TRACE)
                    .with_ansi(false)
                    .with_writer(cap.clone())
                    .finish();
                tracing::subscriber::set_global_default(subscriber)
                    .expect("no other global subscriber in this test binary");
                cap
            })
            .clone()
    }

    /// What was written so far (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}
