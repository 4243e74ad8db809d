//! The README's commands, run as written (issue 31).
//!
//! Every ```sh block of README.md runs, in order, with `bash -euo pipefail`
//! in one scratch directory, against a stack this test starts on free
//! loopback ports: a nats-server with JetStream, `bmc-sim`, `bmc-gateway`
//! and `bmc-worker`. A block is marked by the HTML comment on the line
//! before it:
//!
//! - `<!-- readme-test: skip (why) -->`: not run (the set-up commands,
//!   production-only blocks);
//! - `<!-- readme-test: file NAME -->`: the block (YAML, JSON) is written
//!   to NAME in the scratch directory, for the commands that follow;
//! - `<!-- readme-test: stack (...) -->`: the services, started by the test
//!   at that point with the flags the block gives (so a flag the binaries
//!   do not know fails the test). Only addresses are the test's own: its
//!   nats-server (the block's `nats-server` line is what the harness's is:
//!   JetStream on a scratch store), and a free port for `bmc-sim --listen`
//!   and the worker's `--sim-endpoint`.
//!
//! The commands find the binaries on `PATH` (those of this build) and NATS
//! through `BMCFLEET_NATS_URL`, as the README says; `BMC_PASSWORD` and
//! `OPS_PASSWORD` are the two passwords it says they read. Nothing in the
//! text is rewritten. A command that fails stops the test with its block,
//! its README line, its output and the services' logs.
//! `a_wrong_command_fails_the_run` keeps the runner from passing vacuously.

use bmcfleet_schema::Subjects;
use bmcfleet_tests::producer::{wait_gateway, wait_partitions_owned, Producer};
use bmcfleet_tests::{bin, free_port, NatsServer, Process};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    Run,
    Skip,
    File(String),
    Stack,
}

/// One fenced block of a Markdown text.
#[derive(Debug, Clone)]
struct Block {
    /// The line of its opening fence (1-based).
    line: usize,
    lang: String,
    mark: Mark,
    text: String,
}

/// The fenced blocks of `markdown`, each with its mark: the
/// `<!-- readme-test: ... -->` comment on the line before its fence, else
/// `Run` for ```sh and `Skip` for any other language.
fn blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = lang.trim().to_owned();
        let start = i;
        let end = (start + 1..lines.len())
            .find(|&j| lines[j].trim_end() == "```")
            .unwrap_or_else(|| panic!("line {}: unclosed fence", start + 1));
        let text = lines[start + 1..end].join("\n") + "\n";
        let before = if start > 0 { lines[start - 1].trim() } else { "" };
        let mark = match before.strip_prefix("<!-- readme-test:").and_then(|m| m.strip_suffix("-->")) {
            Some(m) => {
                let m = m.trim();
                let word = m.split_whitespace().next().unwrap_or_default();
                match word {
                    "skip" => Mark::Skip,
                    "stack" => Mark::Stack,
                    "file" => Mark::File(
                        m.split_whitespace().nth(1).unwrap_or_else(|| panic!("line {start}: file needs a name")).into(),
                    ),
                    other => panic!("line {start}: unknown readme-test mark `{other}`"),
                }
            }
            None if lang == "sh" => Mark::Run,
            None => Mark::Skip,
        };
        out.push(Block { line: start + 1, lang, mark, text });
        i = end + 1;
    }
    out
}

/// A `sh` block's commands: one per line, `\`-continued lines joined,
/// comments and blank lines left out.
fn commands(block: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim_end();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let words: Vec<String> = pending.split_whitespace().map(str::to_owned).collect();
        pending.clear();
        if !words.is_empty() && !words[0].starts_with('#') {
            out.push(words);
        }
    }
    out
}

/// The value after `flag` in `args`, replaced by `value` (panics when the flag is missing).
fn replace_value(args: &mut [String], flag: &str, value: &str) {
    let i = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    args[i + 1] = value.to_owned();
}

/// The services of a `stack` block, started as it says.
struct Stack {
    nats: NatsServer,
    sim: Process,
    gateway: Process,
    worker: Process,
}

