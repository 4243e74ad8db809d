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

/// A runtime thread about to sleep hands its jemalloc thread cache back
/// (at most once a second per thread). Freed objects wait in a thread's
/// cache until that thread allocates again, and a thread that goes idle
/// after a burst of batches would keep them, and the pages they pin among
/// long-lived sessions, indefinitely: 1.3 KiB per live session at 1,000
/// BMCs in the fleet bench. Turning the cache off altogether does the same
/// for memory but costs up to 20 % more CPU under load; a flush per idle
/// second costs nothing measurable.
#[cfg(target_os = "linux")]
fn flush_thread_cache() {
    use std::cell::Cell;
    use std::time::{Duration, Instant};
    use tikv_jemalloc_ctl::{Access, AsName};
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    LAST.with(|last| {
        let now = Instant::now();
        if last.get().is_some_and(|at| now.duration_since(at) < Duration::from_secs(1)) {
            return;
        }
        last.set(Some(now));
        // Disabling flushes the cache; enabling it again starts an empty one.
        let enabled = b"thread.tcache.enabled\0".name();
        if enabled.write(false).is_ok() {
            let _ = enabled.write(true);
        }
    });
}

fn main() -> anyhow::Result<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    #[cfg(target_os = "linux")]
    {
        tune_allocator();
        runtime.on_thread_park(flush_thread_cache);
    }
    runtime
        .build()?
        .block_on(bmcfleet_common::runtime::serve::<bmcfleet_worker::Config, _, _>("bmc-worker", bmcfleet_worker::run))
}
