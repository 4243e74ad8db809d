//! The wire-level RMCP+ responder (`bmcfleet_testing::ipmi::lan`) against
//! third-party clients: ipmitool 1.8.19 (`-I lanplus`) and FreeIPMI
//! (`ipmipower`, `ipmi-raw`, `ipmi-config`), all on 127.0.0.1.
//!
//! A missing client binary skips its tests with a note on stderr, unless
//! `BMCFLEET_REQUIRE_PEERS=1` (then they fail). Every fleet is ready when
//! `LanFleet::start` returns: no test waits for readiness.

use bmcfleet_testing::ipmi::lan::{self, LanConfig, LanFleet};
use bmcfleet_testing::ipmi::LanBmc;
use bmcfleet_testing::peers;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The client binary, or `None` (test skipped) when it is not installed.
fn peer(name: &str) -> Option<PathBuf> {
    peers::program(name, &["/usr/sbin", "/usr/bin", "/sbin"], "apt-get install ipmitool freeipmi-tools")
}

macro_rules! peer_or_skip {
    ($name:expr) => {
        match peer($name) {
            Some(p) => p,
            None => return,
        }
    };
}

fn run(bin: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let out = Command::new(bin)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    eprintln!(
        "$ {} {}\n{}{}",
        bin.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// ipmitool's options for the BMC at 127.0.0.1:`port` as `user`: `-I lanplus
/// -H 127.0.0.1 -p PORT -U user -E -N 1 -R 1` (the password comes from
/// `IPMI_PASSWORD`).
fn lanplus(port: &str, user: &str) -> Vec<String> {
    ["-I", "lanplus", "-H", "127.0.0.1", "-p", port, "-U", user, "-E", "-N", "1", "-R", "1"].map(String::from).to_vec()
}

/// `ipmitool` [`lanplus`] `ARGS...`.
fn ipmitool(bin: &Path, bmc: &LanBmc, user: &str, password: &str, args: &[&str]) -> Output {
    let options = lanplus(&bmc.port().to_string(), user);
    let all: Vec<&str> = options.iter().map(String::as_str).chain(args.iter().copied()).collect();
    run(bin, &all, &[("IPMI_PASSWORD", password)])
}

fn admin(bin: &Path, bmc: &LanBmc, args: &[&str]) -> Output {
    ipmitool(bin, bmc, "admin", "password", args)
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "client failed: {}", text(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the client said (stdout and stderr) when it failed.
fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "client succeeded: {}", text(out));
    text(out)
}

fn fleet(count: usize, suites: &[u8]) -> LanFleet {
    LanFleet::start(LanConfig { count, cipher_suites: suites.to_vec(), ..LanConfig::default() }).expect("fleet")
}

/// Boot flags say "valid, force PXE" (parameter 5, data 1 bit 7 and the
/// device selector 0001b in data 2 bits 5:2).
fn boot_pxe(bmc: &LanBmc) -> bool {
    let flags = bmc.handle().snapshot().boot_flags;
    flags[0] & 0x80 != 0 && (flags[1] >> 2) & 0x0F == 0x1
}

fn ipmitool_commands_under_suite(suite: &str) {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[3, 17]);
    let bmc = fleet.bmc(0);
    let with = |args: &[&'static str]| -> Vec<&str> { [&["-C", suite][..], args].concat() };

    assert!(ok(&admin(&bin, bmc, &with(&["chassis", "power", "status"]))).contains("Chassis Power is off"));
    assert!(ok(&admin(&bin, bmc, &with(&["chassis", "power", "on"]))).contains("Up/On"));
    assert!(bmc.handle().snapshot().power_on);
    assert!(ok(&admin(&bin, bmc, &with(&["chassis", "power", "status"]))).contains("Chassis Power is on"));

    assert!(ok(&admin(&bin, bmc, &with(&["chassis", "bootdev", "pxe"]))).contains("Set Boot Device to pxe"));
    assert!(boot_pxe(bmc), "{:?}", bmc.handle().snapshot().boot_flags);
    assert!(ok(&admin(&bin, bmc, &with(&["chassis", "bootparam", "get", "5"]))).contains("Force PXE"));

    let info = ok(&admin(&bin, bmc, &with(&["mc", "info"])));
    assert!(
        info.contains("Firmware Revision         : 2.45") && info.contains("IPMI Version              : 2.0"),
        "{info}"
    );
    let raw = ok(&admin(&bin, bmc, &with(&["raw", "0x06", "0x01"])));
    assert_eq!(raw.split_whitespace().take(5).collect::<Vec<_>>(), ["20", "01", "02", "45", "02"]);

    // ipmitool closes its session at exit: none is left behind.
    let stats = bmc.stats();
    assert_eq!(stats.handshakes, 7, "{stats:?}");
    assert_eq!(stats.active_sessions, 0, "{stats:?}");
    assert_eq!(stats.pending_sessions, 0, "{stats:?}");
    assert_eq!(stats.closed_sessions, 7, "{stats:?}");
    assert_eq!(stats.requests_for(0x06, 0x3C), 7, "one Close Session per run");
    assert_eq!(stats.discarded, 0, "{stats:?}");
}

#[test]
fn ipmitool_suite_17_power_boot_info_raw() {
    ipmitool_commands_under_suite("17");
}

#[test]
fn ipmitool_suite_3_power_boot_info_raw() {
    ipmitool_commands_under_suite("3");
}

#[test]
fn ipmitool_without_suite_picks_17_from_get_channel_cipher_suites() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(2, &[3, 17]);
    fleet.bmc(1).set_cipher_suites(&[3]).unwrap();
    let out = admin(&bin, fleet.bmc(0), &["-v", "-v", "chassis", "power", "status"]);
    assert!(text(&out).contains("cipher suite 17"), "{}", text(&out));
    assert!(ok(&out).contains("Chassis Power is off"));
    assert_eq!(fleet.bmc(0).stats().requests_for(0x06, 0x54), 1, "Get Channel Cipher Suites");
    let out = admin(&bin, fleet.bmc(1), &["-v", "-v", "chassis", "power", "status"]);
    assert!(text(&out).contains("cipher suite 3"), "{}", text(&out));
    ok(&out);
    let ciphers = ok(&admin(&bin, fleet.bmc(0), &["-C", "17", "channel", "getciphers", "ipmi"]));
    assert!(ciphers.contains("hmac_sha256") && ciphers.contains("hmac_sha1_96"), "{ciphers}");
}

#[test]
fn ipmitool_operator_user_gets_operator_and_no_more() {
    let bin = peer_or_skip!("ipmitool");
    let config = LanConfig::default().with_user(3, "oper", "operpass", 3);
    let fleet = LanFleet::start(config).unwrap();
    let bmc = fleet.bmc(0);
    let op = |args: &[&str]| ipmitool(&bin, bmc, "oper", "operpass", &[&["-C", "17"], args].concat());

    assert!(ok(&op(&["-L", "OPERATOR", "chassis", "power", "on"])).contains("Up/On"));
    assert!(bmc.handle().snapshot().power_on);
    // Administrator commands stay out of reach (0xD4 from the machine).
    let out = op(&["-L", "OPERATOR", "raw", "0x06", "0x03"]);
    assert!(!out.status.success() && text(&out).contains("Insufficient privilege"), "{}", text(&out));
    assert_eq!(bmc.handle().snapshot().warm_resets, 0);
    // Asking for Administrator (ipmitool's default) is refused in RAKP 2.
    let t = failed(&op(&["-v", "chassis", "power", "status"]));
    assert!(t.contains("unauthorized role requested"), "{t}");
    assert_eq!(bmc.active_sessions(), 0);
}

#[test]
fn ipmitool_wrong_password_fails_the_rakp2_check() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[3, 17]);
    let bmc = fleet.bmc(0);
    for suite in ["17", "3"] {
        let t = failed(&ipmitool(&bin, bmc, "admin", "wrong", &["-v", "-C", suite, "chassis", "power", "on"]));
        assert!(
            t.contains("RAKP 2 HMAC is invalid") && t.contains("Unable to establish IPMI v2 / RMCP+ session"),
            "{t}"
        );
    }
    let out = ipmitool(&bin, bmc, "nobody", "password", &["-v", "-C", "17", "chassis", "power", "on"]);
    assert!(text(&out).contains("unauthorized name"), "{}", text(&out));
    assert!(!bmc.handle().snapshot().power_on);
    let stats = bmc.stats();
    assert_eq!((stats.handshakes, stats.active_sessions), (0, 0), "{stats:?}");
}

