//! `bmc-worker`: parse configuration, then hand over to [`bmcfleet_worker::run`].

/// jemalloc, returning freed pages to the system: a worker holds thousands
/// of long-lived sessions between bursts of batches, and with glibc's malloc
/// the pages a burst used stay resident among them.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Purge in the background, and purge for real: a page unused for the dirty
/// decay time (jemalloc's default, 10 s) goes back with `MADV_DONTNEED`
/// instead of lingering as "muzzy" (`MADV_FREE`, still counted in RSS until
/// the kernel is short of memory).
#[cfg(target_os = "linux")]
fn tune_allocator() {
    use tikv_jemalloc_ctl::{Access, AsName};
    let mut failed = Vec::new();
    if tikv_jemalloc_ctl::background_thread::write(true).is_err() {
        failed.push("background_thread");
    }
    // Arenas created from now on, and those the threads started so far use
    // (an arena not created yet refuses; the default above covers it).
    if b"arenas.muzzy_decay_ms\0".name().write(0isize).is_err() {
        failed.push("arenas.muzzy_decay_ms");
    }
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for i in 0..arenas {
        let _ = format!("arena.{i}.muzzy_decay_ms\0").name().write(0isize);
    }
    if !failed.is_empty() {
        eprintln!("bmc-worker: jemalloc refused {}; freed memory goes back to the system later", failed.join(", "));
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    tune_allocator();
    bmcfleet_common::runtime::serve::<bmcfleet_worker::Config, _, _>("bmc-worker", bmcfleet_worker::run).await
}
