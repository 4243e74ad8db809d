//! What a benchmark hands back (tables, goal verdicts, notes) and how it is
//! printed: plain text on the terminal, Markdown for docs/BENCHMARKS.md.

use std::fmt::Write as _;
use std::time::Duration;

/// A results table.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub caption: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(caption: impl Into<String>, header: &[&str]) -> Table {
        Table { caption: caption.into(), header: header.iter().map(|s| s.to_string()).collect(), rows: vec![] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

/// A stated goal and whether this run met it.
#[derive(Clone, Debug)]
pub struct Goal {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// One benchmark's results.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub title: String,
    /// How it was measured (static text: no figures).
    pub method: Vec<String>,
    pub tables: Vec<Table>,
    pub goals: Vec<Goal>,
    /// Observations computed from this run's figures.
    pub findings: Vec<String>,
    pub elapsed: Duration,
}

impl Section {
    pub fn new(title: impl Into<String>) -> Section {
        Section { title: title.into(), ..Section::default() }
    }

    pub fn goal(&mut self, what: &str, target: &str, measured: String, met: bool) {
        self.goals.push(Goal { what: what.into(), target: target.into(), measured, met });
    }

    /// Plain text for the terminal: aligned columns.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "\n== {} ({} s) ==", self.title, crate::stats::num(self.elapsed.as_secs_f64(), 0));
        for t in &self.tables {
            let _ = writeln!(out, "\n{}", t.caption);
            let widths: Vec<usize> = (0..t.header.len())
                .map(|i| {
                    t.rows
                        .iter()
                        .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                        .chain([t.header[i].chars().count()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: &[String]| {
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
                    .collect::<Vec<_>>()
                    .join("  ")
            };
            let _ = writeln!(out, "  {}", line(&t.header));
            for r in &t.rows {
                let _ = writeln!(out, "  {}", line(r));
            }
        }
        if !self.goals.is_empty() {
            let _ = writeln!(out, "\nGoals:");
            for g in &self.goals {
                let _ = writeln!(
                    out,
                    "  [{}] {}: target {}, measured {}",
                    if g.met { "met" } else { "MISSED" },
                    g.what,
                    g.target,
                    g.measured
                );
            }
        }
        for f in &self.findings {
            let _ = writeln!(out, "  - {f}");
        }
        out
    }

    /// Markdown (a `##` section).
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## {}\n", self.title);
        for m in &self.method {
            let _ = writeln!(out, "{m}\n");
        }
        for t in &self.tables {
            let _ = writeln!(out, "**{}**\n", t.caption);
            let _ = writeln!(out, "| {} |", t.header.join(" | "));
            let _ = writeln!(out, "|{}|", t.header.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
            for r in &t.rows {
                let _ =
                    writeln!(out, "| {} |", r.iter().map(|c| c.replace('|', "\\|")).collect::<Vec<_>>().join(" | "));
            }
            out.push('\n');
        }
        if !self.goals.is_empty() {
            let _ = writeln!(out, "| goal | target | measured | met |\n|---|---|---|---|");
            for g in &self.goals {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    g.what,
                    g.target,
                    g.measured,
                    if g.met { "yes" } else { "**no**" }
                );
            }
            out.push('\n');
        }
        if !self.findings.is_empty() {
            for f in &self.findings {
                let _ = writeln!(out, "- {f}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "_Section run time: {} s._\n", crate::stats::num(self.elapsed.as_secs_f64(), 0));
        out
    }
}

/// The whole document for docs/BENCHMARKS.md.
pub fn document(machine: &[(String, String)], command: &str, sections: &[Section], total: Duration) -> String {
    let mut out = String::new();
    out.push_str("# bmcfleet benchmarks\n\n");
    out.push_str(
        "<!-- Generated by `bmc-bench all --out docs/BENCHMARKS.md`; refresh with `scripts/bench.sh`. \
         Do not edit by hand: every figure below comes from the run described here. -->\n\n",
    );
    out.push_str(
        "Every figure on this page was measured by `bmc-bench` (crate `bench/`) in one run on the machine \
         below; comparisons in a table were measured side by side in that run, interleaved repetition by \
         repetition so that machine noise hits both sides alike. Rates and latencies are medians over the \
         repetitions; p99 is per repetition, then the median is taken. To refresh: `scripts/bench.sh` \
         (installs the peers with scripts/setup.sh, builds release binaries, runs `bmc-bench all`). \
         One benchmark alone: `bmc-bench pipeline|ipmi|ipmi-fleet|redfish|scale|ordering|isolation [options]` (`bmc-bench help <name>` lists \
         the options; `--reps N` sets the repetitions). Peers: nats-server, sushy-emulator and python sushy from \
         `.tools/` (scripts/setup.sh, scripts/bench.sh), ipmi_sim, ipmitool and FreeIPMI (ipmipower, ipmi-config) from Debian packages; override \
         with `BMCFLEET_NATS_SERVER`, `BMCFLEET_SUSHY_EMULATOR`, `BMCFLEET_PYTHON`, `IPMI_SIM_BIN`, `BMCFLEET_BIN_DIR`.\n\n",
    );
    out.push_str("## Machine and run\n\n| | |\n|---|---|\n");
    for (k, v) in machine {
        let _ = writeln!(out, "| {k} | {} |", v.replace('|', "\\|"));
    }
    let _ = writeln!(out, "| command | `{command}` |");
    let _ = writeln!(out, "| total run time | {} s |\n", crate::stats::num(total.as_secs_f64(), 0));
    let goals: Vec<&Goal> = sections.iter().flat_map(|s| s.goals.iter()).collect();
    if !goals.is_empty() {
        out.push_str("## Goals at a glance\n\n| goal | target | measured | met |\n|---|---|---|---|\n");
        for g in goals {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                g.what,
                g.target,
                g.measured,
                if g.met { "yes" } else { "**no**" }
            );
        }
        out.push('\n');
    }
    for s in sections {
        out.push_str(&s.to_markdown());
    }
    out
}

/// Facts about the machine and the peers, for the report header.
pub fn machine() -> Vec<(String, String)> {
    use crate::harness::{find_program, nats_server_binary, repo_tools_bin, version_line};
    let mut v = vec![];
    let date = time::format_description::parse_borrowed::<1>("[year]-[month]-[day] [hour]:[minute]:[second] UTC")
        .ok()
        .and_then(|f| time::OffsetDateTime::now_utc().format(&f).ok())
        .unwrap_or_else(|| "unknown".into());
    v.push(("date (UTC)".into(), date));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|s| s.trim_start_matches([' ', '\t', ':']).trim().to_owned());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    v.push(("CPU".into(), format!("{} — {cpus} logical CPUs available", model.unwrap_or_else(|| "unknown".into()))));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(kib) = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
    {
        v.push(("memory".into(), format!("{} GiB", crate::stats::num(kib / 1024.0 / 1024.0, 1))));
    }
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|s| s.trim_matches('"').to_owned()))
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    v.push(("OS / kernel".into(), format!("{os} / Linux {kernel}")));
    if let Some(load) =
        std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split_whitespace().next().map(str::to_owned))
    {
        v.push(("load average at start (1 min)".into(), load));
    }
    v.push(("bmcfleet".into(), format!("{} (release build)", env!("CARGO_PKG_VERSION"))));
    let tool = |name: &str, env: Option<&str>, args: &[&str]| -> String {
        find_program(name, env, &[repo_tools_bin()])
            .ok()
            .and_then(|p| version_line(&p, args))
            .unwrap_or_else(|| "not found".into())
    };
    v.push((
        "nats-server".into(),
        nats_server_binary().ok().and_then(|p| version_line(&p, &["--version"])).unwrap_or_else(|| "not found".into()),
    ));
    v.push(("ipmi_sim (OpenIPMI)".into(), tool("ipmi_sim", Some("IPMI_SIM_BIN"), &["--version"])));
    v.push(("ipmitool".into(), tool("ipmitool", None, &["-V"])));
    v.push(("FreeIPMI ipmipower".into(), tool("ipmipower", None, &["--version"])));
    v.push(("sushy-emulator".into(), crate::redfish::tool_versions()));
    v
}