#[test]
fn ipmitool_refused_cipher_suites() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(2, &[3]);
    fleet.bmc(1).set_cipher_suites(&[17]).unwrap();
    let (only3, only17) = (fleet.bmc(0), fleet.bmc(1));
    let refused = |bmc: &LanBmc, suite: &str, why: &str| {
        let out = admin(&bin, bmc, &["-C", suite, "chassis", "power", "status"]);
        assert!(!out.status.success(), "suite {suite} accepted");
        assert!(text(&out).contains(why), "{}", text(&out));
    };
    refused(only3, "17", "no matching cipher suite");
    refused(only17, "3", "no matching cipher suite");
    refused(only17, "0", "invalid authentication algorithm");
    refused(only17, "1", "no matching cipher suite");
    ok(&admin(&bin, only3, &["-C", "3", "chassis", "power", "status"]));
    ok(&admin(&bin, only17, &["-C", "17", "chassis", "power", "status"]));
    // A suite refused at run time (a fault), although offered.
    only17.faults().refused_suites = vec![17];
    refused(only17, "17", "no matching cipher suite");
    only17.faults().refused_suites.clear();
    ok(&admin(&bin, only17, &["-C", "17", "chassis", "power", "status"]));
}

#[test]
fn ipmitool_suites_1_and_2_without_encryption() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[1, 2]);
    let bmc = fleet.bmc(0);
    ok(&admin(&bin, bmc, &["-C", "2", "chassis", "power", "on"]));
    assert!(bmc.handle().snapshot().power_on);
    assert!(ok(&admin(&bin, bmc, &["-C", "1", "chassis", "power", "status"])).contains("is on"));
    assert_eq!(bmc.active_sessions(), 0);
}