impl Stack {
    async fn start(block: &Block, dir: &Path) -> Stack {
        let mut lines: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for mut words in commands(&block.text) {
            let program = words.remove(0);
            assert!(
                lines.insert(program.clone(), words).is_none(),
                "README line {}: the stack block starts {program} twice",
                block.line
            );
        }
        let names: Vec<&str> = lines.keys().map(String::as_str).collect();
        assert_eq!(names, ["bmc-gateway", "bmc-sim", "bmc-worker", "nats-server"], "the stack block's programs");
        assert!(lines["nats-server"].contains(&"-js".to_owned()), "nats-server needs JetStream (-js)");

        let nats = NatsServer::start();
        let env = [("BMCFLEET_NATS_URL", nats.url())];
        let sim_addr = format!("127.0.0.1:{}", free_port());
        let mut sim_args = lines["bmc-sim"].clone();
        replace_value(&mut sim_args, "--listen", &sim_addr);
        let sim = Process::spawn_in("bmc-sim", &sim_args, &env, dir);
        bmcfleet_tests::eventually(Duration::from_secs(20), "bmc-sim listening", || {
            let addr = sim_addr.clone();
            async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) }
        })
        .await;
        let gateway = Process::spawn_in("bmc-gateway", &lines["bmc-gateway"], &env, dir);
        let mut worker_args = lines["bmc-worker"].clone();
        replace_value(&mut worker_args, "--sim-endpoint", &sim_addr);
        let worker = Process::spawn_in("bmc-worker", &worker_args, &env, dir);
        let mut stack = Stack { nats, sim, gateway, worker };
        let producer = Producer::new(stack.nats.client().await);
        // A service the block's flags stop at start (a flag it does not
        // know, a bad value) fails here with its log, not as a timeout.
        let ready = async {
            wait_gateway(&producer).await;
            // The README's stack uses the default topology (16 partitions).
            wait_partitions_owned(&producer.client, &Subjects::new("bmc", "BMCFLEET", 16)).await;
        };
        tokio::pin!(ready);
        loop {
            tokio::select! {
                _ = &mut ready => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    for p in [&mut stack.sim, &mut stack.gateway, &mut stack.worker] {
                        if let Some(status) = p.try_wait() {
                            panic!(
                                "README line {}: {} exited at start ({status}):\n{}",
                                block.line,
                                p.name,
                                p.log_tail(20)
                            );
                        }
                    }
                }
            }
        }
        stack
    }

    fn logs(&mut self) -> String {
        let mut out = String::new();
        for p in [&self.gateway, &self.worker, &self.sim] {
            out.push_str(&format!("--- {} log (last 30 lines)\n{}\n", p.name, p.log_tail(30)));
        }
        out
    }
}

/// What running a Markdown text's blocks came to.
#[derive(Debug)]
enum Outcome {
    /// Every runnable block ran and succeeded: how many.
    Ran(usize),
    /// A block failed: the report.
    Failed(String),
}

