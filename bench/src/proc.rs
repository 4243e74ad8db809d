//! CPU time of processes from `/proc/PID/stat`, to show where the time goes.

use std::time::Instant;

/// `/proc` reports CPU times in USER_HZ, which Linux fixes at 100 for user space.
const TICKS_PER_SEC: f64 = 100.0;

/// A process to meter.
#[derive(Clone, Debug)]
pub struct Meter {
    pub name: String,
    /// `None`: this process.
    pub pid: Option<u32>,
    this: bool,
    /// Include the CPU time of waited-for children (cutime, cstime).
    children: bool,
}

impl Meter {
    pub fn pid(name: &str, pid: Option<u32>) -> Meter {
        Meter { name: name.into(), pid, this: false, children: false }
    }

    /// A process and the children it ran (e.g. ipmi_sim and its chassis_control runs).
    pub fn pid_with_children(name: &str, pid: u32) -> Meter {
        Meter { name: name.into(), pid: Some(pid), this: false, children: true }
    }

    pub fn this_process(name: &str) -> Meter {
        Meter { name: name.into(), pid: None, this: true, children: false }
    }

    /// This process and the tools it ran and waited for.
    pub fn this_process_with_children(name: &str) -> Meter {
        Meter { name: name.into(), pid: None, this: true, children: true }
    }

    fn ticks(&self) -> Option<u64> {
        let path = if self.this { "/proc/self/stat".to_owned() } else { format!("/proc/{}/stat", self.pid?) };
        cpu_ticks(&std::fs::read_to_string(path).ok()?, self.children)
    }
}

/// utime + stime (fields 14 and 15; with `children` also cutime + cstime,
/// fields 16 and 17) of a `/proc/PID/stat` line.
pub fn cpu_ticks(stat: &str, children: bool) -> Option<u64> {
    // The command name (field 2) is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 → index 11.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let own = field(11)? + field(12)?;
    Some(if children { own + field(13)? + field(14)? } else { own })
}

/// CPU snapshot of several processes.
pub struct CpuMeter {
    meters: Vec<Meter>,
    start: Vec<Option<u64>>,
    at: Instant,
}

impl CpuMeter {
    pub fn new(meters: &[Meter]) -> CpuMeter {
        CpuMeter { start: meters.iter().map(Meter::ticks).collect(), meters: meters.to_vec(), at: Instant::now() }
    }

    /// Take the snapshot again, now.
    pub fn restart(self) -> CpuMeter {
        CpuMeter::new(&self.meters)
    }

    pub fn stop(self) -> CpuUsage {
        let used = self
            .meters
            .iter()
            .zip(&self.start)
            .map(|(m, s)| {
                let secs = match (s, m.ticks()) {
                    (Some(a), Some(b)) => b.saturating_sub(*a) as f64 / TICKS_PER_SEC,
                    _ => f64::NAN,
                };
                (m.name.clone(), secs)
            })
            .collect();
        CpuUsage { used, wall: self.at.elapsed().as_secs_f64() }
    }
}

/// CPU seconds used per process over a wall-clock window.
#[derive(Clone, Debug)]
pub struct CpuUsage {
    pub used: Vec<(String, f64)>,
    pub wall: f64,
}

impl CpuUsage {
    /// Microseconds of CPU per operation, per process.
    pub fn per_op_us(&self, ops: usize) -> Vec<(String, f64)> {
        self.used.iter().map(|(n, s)| (n.clone(), if ops == 0 { f64::NAN } else { s * 1e6 / ops as f64 })).collect()
    }

    /// Share of one CPU used, per process.
    pub fn cpus(&self) -> Vec<(String, f64)> {
        self.used.iter().map(|(n, s)| (n.clone(), s / self.wall)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_odd_names() {
        let line = "1234 (bmc worker) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 0 0";
        assert_eq!(cpu_ticks(line, false), Some(300));
        assert_eq!(cpu_ticks(line, true), Some(300));
        assert!(cpu_ticks("garbage", false).is_none());
    }
}