#[test]
fn ipmitool_survives_dropped_duplicated_and_late_replies() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    // The first reply (to Get Channel Authentication Capabilities) is lost:
    // ipmitool retransmits after its 1 s timeout.
    bmc.faults().drop_replies = 1;
    ok(&admin(&bin, bmc, &["-R", "3", "-C", "17", "chassis", "power", "on"]));
    assert!(bmc.handle().snapshot().power_on);
    assert_eq!(bmc.faults().drop_replies, 0);
    assert!(bmc.stats().requests_for(0x06, 0x38) >= 2, "retransmitted");

    bmc.faults().duplicate_replies = 20;
    ok(&admin(&bin, bmc, &["-C", "17", "chassis", "power", "status"]));

    bmc.faults().delay_next_reply = Some(Duration::from_millis(300));
    let start = Instant::now();
    ok(&admin(&bin, bmc, &["-C", "17", "chassis", "power", "status"]));
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(bmc.faults().delay_next_reply, None);
}

#[test]
fn ipmitool_rejects_a_wrong_console_session_id() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    // Every reply carries the complement of ipmitool's session id.
    // ipmitool only warns about it in the Open Session Response and does
    // not check it in RAKP 2/4, so the handshake completes; the session's
    // replies are then refused and nothing is executed past Set Session
    // Privilege Level.
    bmc.faults().wrong_session_id = 100;
    let t = failed(&admin(&bin, bmc, &["-C", "17", "chassis", "power", "on"]));
    assert!(t.contains("Console session ID is not what we requested"), "{t}");
    assert!(t.contains("Received an Unexpected message ID"), "{t}");
    assert!(!bmc.handle().snapshot().power_on);
    assert_eq!(bmc.stats().requests_for(0x00, 0x02), 0, "no Chassis Control reached the BMC");
    // Healed, the next client gets through.
    bmc.faults().wrong_session_id = 0;
    ok(&admin(&bin, bmc, &["-C", "17", "chassis", "power", "on"]));
    assert!(bmc.handle().snapshot().power_on);
}

#[test]
fn ipmitool_session_of_a_restarted_bmc_is_dead() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    // One ipmitool session running two commands, the BMC "restarting" in
    // between: the second command's packets belong to a forgotten session,
    // are dropped, and ipmitool gives up on it.
    let mut child = Command::new(&bin)
        .args(lanplus(&bmc.port().to_string(), "admin"))
        .args(["-C", "17", "shell"])
        .env("IPMI_PASSWORD", "password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipmitool shell");
    use std::io::{BufRead, BufReader, Write};
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "chassis power status").unwrap();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "ipmitool shell ended early");
        if line.contains("Chassis Power is off") {
            break;
        }
    }
    assert_eq!(bmc.active_sessions(), 1);
    bmc.forget_sessions();
    let discarded = bmc.stats().discarded;
    writeln!(stdin, "chassis power on").unwrap();
    writeln!(stdin, "exit").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let rest = format!("{line}{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{rest}");
    assert!(rest.contains("Unable to set Chassis Power Control") && !rest.contains("Control: Up/On"), "{rest}");
    assert!(!bmc.handle().snapshot().power_on);
    assert!(bmc.stats().discarded > discarded, "packets of the old session were dropped");
    assert_eq!(bmc.stats().forgotten_sessions, 1);
}