/// Run every block of `markdown` in `dir`, in order (see the module doc).
async fn run(markdown: &str, dir: &Path, env: &[(&str, String)]) -> Outcome {
    let path = format!("{}:{}", bin("bmcctl").parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut stack: Option<Stack> = None;
    let mut ran = 0;
    for block in blocks(markdown) {
        match &block.mark {
            Mark::Skip => continue,
            Mark::File(name) => {
                std::fs::write(dir.join(name), &block.text).unwrap();
                continue;
            }
            Mark::Stack => {
                assert!(stack.is_none(), "two stack blocks");
                stack = Some(Stack::start(&block, dir).await);
                continue;
            }
            Mark::Run => assert_eq!(block.lang, "sh", "line {}: only sh blocks run", block.line),
        }
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["--norc", "--noprofile", "-euo", "pipefail", "-xc", &block.text])
            .current_dir(dir)
            .env("PATH", &path)
            .env_remove("BMCCTL_OUTPUT")
            .env_remove("NO_COLOR")
            .env_remove("BMCFLEET_WORKERS_PUBLIC_KEY")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(s) = &stack {
            cmd.env("BMCFLEET_NATS_URL", s.nats.url());
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = match tokio::time::timeout(Duration::from_secs(180), cmd.output()).await {
            Ok(out) => out.expect("run bash"),
            Err(_) => {
                return Outcome::Failed(format!(
                    "README line {}: block timed out after 180 s:\n{}",
                    block.line, block.text
                ))
            }
        };
        if !out.status.success() {
            let logs = stack.as_mut().map(Stack::logs).unwrap_or_default();
            return Outcome::Failed(format!(
                "README line {}: this block failed ({}):\n{}\n--- stdout\n{}--- stderr (bash -x: the last `+` line is the command that failed)\n{}{logs}",
                block.line,
                out.status,
                block.text,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            ));
        }
        eprintln!("README line {}: ok\n{}", block.line, String::from_utf8_lossy(&out.stdout));
        ran += 1;
    }
    Outcome::Ran(ran)
}

fn env() -> Vec<(&'static str, String)> {
    vec![("BMC_PASSWORD", "readme-bmc-password".into()), ("OPS_PASSWORD", "readme-ops-password".into())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_readme_command_runs_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let all = blocks(&readme);
    let runnable = all.iter().filter(|b| b.mark == Mark::Run).count();
    assert!(runnable >= 5, "README.md has {runnable} runnable blocks: {all:#?}");
    assert_eq!(all.iter().filter(|b| b.mark == Mark::Stack).count(), 1, "one stack block");
    let dir = tempfile::tempdir().unwrap();
    match run(&readme, dir.path(), &env()).await {
        Outcome::Ran(n) => assert_eq!(n, runnable, "every runnable block ran"),
        Outcome::Failed(report) => panic!("{report}"),
    }
}

/// A README whose command is wrong fails, with its block and output: the
/// runner cannot pass what it did not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_command_fails_the_run() {
    let markdown = "# x\n\n<!-- readme-test: file a.txt -->\n```text\nhello\n```\n\n```sh\ngrep -q hello a.txt\n```\n\n<!-- readme-test: skip (never run) -->\n```sh\nfalse\n```\n\n```sh\nbmcctl keygen --out k.xkey > k.pub\nbmcctl power sideways --machine a\n```\n";
    let dir = tempfile::tempdir().unwrap();
    match run(markdown, dir.path(), &env()).await {
        Outcome::Failed(report) => {
            assert!(report.starts_with("README line 17: this block failed"), "{report}");
            assert!(report.contains("+ bmcctl power sideways --machine a"), "{report}");
            assert!(report.contains("invalid value 'sideways'"), "{report}");
        }
        Outcome::Ran(n) => panic!("a wrong command passed ({n} blocks ran)"),
    }
    assert!(dir.path().join("k.pub").is_file(), "the commands before it ran");
    let dir = tempfile::tempdir().unwrap();
    let ok = "```sh\ntrue\n```\n\n<!-- readme-test: skip (x) -->\n```sh\nfalse\n```\n";
    assert!(matches!(run(ok, dir.path(), &env()).await, Outcome::Ran(1)));
}

#[test]
fn blocks_carry_their_marks() {
    let md = "<!-- readme-test: skip (setup) -->\n```sh\na\n```\n```sh\nb \\\n  c # note\n# only a comment\n```\n<!-- readme-test: file m.yaml -->\n```yaml\nx: 1\n```\n```json\n{}\n```\n<!-- readme-test: stack (s) -->\n```sh\nd\n```\n";
    let b = blocks(md);
    let marks: Vec<&Mark> = b.iter().map(|b| &b.mark).collect();
    assert_eq!(marks, [&Mark::Skip, &Mark::Run, &Mark::File("m.yaml".into()), &Mark::Skip, &Mark::Stack]);
    assert_eq!(commands(&b[1].text), [vec!["b".to_owned(), "c".to_owned()]]);
    assert_eq!(b[2].text, "x: 1\n");
    assert_eq!(b[1].line, 5);
}

/// docs/ERRORS.md lists every error code a producer can see: each code of
/// the contract's `ErrorCode` (schema/json/defs.json, which
/// schema/tests/json_schema.rs holds to the Rust type) has a row in its
/// table, with the status `ErrorCode::status` gives it.
#[test]
fn the_errors_page_lists_every_error_code() {
    let defs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("schema/json/defs.json")).unwrap()).unwrap();
    let codes = defs["$defs"]["ErrorCode"]["enum"].as_array().expect("ErrorCode enum");
    assert!(codes.len() >= 30, "{codes:?}");
    let page = std::fs::read_to_string(root().join("docs/ERRORS.md")).unwrap();
    let mut missing = Vec::new();
    for code in codes {
        let name = code.as_str().unwrap();
        let parsed: bmcfleet_schema::ErrorCode = serde_json::from_value(code.clone()).unwrap();
        let row = format!("| `{name}` | {} |", parsed.status());
        if !page.lines().any(|l| l.starts_with(&row)) {
            missing.push(row);
        }
    }
    assert!(missing.is_empty(), "docs/ERRORS.md lacks these rows:\n{}", missing.join("\n"));
}
