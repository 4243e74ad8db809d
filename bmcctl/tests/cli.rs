//! bmcctl as a Unix tool, through its binary (no NATS needed):
//! - `completions bash` is a script bash accepts (`bash -n`) that, sourced,
//!   registers `_bmcctl` for bmcctl and completes `bmcctl mach<TAB>` to
//!   `machine`, subcommands and `--output` values;
//! - `completions zsh` is a script zsh accepts (`zsh -n`) that, sourced
//!   after `compinit`, registers the dynamic `_bmcctl` for bmcctl;
//! - `man` is a roff page groff renders without a warning, titled BMCCTL,
//!   naming every top-level command; `man --out DIR` writes a page per command;
//! - an `--output` (or `BMCCTL_OUTPUT`) that is no format is a usage error (exit 2);
//! - on a terminal, errors are coloured unless `NO_COLOR` is set (non-empty).
//!
//! bash, zsh, groff and script (util-linux) are peers: a test that needs one is skipped when it is
//! missing, unless `BMCFLEET_REQUIRE_PEERS=1` (scripts/setup.sh installs them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bmcctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmcctl")).args(args).env_remove("BMCCTL_OUTPUT").output().expect("run bmcctl")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

/// The path of a peer program, or `None` (test skipped) unless peers are required.
fn peer(name: &str) -> Option<PathBuf> {
    bmcfleet_testing::peers::program(name, &[], "scripts/setup.sh installs it")
}