/// A FreeIPMI client (`ipmipower`, `ipmi-raw`, `ipmi-config`) with its
/// common options: `BIN -D LAN_2_0 -I SUITE -h HOSTS -u USER -p PASSWORD ARGS`.
fn freeipmi(bin: &Path, bmcs: &[LanBmc], suite: &str, (user, password): (&str, &str), args: &[&str]) -> Output {
    let hosts: Vec<String> = bmcs.iter().map(|b| format!("127.0.0.1:{}", b.port())).collect();
    let hosts = hosts.join(",");
    let mut all = vec!["-D", "LAN_2_0", "-I", suite, "-h", &hosts, "-u", user, "-p", password];
    all.extend_from_slice(args);
    run(bin, &all, &[])
}

/// [`freeipmi`] as `admin` / `password`.
fn freeipmi_admin(bin: &Path, bmcs: &[LanBmc], suite: &str, args: &[&str]) -> Output {
    freeipmi(bin, bmcs, suite, ("admin", "password"), args)
}

#[test]
fn freeipmi_ipmipower_suites_17_and_3_without_workaround_flags() {
    let bin = peer_or_skip!("ipmipower");
    let fleet = fleet(2, &[3, 17]);
    let (a, b) = (&fleet.bmcs()[..1], &fleet.bmcs()[1..]);
    assert_eq!(ok(&freeipmi_admin(&bin, a, "17", &["--stat"])).trim(), "127.0.0.1: off");
    assert_eq!(ok(&freeipmi_admin(&bin, a, "17", &["--on"])).trim(), "127.0.0.1: ok");
    assert!(fleet.bmc(0).handle().snapshot().power_on);
    assert_eq!(ok(&freeipmi_admin(&bin, a, "17", &["--stat"])).trim(), "127.0.0.1: on");
    assert_eq!(ok(&freeipmi_admin(&bin, b, "3", &["--on"])).trim(), "127.0.0.1: ok");
    assert!(fleet.bmc(1).handle().snapshot().power_on);
    assert_eq!(ok(&freeipmi_admin(&bin, b, "3", &["--off"])).trim(), "127.0.0.1: ok");
    assert!(!fleet.bmc(1).handle().snapshot().power_on);
    // Wrong credentials, as FreeIPMI reports them.
    let wrong = |user: &str, password: &str| text(&freeipmi(&bin, a, "17", (user, password), &["--stat"]));
    assert!(wrong("admin", "wrong").contains("password invalid"));
    assert!(wrong("nobody", "password").contains("username invalid"));
    for bmc in fleet.bmcs() {
        let stats = bmc.stats();
        assert_eq!(stats.active_sessions, 0, "ipmipower closed its sessions: {stats:?}");
        assert!(stats.handshakes >= 2);
    }
}

#[test]
fn freeipmi_ipmipower_fan_out_over_200_bmcs() {
    let bin = peer_or_skip!("ipmipower");
    let fleet = fleet(200, &[3, 17]);
    let out = ok(&freeipmi_admin(&bin, fleet.bmcs(), "17", &["--on"]));
    assert_eq!(out.lines().filter(|l| l.trim() == "127.0.0.1: ok").count(), 200, "{out}");
    for (i, bmc) in fleet.bmcs().iter().enumerate() {
        assert!(bmc.handle().snapshot().power_on, "BMC {i} at {} not on", bmc.addr());
    }
    let out = ok(&freeipmi_admin(&bin, fleet.bmcs(), "17", &["--stat"]));
    assert_eq!(out.lines().filter(|l| l.trim() == "127.0.0.1: on").count(), 200, "{out}");
    assert!(fleet.bmcs().iter().all(|b| b.active_sessions() == 0));
}

