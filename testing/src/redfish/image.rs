//! A plain-HTTP loopback server for virtual media images (a BMC, or the
//! emulator, downloads them).

use super::server::{self, HttpResponse, Running};
use super::HarnessError;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Serves one file at `/<name>` over HTTP on 127.0.0.1 and counts downloads.
pub struct ImageServer {
    running: Running,
    name: String,
    downloads: Arc<AtomicUsize>,
}

impl ImageServer {
    /// Serve `content` as `/<name>` (e.g. `boot.iso`).
    pub async fn start(name: &str, content: impl Into<Bytes>) -> Result<ImageServer, HarnessError> {
        let content: Bytes = content.into();
        let downloads = Arc::new(AtomicUsize::new(0));
        let count = downloads.clone();
        let path = format!("/{}", name.trim_start_matches('/'));
        let served = path.clone();
        let handler: server::Handler = Arc::new(move |req| {
            let content = content.clone();
            let count = count.clone();
            let served = served.clone();
            Box::pin(async move {
                if req.path != served || !matches!(req.method.as_str(), "GET" | "HEAD") {
                    return HttpResponse::empty(404);
                }
                if req.method == "GET" {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                HttpResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "application/octet-stream".into())],
                    body: content,
                    stall: false,
                }
            })
        });
        let running = server::start(None, handler).await?;
        Ok(ImageServer { running, name: path, downloads })
    }

    /// `http://127.0.0.1:PORT/<name>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.running.addr.port(), self.name)
    }

    /// Completed GETs of the image.
    pub fn downloads(&self) -> usize {
        self.downloads.load(Ordering::SeqCst)
    }
}

/// Lower-case hex SHA-256 of `data`: what a test expects a firmware image
/// to hash to, computed here rather than by the code under test.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// `len` bytes that do not repeat (a linear congruential sequence from
/// `seed`): a firmware image stand-in whose every byte counts in a hash.
pub fn image_bytes(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8
        })
        .collect()
}