/// A fresh directory under the system's temporary one.
fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bmcctl-{what}-{}", ulid::Ulid::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What bash's completion function offers for `words` (the command line so
/// far, the last word being completed), with the script at `script` sourced.
fn complete(bash: &Path, script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        r#"source '{}' || exit 9
complete -p bmcctl >/dev/null || exit 8
COMP_WORDS=({})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
func=$(complete -p bmcctl | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
"$func" bmcctl "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        script.display(),
        quoted.join(" ")
    );
    let out = Command::new(bash).args(["--norc", "--noprofile", "-c", &program]).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

#[test]
fn the_bash_completion_is_valid_and_completes_commands_and_values() {
    let Some(bash) = peer("bash") else { return };
    let dir = temp_dir("completion");
    let script = dir.join("bmcctl.bash");
    std::fs::write(&script, stdout(&bmcctl(&["completions", "bash"]))).unwrap();
    let check = Command::new(&bash).arg("-n").arg(&script).output().unwrap();
    assert!(check.status.success(), "bash -n: {}", String::from_utf8_lossy(&check.stderr));

    let registered = Command::new(&bash)
        .args(["--norc", "-c", &format!("source '{}'; complete -p bmcctl", script.display())])
        .output()
        .unwrap();
    let registered = String::from_utf8(registered.stdout).unwrap();
    assert!(registered.contains("-F _bmcctl") && registered.trim_end().ends_with(" bmcctl"), "{registered}");

    assert_eq!(complete(&bash, &script, &["bmcctl", "mach"]), ["machine"]);
    let machine = complete(&bash, &script, &["bmcctl", "machine", ""]);
    for sub in ["apply", "add", "set", "get", "ls", "watch", "rm"] {
        assert!(machine.iter().any(|w| w == sub), "no {sub} in {machine:?}");
    }
    assert_eq!(complete(&bash, &script, &["bmcctl", "--output", ""]), ["table", "wide", "json"]);
    assert_eq!(complete(&bash, &script, &["bmcctl", "power", "soft"]), ["soft-off"], "value enums too");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_zsh_completion_is_valid_and_registers_the_dynamic_function() {
    let Some(zsh) = peer("zsh") else { return };
    let dir = temp_dir("zsh-completion");
    let script = dir.join("_bmcctl");
    let text = stdout(&bmcctl(&["completions", "zsh"]));
    assert!(text.contains("__complete \"$what\""), "the script asks bmcctl for registry words");
    std::fs::write(&script, &text).unwrap();
    let check = Command::new(&zsh).arg("-n").arg(&script).output().unwrap();
    assert!(check.status.success(), "zsh -n: {}", String::from_utf8_lossy(&check.stderr));
    let program = format!(
        "autoload -U compinit && compinit -u -D && source '{}' && print -r -- $_comps[bmcctl] && whence -w _bmcctl_clap",
        script.display()
    );
    let out = Command::new(&zsh).args(["-f", "-c", &program]).env("HOME", &dir).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(said.lines().collect::<Vec<_>>(), ["_bmcctl", "_bmcctl_clap: function"], "{said}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_shell_has_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let text = stdout(&bmcctl(&["completions", shell]));
        assert!(text.contains("bmcctl") && text.contains("machine"), "{shell}");
    }
    assert_eq!(bmcctl(&["completions", "tcsh"]).status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
fn the_man_page_renders_and_names_every_command() {
    let page = stdout(&bmcctl(&["man"]));
    assert!(page.contains(".TH BMCCTL 1"), "{}", &page[..page.len().min(300)]);
    let commands = [
        "power",
        "boot",
        "inventory",
        "event-log",
        "sensors",
        "bios",
        "secure-boot",
        "user",
        "bmc-reset",
        "network",
        "raw",
        "media",
        "submit",
        "status",
        "cancel",
        "watch",
        "keygen",
        "cred",
        "machine",
        "audit",
        "completions",
        "man",
    ];
    let Some(groff) = peer("groff") else {
        for c in commands {
            assert!(page.contains(&format!("bmcctl\\-{}(1)", c.replace('-', "\\-"))), "no {c}");
        }
        return;
    };
    let dir = temp_dir("man");
    let file = dir.join("bmcctl.1");
    std::fs::write(&file, &page).unwrap();
    // -k: the page is UTF-8 (preconv), as man(1) reads it; -ww: every warning.
    let render = |file: &Path| {
        let out = Command::new(&groff)
            .args(["-k", "-man", "-Tutf8", "-ww"])
            .arg(file)
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // Bold and underline by overstriking: keep the characters.
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut plain = String::new();
        for c in text.chars() {
            if c == '\u{8}' {
                plain.pop();
            } else {
                plain.push(c);
            }
        }
        plain
    };
    let text = render(&file);
    assert!(text.starts_with("BMCCTL(1)"), "{text}");
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS"] {
        assert!(text.contains(section), "no {section}:\n{text}");
    }
    for c in commands {
        assert!(text.contains(&format!("bmcctl-{c}(1)")), "no bmcctl-{c}(1):\n{text}");
    }

    // --out: a page per command, each one rendering.
    let pages = dir.join("pages");
    let out = bmcctl(&["man", "--out", pages.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for c in commands {
        let page = pages.join(format!("bmcctl-{c}.1"));
        assert!(render(&page).starts_with(&format!("BMCCTL-{}(1)", c.to_uppercase())), "{}", page.display());
    }
    let ls = render(&pages.join("bmcctl-machine-ls.1"));
    assert!(ls.contains("--output"), "{ls}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A named credential or TLS options on an ad hoc target are refused by
/// every gateway (`target_forbidden`), so no action command offers them:
/// not in its help, its (bash) completion or its man page.
#[test]
fn the_ad_hoc_target_offers_only_what_a_gateway_accepts() {
    let offered = ["--bmc", "--user", "--password-env", "--machine"];
    let gone = ["--cred", "--insecure"];
    let help = stdout(&bmcctl(&["power", "--help"]));
    for flag in offered {
        assert!(help.contains(flag), "power --help lacks {flag}:\n{help}");
    }
    for flag in gone {
        assert!(!help.contains(&format!("{flag} ")), "power --help offers {flag}:\n{help}");
    }
    if let Some(bash) = peer("bash") {
        let dir = temp_dir("adhoc-completion");
        let script = dir.join("bmcctl.bash");
        std::fs::write(&script, stdout(&bmcctl(&["completions", "bash"]))).unwrap();
        let flags = complete(&bash, &script, &["bmcctl", "power", "on", "--"]);
        for flag in offered {
            assert!(flags.iter().any(|f| f == flag), "`bmcctl power on --<TAB>` lacks {flag}: {flags:?}");
        }
        for flag in gone {
            assert!(!flags.iter().any(|f| f == flag), "`bmcctl power on --<TAB>` offers {flag}: {flags:?}");
        }
        // `machine add` still takes --insecure: a registered machine's TLS option.
        let add = complete(&bash, &script, &["bmcctl", "machine", "add", "--"]);
        assert!(add.iter().any(|f| f == "--insecure"), "{add:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
    let dir = temp_dir("adhoc-man");
    let out = bmcctl(&["man", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.join("bmcctl-power.1")).unwrap();
    assert!(page.contains("\\-\\-password\\-env"), "{page}");
    for flag in ["\\-\\-cred", "\\-\\-insecure"] {
        assert!(!page.contains(flag), "bmcctl-power(1) names {flag}");
    }
    // What an old script still passing them gets: a usage error, nothing sent.
    for flag in gone {
        let out = bmcctl(&["power", "on", "--bmc", "10.0.0.5", "--user", "u", "--password-env", "PW", flag]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unknown_output_format_is_a_usage_error() {
    let out = bmcctl(&["--output", "yaml", "machine", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: table, wide, json"));
    let out = Command::new(env!("CARGO_BIN_EXE_bmcctl"))
        .args(["machine", "ls"])
        .env("BMCCTL_OUTPUT", "xml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "the environment twin is parsed the same way");
}

#[test]
fn on_a_terminal_errors_are_coloured_unless_no_color() {
    // `script` (util-linux) runs bmcctl on a pseudo-terminal.
    let Some(script) = peer("script") else { return };
    let on_tty = |no_color: Option<&str>| {
        let mut cmd = Command::new(&script);
        cmd.args(["-q", "-e", "-c", &format!("'{}' --bogus", env!("CARGO_BIN_EXE_bmcctl")), "/dev/null"])
            .env("TERM", "xterm")
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(on_tty(None).contains("\x1b["), "colour on a terminal: {:?}", on_tty(None));
    assert!(on_tty(Some("")).contains("\x1b["), "an empty NO_COLOR is unset");
    let plain = on_tty(Some("1"));
    assert!(plain.contains("unexpected argument") && !plain.contains('\x1b'), "{plain:?}");
    // Off a terminal: never.
    let out = bmcctl(&["--bogus"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\x1b'));
}

/// `machine apply` checks the file before it connects: a bad file exits 2
/// with FILE:LINE:COLUMN of the offending text (the indentation slip of
/// issue 34: serde alone says line 2), and NATS — a listener here that
/// counts connections — never hears from it. A good file does connect.
#[test]
fn a_bad_machine_file_exits_2_with_its_line_and_column_before_connecting() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    let dir = temp_dir("apply");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "machines:\n  - name: rack12-node3\n    address: 10.0.12.3\n   credentials: rack12-bmc\n")
        .unwrap();
    let apply = |file: &Path| {
        let args =
            ["--nats-url", &url, "--nats-connect-timeout", "2s", "machine", "apply", "-f", file.to_str().unwrap()];
        bmcctl(&args)
    };
    let out = apply(&bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!("{}:4:4: machines[0]: `credentials` is indented differently", bad.display());
    assert!(err.contains(&want), "{err}");
    let unknown = dir.join("unknown.yaml");
    std::fs::write(&unknown, "machines:\n  - {name: a, address: 10.0.0.1, credentials: c, pasword: x}\n").unwrap();
    let out = apply(&unknown);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:2:", unknown.display())) && err.contains("unknown field `pasword`"), "{err}");
    let out = apply(&dir.join("missing.yaml"));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "bmcctl connected before checking the file"
    );
    // The check can fail: a valid file does connect (and, no NATS there, exits 3).
    let good = dir.join("good.yaml");
    std::fs::write(&good, "machines:\n  - {name: a, address: 10.0.0.1, credentials: c}\n").unwrap();
    let out = apply(&good);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok(), "a valid file connects");
}

/// Completion words come from NATS; a NATS that never answers yields none,
/// and the completion still returns (well within the default 10 s connect
/// timeout: its budget is about two seconds).
#[test]
fn completion_words_from_an_unanswering_nats_are_none_and_bounded() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    let started = std::time::Instant::now();
    let out = bmcctl(&["--nats-url", &url, "__complete", "machines"]);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(8), "took {:?}", started.elapsed());
}