#[test]
fn freeipmi_ipmi_raw_under_suite_17() {
    let bin = peer_or_skip!("ipmi-raw");
    let fleet = fleet(1, &[17]);
    let raw = |args: &[&str]| ok(&freeipmi_admin(&bin, fleet.bmcs(), "17", args));
    let out = raw(&["0", "0x06", "0x01"]);
    assert!(out.contains("rcvd: 01 00 20 01 02 45 02"), "{out}");
    // Chassis Control (power on), an operator command: ipmi-raw's session
    // is raised to Administrator first.
    let out = raw(&["0", "0x00", "0x02", "0x01"]);
    assert!(out.contains("rcvd: 02 00"), "{out}");
    assert!(fleet.bmc(0).handle().snapshot().power_on);
    assert_eq!(fleet.bmc(0).active_sessions(), 0);
}

#[test]
fn freeipmi_ipmi_config_commits_boot_device_pxe_under_suite_17() {
    let bin = peer_or_skip!("ipmi-config");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    let config =
        |args: &[&str]| freeipmi_admin(&bin, fleet.bmcs(), "17", &[&["--category=chassis"][..], args].concat());
    // No `-W opensesspriv`: a spec-correct responder does not need it.
    ok(&config(&["--commit", "-e", "Chassis_Boot_Flags:Boot_Device=PXE"]));
    assert!(boot_pxe(bmc), "{:?}", bmc.handle().snapshot().boot_flags);
    let checkout = ok(&config(&["--checkout", "-S", "Chassis_Boot_Flags"]));
    assert!(checkout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Boot_Device", "PXE"]), "{checkout}");
    assert_eq!(bmc.active_sessions(), 0);
}

#[test]
fn fleet_ports_follow_the_base_port() {
    // A free block: bind port 0 and take the next ports above it (retry on
    // a collision).
    for _ in 0..10 {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port().saturating_add(1);
        drop(probe);
        if base > 65000 {
            continue;
        }
        let Ok(fleet) = LanFleet::start(LanConfig { count: 5, base_port: Some(base), ..LanConfig::default() }) else {
            continue;
        };
        let ports: Vec<u16> = fleet.bmcs().iter().map(|b| b.port()).collect();
        assert_eq!(ports, (base..base + 5).collect::<Vec<_>>());
        assert!(fleet.bmcs().iter().all(|b| b.addr().ip().is_loopback()));
        // Stopped on drop: the sockets are closed. Not checked by binding
        // the ports again: a test running beside this one may bind a
        // just-freed port (they lie in the ephemeral range), and a rebind
        // would fail for a reason that has nothing to do with the fleet.
        // Instead: the kernel's inode of each port's socket, then whether
        // this process still has a descriptor on any of them. The kernel's
        // UDP table is read in pieces while other tests bind and close
        // sockets, so a read may list a line twice or miss one: read until
        // every port is seen. This process's descriptor table is exact.
        let mut ours = std::collections::BTreeSet::new();
        for &port in &ports {
            let found = (0..100).map(|_| udp_inodes(port)).find(|set| !set.is_empty());
            ours.extend(found.unwrap_or_else(|| panic!("no socket seen on port {port}")));
        }
        let held = socket_inodes_held();
        assert!(ours.is_subset(&held), "the fleet's sockets are this process's: {ours:?} / {held:?}");
        drop(fleet);
        let open: Vec<u64> = socket_inodes_held().intersection(&ours).copied().collect();
        assert!(open.is_empty(), "sockets still open after the fleet was dropped: {open:?}");
        return;
    }
    panic!("no free block of 5 UDP ports");
}

/// Inodes of the sockets this process holds a descriptor on
/// (`/proc/self/fd/N` links to `socket:[INODE]`).
fn socket_inodes_held() -> std::collections::BTreeSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| {
            let target = std::fs::read_link(entry.ok()?.path()).ok()?;
            target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Inodes of the IPv4 UDP sockets bound to 127.0.0.1:`port`
/// (`/proc/net/udp`: local address as hex `0100007F:PORT`, inode in the
/// tenth column).
fn udp_inodes(port: u16) -> std::collections::BTreeSet<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").expect("/proc/net/udp");
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            (cols.get(1) == Some(&local.as_str())).then(|| cols.get(9)?.parse().ok()).flatten()
        })
        .collect()
}

