//! Known BMC quirks a provider worked around ([`QuirkLog`]): logged once
//! per machine (a WARN the first time, debug after), counted every time in
//! `bmcfleet_bmc_quirks_total{quirk}`. A fleet of BMCs with the same quirk
//! (ipmi_sim's boot flags reported invalid, pyghmi's cipher suite answer)
//! then logs one line per machine, not one per action.

use bmcfleet_provider::QuirkLog;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// (machine or BMC key, quirk) pairs remembered; past this many, further
/// first sightings are logged at debug (the metric still counts them).
const REMEMBERED: usize = 100_000;

/// Which machine has shown which quirk, shared by a worker's lanes.
#[derive(Debug)]
pub struct QuirkBook {
    seen: Mutex<HashSet<(String, &'static str)>>,
    counter: Family<crate::metrics::QuirkLabels, Counter>,
}

impl QuirkBook {
    pub fn new(metrics: &crate::metrics::Metrics) -> QuirkBook {
        QuirkBook { seen: Mutex::default(), counter: metrics.bmc_quirks.clone() }
    }

    /// The log of one BMC (its ordering key: a machine's name or an ad
    /// hoc address), for a [`bmcfleet_provider::Ctx`].
    pub fn for_bmc(self: &Arc<Self>, bmc: &bmcfleet_schema::BmcKey) -> Arc<dyn QuirkLog> {
        Arc::new(BmcQuirks { book: self.clone(), bmc: bmc.to_string() })
    }

    /// Whether this is the first sighting of `quirk` on `bmc` (remembered).
    fn first(&self, bmc: &str, quirk: &'static str) -> bool {
        let mut seen = self.seen.lock().expect("quirk book lock");
        if seen.contains(&(bmc.to_owned(), quirk)) || seen.len() >= REMEMBERED {
            return false;
        }
        seen.insert((bmc.to_owned(), quirk));
        true
    }
}

#[derive(Debug)]
struct BmcQuirks {
    book: Arc<QuirkBook>,
    bmc: String,
}

impl QuirkLog for BmcQuirks {
    fn noticed(&self, quirk: &'static str, what: &str) {
        self.book.counter.get_or_create(&crate::metrics::QuirkLabels { quirk: quirk.to_owned() }).inc();
        if self.book.first(&self.bmc, quirk) {
            tracing::warn!(bmc = %self.bmc, quirk, "{what} (a known BMC quirk: logged once per machine, counted in bmcfleet_bmc_quirks_total)");
        } else {
            tracing::debug!(bmc = %self.bmc, quirk, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test's own subscriber writes.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_quirk_is_logged_once_per_machine_and_counted_every_time() {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let metrics = crate::metrics::Metrics::default();
        let book = Arc::new(QuirkBook::new(&metrics));
        tracing::subscriber::with_default(subscriber, || {
            let a = book.for_bmc(&bmcfleet_schema::BmcKey::machine("node-a"));
            let b = book.for_bmc(&bmcfleet_schema::BmcKey::machine("node-b"));
            for _ in 0..5 {
                a.noticed("ipmi_boot_flags_reported_invalid", "flags invalid");
                b.noticed("ipmi_boot_flags_reported_invalid", "flags invalid");
            }
            a.noticed("ipmi_cipher_suite_answered_other", "suite 3");
        });
        let labels = crate::metrics::QuirkLabels { quirk: "ipmi_boot_flags_reported_invalid".into() };
        assert_eq!(metrics.bmc_quirks.get_or_create(&labels).get(), 10, "every occurrence counted");
        let text = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
        let warns: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warns.len(), 3, "one per machine and quirk: {warns:?}");
        assert_eq!(warns.iter().filter(|l| l.contains("m-node-a")).count(), 2, "{warns:?}");
    }
}