#[test]
fn users_come_from_the_state() {
    let bin = peer_or_skip!("ipmitool");
    let mut config = LanConfig::default();
    config.state.users[2] = lan::user("second", "s3cret-with-20-bytes", 4);
    let fleet = LanFleet::start(config).unwrap();
    let bmc = fleet.bmc(0);
    ok(&ipmitool(&bin, bmc, "second", "s3cret-with-20-bytes", &["-C", "17", "chassis", "power", "status"]));
    // Disabled at run time: the next login is refused.
    bmc.handle().update(|s| s.users[2].enabled = false);
    let out = ipmitool(&bin, bmc, "second", "s3cret-with-20-bytes", &["-v", "-C", "17", "chassis", "power", "status"]);
    assert!(text(&out).contains("unauthorized name"), "{}", text(&out));
}

#[test]
fn bmcfleet_probe_sees_an_ipmi_2_0_bmc() {
    // The provider's session-less probe (IPMI 1.5 framing, channel bit 7).
    let fleet = fleet(1, &[17]);
    let start = std::time::Instant::now();
    let caps = bmcfleet_ipmi::probe::channel_auth_caps(
        fleet.bmc(0).addr(),
        start + Duration::from_secs(5),
        Duration::from_millis(200),
    )
    .expect("probe");
    assert_eq!((caps.channel, caps.ipmi20, caps.ipmi15), (1, true, false));
    assert_eq!(fleet.bmc(0).stats().requests_for(0x06, 0x38), 1);
}

#[test]
fn fleet_binary_serves_with_latency_until_sigterm() {
    let bin = peer_or_skip!("ipmitool");
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_bmc-ipmi-fleet"))
        .args(["--count", "3", "--latency", "20ms", "--suites", "17", "--user", "root", "--password", "calvin"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bmc-ipmi-fleet");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((fields.len(), fields[0], fields[2]), (3, "ready", "3"), "{line}");
    let port = fields[1];
    let options = lanplus(port, "root");
    let run_tool = |suite: &str| {
        let start = Instant::now();
        let args: Vec<&str> =
            options.iter().map(String::as_str).chain(["-C", suite, "chassis", "power", "on"]).collect();
        let out = run(&bin, &args, &[("IPMI_PASSWORD", "calvin")]);
        (out, start.elapsed())
    };
    let (out, took) = run_tool("17");
    ok(&out);
    // Get Channel Auth Caps, Open Session, RAKP 1 and 3, Set Session
    // Privilege, Chassis Control, Close Session: 7 round trips at 20 ms.
    assert!(took >= Duration::from_millis(7 * 20), "{took:?}");
    let (out, _) = run_tool("3");
    assert!(!out.status.success(), "suite 3 is not offered");
    // SIGTERM (through kill(1): no unsafe here) ends it cleanly.
    let status = Command::new("kill").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// The soft limit on open files, from /proc (Linux).
fn soft_fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[test]
fn ten_thousand_bmcs_in_one_process() {
    let bin = peer_or_skip!("ipmipower");
    const N: usize = 10_000;
    match soft_fd_limit() {
        Some(limit) if limit >= N as u64 + 1_000 => {}
        other => {
            assert!(!peers::required(), "soft fd limit {other:?} is too low for {N} sockets");
            eprintln!("note: soft fd limit {other:?} is below {}: test skipped", N + 1_000);
            return;
        }
    }
    let start = Instant::now();
    let fleet = LanFleet::start(LanConfig { count: N, latency: Duration::from_millis(20), ..LanConfig::default() })
        .expect("10,000 BMCs");
    eprintln!("{N} BMCs started in {:?}", start.elapsed());
    assert_eq!(fleet.len(), N);
    // Every 50th BMC powered on by one ipmipower fan-out, through 20 ms of
    // latency per reply.
    let sample: Vec<LanBmc> = fleet.bmcs().iter().step_by(50).cloned().collect();
    let out = ok(&freeipmi_admin(&bin, &sample, "17", &["--on"]));
    assert_eq!(out.lines().filter(|l| l.trim() == "127.0.0.1: ok").count(), sample.len(), "{out}");
    for (i, bmc) in fleet.bmcs().iter().enumerate() {
        assert_eq!(bmc.handle().snapshot().power_on, i % 50 == 0, "BMC {i}");
    }
}

#[tokio::test]
async fn a_fleet_starts_and_stops_inside_a_runtime() {
    // The fleet owns its runtime; starting and dropping it from async code
    // (a tokio test, the provider's tests) must not panic or block.
    let fleet = LanFleet::start(LanConfig { count: 2, ..LanConfig::default() }).unwrap();
    let addr = fleet.bmc(1).addr();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let ping = [0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x01, 0x00, 0x00];
    socket.send_to(&ping, addr).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf)).await.unwrap().unwrap();
    assert_eq!((n, from), (28, addr), "ASF pong");
    assert_eq!(&buf[8..10], &[0x40, 0x01]);
    drop(fleet);
}

/// `ipmitool chassis identify` (IPMI v2.0 §28.5) against the responder:
/// force on, a timed interval, off, each seen in the responder's state and
/// in the identify bits of Get Chassis Status (§28.2 byte 3) as ipmitool
/// reads them raw. The provider's identify capability runs over the same
/// command semantics (`providers/ipmi/tests/identify.rs`).
#[test]
fn ipmitool_chassis_identify_drives_the_identify_state() {
    use bmcfleet_testing::ipmi::SpecIdentify;
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    let status_byte3 = || {
        let raw = ok(&admin(&bin, bmc, &["raw", "0x00", "0x01"]));
        u8::from_str_radix(raw.split_whitespace().nth(2).expect("byte 3"), 16).expect("hex")
    };
    assert_eq!(status_byte3(), 0x40, "identify state reported, off");

    assert!(ok(&admin(&bin, bmc, &["chassis", "identify", "force"])).contains("Chassis identify interval: indefinite"));
    assert_eq!(bmc.handle().snapshot().identify, SpecIdentify::Forced);
    assert_eq!(status_byte3(), 0x60, "indefinite on");

    assert!(ok(&admin(&bin, bmc, &["chassis", "identify", "30"])).contains("Chassis identify interval: 30 seconds"));
    assert!(matches!(bmc.handle().snapshot().identify, SpecIdentify::Until(_)));
    assert_eq!(status_byte3(), 0x50, "temporary on");

    assert!(ok(&admin(&bin, bmc, &["chassis", "identify", "0"])).contains("Chassis identify interval: off"));
    assert_eq!(bmc.handle().snapshot().identify, SpecIdentify::Off);
    assert_eq!(status_byte3(), 0x40);

    // A BMC without Force Identify On: ipmitool's own message for 0xCC.
    bmc.handle().update(|s| s.identify_force_supported = false);
    assert!(failed(&admin(&bin, bmc, &["chassis", "identify", "force"])).contains("may not support Force Identify On"));
}

/// `ipmitool dcmi power reading|get_limit|set_limit|activate|deactivate`
/// (DCMI 1.5 §6.6) against the responder's DCMI: the numbers ipmitool
/// prints are the responder's, and its writes land in the responder's state.
#[test]
fn ipmitool_dcmi_power_reading_and_limit() {
    let bin = peer_or_skip!("ipmitool");
    let fleet = fleet(1, &[17]);
    let bmc = fleet.bmc(0);
    let reading = ok(&admin(&bin, bmc, &["dcmi", "power", "reading"]));
    for line in [
        "Instantaneous power reading:                   300 Watts",
        "Minimum during sampling period:                120 Watts",
        "Maximum during sampling period:                450 Watts",
        "Average power reading over sample period:      280 Watts",
        "Sampling period:                          00000060 Seconds.",
        "Power reading state is:                   activated",
    ] {
        assert!(reading.contains(line), "{line:?} in {reading}");
    }
    let limit = ok(&admin(&bin, bmc, &["dcmi", "power", "get_limit"]));
    assert!(limit.contains("No Active Power Limit"), "{limit}");

    ok(&admin(&bin, bmc, &["dcmi", "power", "set_limit", "limit", "450"]));
    assert_eq!(bmc.handle().snapshot().dcmi.unwrap().limit_watts, 450);
    ok(&admin(&bin, bmc, &["dcmi", "power", "activate"]));
    assert!(bmc.handle().snapshot().dcmi.unwrap().limit_active);
    let limit = ok(&admin(&bin, bmc, &["dcmi", "power", "get_limit"]));
    assert!(limit.contains("Power Limit Active") && limit.contains("450 Watts"), "{limit}");
    ok(&admin(&bin, bmc, &["dcmi", "power", "deactivate"]));
    assert!(!bmc.handle().snapshot().dcmi.unwrap().limit_active);
}
