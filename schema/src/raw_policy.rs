//! Which raw passthrough requests a deployment allows.
//!
//! A policy is an ordered list of rules; the **first rule that matches**
//! decides, and a request no rule matches is **denied**. The gateway checks
//! it at admission (a refused batch is never stored) and the worker again
//! before it sends anything (defence in depth). A refusal is
//! [`ErrorCode::RawNotAllowed`](crate::ErrorCode::RawNotAllowed) naming the rule.
//!
//! Syntax (`--raw-policy`): rules separated by `;` or newlines, `#` starts a
//! comment; `default` inserts the default rules, `off` denies every raw
//! request. A value starting with `@` names a file holding the rules.
//!
//! ```text
//! allow ipmi:*                          every IPMI raw request
//! deny  ipmi:netfn=0x08-0x09            Firmware netfn (requests are even: 0x08)
//! deny  ipmi:netfn=0x2c,cmd=0x2e-0x34   PICMG HPM.1 firmware upgrade commands
//! allow ipmi:netfn=0x06,cmd=0x01        one command (numbers: hex 0x.. or decimal)
//! deny  redfish:POST|PATCH:*/UpdateService*   methods `*` or `A|B`, path glob
//! allow redfish:GET:/redfish/v1/*
//! allow action:event_log_clear          a destructive typed action, by kind
//! ```
//!
//! Destructive typed actions ([`crate::Action::is_destructive`]: clearing
//! the event log) are checked against `action:KIND` rules (`KIND` a glob
//! over [`crate::Action::kind`]): the default rules deny them all, so an
//! operator allows one by putting `allow action:event_log_clear` before
//! `default` (`--raw-policy 'allow action:event_log_clear; default'`). The
//! default rules also deny their raw spellings (IPMI Clear SEL, the Redfish
//! requests that clear a log, reset the BIOS or secure boot keys), which an
//! operator allows with rules of their own.
//!
//! Redfish paths are matched in their canonical form
//! ([`canonical_redfish_path`]: percent-decoded once, repeated slashes
//! collapsed, no dot segments, no trailing slash; a spelling that cannot be
//! made canonical is refused), case-insensitively (BMCs differ), without
//! their query; `*` matches any run of characters including `/`. The
//! canonical form is also what is sent, so the path a rule saw is the path
//! the BMC gets, however a server would read another spelling.
//!
//! IPMI requests that carry another request (Send Message, app 0x34, used to
//! bridge to other controllers; Master Write-Read, app 0x52, which writes
//! raw bytes, an IPMB request frame among them, to the IPMB or a private
//! bus) are denied by the default rules: the policy cannot see the inner
//! command.

use std::fmt;

/// What was refused: a path, a policy, or a request the policy denies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A Redfish path that cannot be made canonical ([`canonical_redfish_path`]).
    Path,
    /// Policy text that does not parse.
    Rules,
    /// A policy file (`@FILE`) that cannot be read (the source is the I/O error).
    File,
    /// A request the policy refuses ([`RawPolicy::check`]); the text names
    /// the deciding rule.
    Denied,
}

impl crate::error::Coded for ErrorKind {
    fn code(self) -> crate::ErrorCode {
        match self {
            ErrorKind::Path | ErrorKind::Rules | ErrorKind::File => crate::ErrorCode::InvalidField,
            ErrorKind::Denied => crate::ErrorCode::RawNotAllowed,
        }
    }
}

pub type Error = crate::error::Error<ErrorKind>;

/// Longest raw Redfish path (with its query) accepted.
pub const MAX_REDFISH_PATH: usize = 1024;

/// A Redfish path as logs, spans and messages show it: without its query,
/// which may carry a token or a signature.
pub fn without_query(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// The one spelling of a raw Redfish path that is matched and sent: percent
/// escapes decoded (once), repeated slashes collapsed, no `.` or `..`
/// segment, no trailing slash, under `/redfish/v1`; the query is kept as
/// given. Refused (`Err`, the reason): anything a server could read as
/// another path: a `%` left after decoding (double encoding), a backslash,
/// `;` (path parameters), control characters, spaces, non-ASCII, `#`, a dot
/// segment, or a path outside `/redfish/v1`.
pub fn canonical_redfish_path(path: &str) -> Result<String, Error> {
    let refused = |why: &str| Error::new(ErrorKind::Path, why);
    if path.len() > MAX_REDFISH_PATH {
        return Err(refused(&format!("longer than {MAX_REDFISH_PATH} bytes")));
    }
    let plain = |c: char| c.is_ascii() && !c.is_ascii_control() && !matches!(c, ' ' | '\\' | ';' | '#');
    if !path.chars().all(plain) {
        return Err(refused("a control character, space, backslash, `;`, `#` or non-ASCII character"));
    }
    let (p, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let bytes = p.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            decoded.push(hex.ok_or_else(|| refused("a `%` that is not a percent escape"))?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(decoded).map_err(|_| refused("a percent escape that is not UTF-8"))?;
    if !decoded.chars().all(|c| plain(c) && c != '%' && c != '?') {
        return Err(refused("a percent escape of `%`, `?`, `#`, `;`, a backslash, a space or a control character"));
    }
    let segments: Vec<&str> = decoded.split('/').filter(|s| !s.is_empty()).collect();
    if segments.iter().any(|s| *s == "." || *s == "..") {
        return Err(refused("a `.` or `..` segment"));
    }
    let canonical = format!("/{}", segments.join("/"));
    if !(canonical == "/redfish/v1" || canonical.starts_with("/redfish/v1/")) {
        return Err(refused("not under /redfish/v1"));
    }
    Ok(match query {
        Some(q) if !q.is_empty() => format!("{canonical}?{q}"),
        _ => canonical,
    })
}

/// The default rules: IPMI firmware netfns, HPM.1 upgrade commands, Send
/// Message and Master Write-Read (bridging and raw bus writes: the inner
/// request is not visible) and every write to
/// a Redfish update service (standard or OEM) are denied; so are the raw
/// spellings of the destructive typed actions, which the last rule denies
/// (Clear SEL; a log service's `ClearLog` and its entries' deletion,
/// `Bios.ResetBios`, secure boot `ResetKeys` and deleting secure boot
/// keys): a request the default refuses as `{"event_log": "clear"}` is
/// not let through as a raw request. So are raw writes of BMC accounts
/// (IPMI Set User Access, Name and Password; Redfish writes under the
/// account service) and of the BMC's network settings (IPMI Set LAN
/// Configuration Parameters; Redfish writes to Ethernet interfaces): the
/// typed `user` and `network_source` actions do these with the worker's
/// checks (the account it logs in with, another machine's address), which
/// a raw request would bypass. Everything else is allowed.
///
/// Every other spelling of those writes found in the vendors' references
/// (issue 32) is denied as well, matched on the canonical path:
/// - IPMI: Set Channel Access (app 0x40: whether the LAN channel answers),
///   Set User Payload Access (app 0x4c), Set Channel Security Keys (app
///   0x56, the BMC key), and the OEM LAN commands Dell's Set NIC Selection
///   and its failover (0x30/0x24, 0x30/0x28) and Supermicro's LAN interface
///   group (0x30/0x70; its fan duty sub-command is in the same group: a
///   deployment that drives fans raw allows it with a rule of its own);
/// - Redfish, any vendor: the manager's network protocol (`NetworkProtocol`:
///   host name, FQDN; Lenovo XCC's `Oem/Lenovo/DNS` under it; iLO 4's
///   `NetworkService`), host interfaces (their address, and credential
///   bootstrapping, which creates accounts), dedicated network ports, and
///   `Manager.ResetToDefaults` (network and accounts back to the factory's);
/// - Dell iDRAC: the attribute registries (`Managers/<id>/Attributes` of
///   `iDRAC.Embedded.1`, `System.Embedded.1` and
///   `LifecycleController.Embedded.1`, and `Oem/Dell/DellAttributes/<id>`
///   of iDRAC 6 and later: `IPv4.1.Address`, `IPv4Static.1.Address`,
///   `NIC.1.DNSRacName`, `Users.<n>.*` are written there), the
///   server-configuration-profile import (`ImportSystemConfiguration`, its
///   preview too) and `DellManager.ResetToDefaults`;
/// - HPE iLO: `HpeiLO.ResetToFactoryDefaults` (its `Oem/Hpe` Ethernet and
///   account settings live under the Ethernet interfaces and account
///   service, denied above);
/// - Supermicro: the directory logins under `Oem/Supermicro` (LDAP, Active
///   Directory, RADIUS).
///
/// A rule sees the path, not the body: a write to one of these resources
/// is denied whatever it changes. An operator allows one with a rule of
/// its own before `default`.
pub const DEFAULT_RULES: &str = "deny ipmi:netfn=0x08-0x09; \
     deny ipmi:netfn=0x2c,cmd=0x2e-0x34; \
     deny ipmi:netfn=0x06,cmd=0x34; \
     deny ipmi:netfn=0x06,cmd=0x52; \
     deny ipmi:netfn=0x0a,cmd=0x47; \
     deny ipmi:netfn=0x06,cmd=0x43; \
     deny ipmi:netfn=0x06,cmd=0x45; \
     deny ipmi:netfn=0x06,cmd=0x47; \
     deny ipmi:netfn=0x0c,cmd=0x01; \
     deny ipmi:netfn=0x06,cmd=0x40; \
     deny ipmi:netfn=0x06,cmd=0x4c; \
     deny ipmi:netfn=0x06,cmd=0x56; \
     deny ipmi:netfn=0x30,cmd=0x24; \
     deny ipmi:netfn=0x30,cmd=0x28; \
     deny ipmi:netfn=0x30,cmd=0x70; \
     allow ipmi:*; \
     deny redfish:POST|PATCH|PUT|DELETE:*updateservice*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/accountservice*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/ethernetinterfaces*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/networkprotocol*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/networkservice*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/hostinterfaces*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/dedicatednetworkports*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/managers/*/attributes*; \
     deny redfish:POST|PATCH|PUT|DELETE:*dellattributes*; \
     deny redfish:POST|PATCH|PUT|DELETE:*importsystemconfiguration*; \
     deny redfish:POST|PATCH|PUT|DELETE:*resettodefaults*; \
     deny redfish:POST|PATCH|PUT|DELETE:*resettofactorydefaults*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/oem/supermicro/*ldap*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/oem/supermicro/*activedirectory*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/oem/supermicro/*radius*; \
     deny redfish:POST|PATCH|PUT|DELETE:*clearlog*; \
     deny redfish:POST|PATCH|PUT|DELETE:*/logservices/*/entries*; \
     deny redfish:POST|PATCH|PUT|DELETE:*resetbios*; \
     deny redfish:POST|PATCH|PUT|DELETE:*resetkeys*; \
     deny redfish:DELETE:*/securebootdatabases/*; \
     allow redfish:*:*; \
     deny action:*";

/// An inclusive range of byte values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range(u8, u8);

impl Range {
    fn contains(self, v: u8) -> bool {
        self.0 <= v && v <= self.1
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Matcher {
    Ipmi {
        netfn: Option<Range>,
        cmd: Option<Range>,
    },
    /// Methods upper-case (empty = any), the path glob lower-case.
    Redfish {
        methods: Vec<String>,
        path: String,
    },
    /// A destructive typed action's kind glob.
    Action {
        kind: String,
    },
}

/// One `allow` / `deny` rule, kept with its text for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    allow: bool,
    matcher: Matcher,
    text: String,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An ordered list of rules (first match decides, no match denies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawPolicy {
    rules: Vec<Rule>,
}

impl Default for RawPolicy {
    fn default() -> Self {
        RawPolicy::parse(DEFAULT_RULES).expect("the default raw policy parses")
    }
}

/// What a raw request is, for matching.
#[derive(Clone, Copy, Debug)]
pub enum RawTarget<'a> {
    Ipmi {
        netfn: u8,
        cmd: u8,
    },
    Redfish {
        method: &'a str,
        path: &'a str,
    },
    /// A destructive typed action ([`crate::Action::is_destructive`]), by kind.
    Action {
        kind: &'a str,
    },
}

impl fmt::Display for RawTarget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawTarget::Ipmi { netfn, cmd } => write!(f, "raw IPMI netfn {netfn:#04x} cmd {cmd:#04x}"),
            RawTarget::Redfish { method, path } => write!(f, "raw Redfish {method} {path}"),
            RawTarget::Action { kind } => write!(f, "destructive action {kind}"),
        }
    }
}

impl<'a> From<&'a crate::Action> for RawTarget<'a> {
    fn from(a: &'a crate::Action) -> Self {
        match a {
            crate::Action::Raw(r) => r.into(),
            other => RawTarget::Action { kind: other.kind() },
        }
    }
}

impl<'a> From<&'a crate::RawRequest> for RawTarget<'a> {
    fn from(r: &'a crate::RawRequest) -> Self {
        match r {
            crate::RawRequest::Ipmi(i) => RawTarget::Ipmi { netfn: i.netfn, cmd: i.cmd },
            crate::RawRequest::Redfish(r) => RawTarget::Redfish { method: r.method.as_str(), path: &r.path },
        }
    }
}

fn syntax(why: String) -> Error {
    Error::new(ErrorKind::Rules, why)
}

fn number(s: &str) -> Result<u8, Error> {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse::<u8>(),
    };
    parsed.map_err(|_| syntax(format!("`{s}` is not a number from 0 to 255 (decimal or 0x..)")))
}

fn range(s: &str) -> Result<Range, Error> {
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(syntax(format!("range `{s}` is empty")));
            }
            Ok(Range(a, b))
        }
        None => number(s).map(|n| Range(n, n)),
    }
}

/// A Redfish path pattern in the spelling the paths it is matched
/// against have ([`canonical_redfish_path`]): repeated slashes collapsed,
/// no trailing slash, lower case. A rule written with a BMC's own
/// spelling (`/redfish/v1/Systems/`) matches the path it names; without
/// this a deny rule so written would match nothing and deny nothing.
fn canonical_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    while out.len() > 1 && out.ends_with('/') {
        out.pop();
    }
    out.to_ascii_lowercase()
}

fn glob(pattern: &str, text: &str) -> bool {
    // Iterative wildcard match: `*` is any run of characters.
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != b'*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = ti;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn rule(text: &str) -> Result<Rule, Error> {
    let (verb, rest) = text
        .split_once(char::is_whitespace)
        .ok_or_else(|| syntax(format!("rule `{text}`: expected `allow` or `deny` and a target")))?;
    let allow = match verb {
        "allow" => true,
        "deny" => false,
        other => return Err(syntax(format!("rule `{text}`: `{other}` is not `allow` or `deny`"))),
    };
    let target = rest.trim();
    let bad = |why: &str| syntax(format!("rule `{text}`: {why}"));
    let matcher = if let Some(spec) = target.strip_prefix("ipmi:") {
        let (mut netfn, mut cmd) = (None, None);
        if spec.trim() != "*" {
            for part in spec.split(',') {
                let (k, v) =
                    part.split_once('=').ok_or_else(|| bad("IPMI targets are `*` or `netfn=N[-M][,cmd=N[-M]]`"))?;
                let r = range(v).map_err(|e| e.context_before(format!("rule `{text}`")))?;
                match k.trim() {
                    "netfn" => netfn = Some(r),
                    "cmd" => cmd = Some(r),
                    other => return Err(bad(&format!("unknown IPMI field `{other}` (netfn, cmd)"))),
                }
            }
        }
        Matcher::Ipmi { netfn, cmd }
    } else if let Some(spec) = target.strip_prefix("redfish:") {
        let (methods, path) = spec
            .split_once(':')
            .ok_or_else(|| bad("Redfish targets are `METHOD:PATH` (METHOD `*` or `GET|POST|...`)"))?;
        let methods = if methods.trim() == "*" {
            vec![]
        } else {
            methods
                .split('|')
                .map(|m| {
                    let m = m.trim().to_ascii_uppercase();
                    if ["GET", "POST", "PATCH", "PUT", "DELETE"].contains(&m.as_str()) {
                        Ok(m)
                    } else {
                        Err(bad(&format!("unknown HTTP method `{m}`")))
                    }
                })
                .collect::<Result<_, _>>()?
        };
        let path = path.trim();
        if path.is_empty() {
            return Err(bad("empty path pattern"));
        }
        Matcher::Redfish { methods, path: canonical_pattern(path) }
    } else if let Some(kind) = target.strip_prefix("action:") {
        let kind = kind.trim();
        if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c == '*') {
            return Err(bad("action targets are `action:KIND` (an action kind such as event_log_clear, `*` allowed)"));
        }
        Matcher::Action { kind: kind.to_owned() }
    } else {
        return Err(bad("the target must start with `ipmi:`, `redfish:` or `action:`"));
    };
    Ok(Rule { allow, matcher, text: format!("{verb} {target}") })
}

impl RawPolicy {
    /// A policy that denies every raw request.
    pub fn off() -> Self {
        RawPolicy { rules: vec![] }
    }

    /// Parse rules (see the module documentation). `@FILE` is not resolved
    /// here: see [`RawPolicy::from_arg`].
    pub fn parse(text: &str) -> Result<Self, Error> {
        let lines: Vec<&str> = text
            .split(['\n', ';'])
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .collect();
        match lines.as_slice() {
            [] => return Err(syntax("the raw policy has no rules: use `off` to deny every raw request".into())),
            ["off"] => return Ok(RawPolicy::off()),
            _ if lines.contains(&"off") => return Err(syntax("`off` cannot be combined with other rules".into())),
            _ => {}
        }
        let mut rules = vec![];
        for line in lines {
            match line {
                "default" => rules.extend(RawPolicy::default().rules),
                _ => rules.push(rule(line)?),
            }
        }
        Ok(RawPolicy { rules })
    }

    /// A command-line value: rules, or `@FILE` to read them from a file.
    pub fn from_arg(arg: &str) -> Result<Self, Error> {
        match arg.strip_prefix('@') {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::with_source(ErrorKind::File, format!("cannot read raw policy file {path}"), e)
                })?;
                RawPolicy::parse(&text).map_err(|e| e.context_before(format!("raw policy file {path}")))
            }
            None => RawPolicy::parse(arg),
        }
    }

    /// `Ok(())` when allowed, else the reason (naming the deciding rule).
    pub fn check(&self, target: RawTarget<'_>) -> Result<(), Error> {
        let denied = |why: String| Err(Error::new(ErrorKind::Denied, why));
        for r in &self.rules {
            let hit = match (&r.matcher, target) {
                (Matcher::Ipmi { netfn, cmd }, RawTarget::Ipmi { netfn: n, cmd: c }) => {
                    netfn.is_none_or(|x| x.contains(n)) && cmd.is_none_or(|x| x.contains(c))
                }
                (Matcher::Redfish { methods, path }, RawTarget::Redfish { method, path: p }) => {
                    let p = match canonical_redfish_path(p) {
                        Ok(c) => c,
                        Err(why) => {
                            return denied(format!("{target} is refused: its path cannot be made canonical ({why})"))
                        }
                    };
                    let p = without_query(&p).to_ascii_lowercase();
                    (methods.is_empty() || methods.iter().any(|m| m.eq_ignore_ascii_case(method))) && glob(path, &p)
                }
                (Matcher::Action { kind }, RawTarget::Action { kind: k }) => glob(kind, k),
                _ => false,
            };
            if hit {
                return if r.allow {
                    Ok(())
                } else {
                    denied(format!("{target} is denied by the raw policy rule `{r}`"))
                };
            }
        }
        if self.rules.is_empty() {
            denied(format!("{target} is refused: raw passthrough is off in this deployment"))
        } else {
            denied(format!("{target} is refused: no raw policy rule allows it"))
        }
    }

    /// The rules, for logs.
    pub fn describe(&self) -> String {
        if self.rules.is_empty() {
            "off".into()
        } else {
            self.rules.iter().map(|r| r.text.as_str()).collect::<Vec<_>>().join("; ")
        }
    }
}

impl std::str::FromStr for RawPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        RawPolicy::from_arg(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redfish_paths_have_one_spelling() {
        for (given, canonical) in [
            ("/redfish/v1", "/redfish/v1"),
            ("/redfish/v1/", "/redfish/v1"),
            ("//redfish//v1///Systems/", "/redfish/v1/Systems"),
            ("/redfish/v1/Update%53ervice/Actions", "/redfish/v1/UpdateService/Actions"),
            ("/redfish/v1/Systems?$expand=.", "/redfish/v1/Systems?$expand=."),
            ("/redfish/v1/Systems/1%2FBios", "/redfish/v1/Systems/1/Bios"),
        ] {
            assert_eq!(canonical_redfish_path(given).ok().as_deref(), Some(canonical), "{given}");
        }
        for bad in [
            "/redfish/v1/./UpdateService",
            "/redfish/v1/Systems/../UpdateService",
            "/redfish/v1/%2e%2e/x",
            "/redfish/v1/Update%2553ervice",
            "/redfish/v1/UpdateService;x=1",
            "/redfish/v1\\UpdateService",
            "/redfish/v1/Update Service",
            "/redfish/v1/a#b",
            "/redfish/v1/%zz",
            "/redfish/v1/%3F",
            "/redfish/v1/%c3%a9",
            "/redfish/v2/Systems",
            "/etc/passwd",
            "/redfish/v1/\u{7f}",
        ] {
            assert!(canonical_redfish_path(bad).is_err(), "{bad} accepted as {:?}", canonical_redfish_path(bad));
        }
    }

    #[test]
    fn every_spelling_of_an_update_service_write_is_denied() {
        let p = RawPolicy::default();
        for path in [
            "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            "/redfish/v1/Update%53ervice/Actions/SimpleUpdate",
            "/redfish/v1/%55pdateService",
            "//redfish/v1//updateservice/",
            "/REDFISH/v1/x/..", // refused: not canonical
            "/redfish/v1/Oem/Hpe/%75%70%64%61%74%65%73%65%72%76%69%63%65",
        ] {
            assert!(p.check(rf("POST", path)).is_err(), "POST {path} allowed");
        }
        assert!(p.check(rf("GET", "/redfish/v1/Update%53ervice")).is_ok(), "reads stay allowed");
        assert!(
            p.check(ipmi(0x06, 0x34)).unwrap_err().to_string().contains("netfn=0x06,cmd=0x34"),
            "Send Message bridges: denied"
        );
        assert!(p.check(ipmi(0x06, 0x01)).is_ok());
    }

    proptest::proptest! {
        /// Canonical paths are fixed points, and however a denied path is
        /// re-spelled (escapes, doubled slashes, case), it is refused or
        /// still denied: canonicalising never widens access.
        #[test]
        fn canonicalising_is_idempotent_and_never_widens(
            segs in proptest::collection::vec("[A-Za-z0-9$._-]{1,8}", 0..4),
            escape in proptest::collection::vec(proptest::bool::ANY, 64),
            doubled in proptest::collection::vec(proptest::bool::ANY, 8),
            upper in proptest::bool::ANY,
        ) {
            let denied = format!("/redfish/v1/{}UpdateService", segs.iter().map(|s| format!("{s}/")).collect::<String>());
            let mut spelled = String::new();
            for (i, c) in denied.chars().enumerate() {
                if c == '/' && doubled.get(i % 8).copied().unwrap_or(false) {
                    spelled.push('/');
                }
                if c != '/' && escape[i % 64] {
                    spelled.push_str(&format!("%{:02X}", c as u32));
                } else if upper && c.is_ascii_alphabetic() && i > 12 {
                    spelled.push(c.to_ascii_uppercase());
                } else {
                    spelled.push(c);
                }
            }
            if let Ok(c) = canonical_redfish_path(&spelled) {
                proptest::prop_assert_eq!(canonical_redfish_path(&c).ok(), Some(c.clone()));
            }
            proptest::prop_assert!(RawPolicy::default().check(rf("POST", &spelled)).is_err(), "POST {} allowed", spelled);
        }
    }

    fn ipmi(netfn: u8, cmd: u8) -> RawTarget<'static> {
        RawTarget::Ipmi { netfn, cmd }
    }

    fn rf<'a>(method: &'a str, path: &'a str) -> RawTarget<'a> {
        RawTarget::Redfish { method, path }
    }

    /// Master Write-Read (app 0x52) writes raw bytes to the IPMB or a
    /// private bus: an IPMB request frame written that way reaches another
    /// controller as Send Message (app 0x34) would, with any netfn the
    /// policy never sees (the firmware ones included), and a private bus
    /// holds EEPROMs and voltage regulators. The default denies both.
    #[test]
    fn requests_the_policy_cannot_see_inside_are_denied_by_default() {
        let p = RawPolicy::default();
        for (cmd, rule) in [(0x34, "netfn=0x06,cmd=0x34"), (0x52, "netfn=0x06,cmd=0x52")] {
            let e = p.check(ipmi(0x06, cmd)).unwrap_err().to_string();
            assert!(e.contains(rule), "app {cmd:#04x}: {e}");
        }
        assert!(p.check(ipmi(0x06, 0x33)).is_ok(), "Get Message only reads what arrived");
    }

    /// Raw account and network writes would bypass the typed actions'
    /// checks (the worker's own login account, another machine's address).
    #[test]
    fn raw_account_and_network_writes_are_denied_by_default_and_reads_are_not() {
        let p = RawPolicy::default();
        for (netfn, cmd) in [(0x06, 0x43), (0x06, 0x45), (0x06, 0x47), (0x0c, 0x01)] {
            assert!(p.check(ipmi(netfn, cmd)).is_err(), "netfn {netfn:#04x} cmd {cmd:#04x}");
        }
        for (netfn, cmd) in [(0x06, 0x44), (0x06, 0x46), (0x0c, 0x02)] {
            assert!(p.check(ipmi(netfn, cmd)).is_ok(), "a read: netfn {netfn:#04x} cmd {cmd:#04x}");
        }
        for (method, path) in [
            ("PATCH", "/redfish/v1/AccountService/Accounts/2"),
            ("POST", "/redfish/v1/AccountService/Accounts"),
            ("DELETE", "/redfish/v1/AccountService/Accounts/3"),
            ("PATCH", "/redfish/v1/AccountService"),
            ("PATCH", "/redfish/v1/Managers/1/EthernetInterfaces/1"),
        ] {
            assert!(p.check(rf(method, path)).is_err(), "{method} {path}");
        }
        assert!(p.check(rf("GET", "/redfish/v1/AccountService/Accounts/2")).is_ok());
        assert!(p.check(rf("GET", "/redfish/v1/Managers/1/EthernetInterfaces/1")).is_ok());
    }

    /// Issue 32 item 4: every spelling found in the vendor references of a
    /// raw write that changes a BMC's network identity or its accounts is
    /// denied, after canonicalisation (case, escapes, dot segments,
    /// doubled or trailing slashes, queries); reads stay allowed.
    #[test]
    fn writes_of_a_bmcs_network_identity_or_accounts_are_denied_in_every_spelling() {
        let p = RawPolicy::default();
        let families: [(&str, &[&str]); 9] = [
            (
                "Dell iDRAC attribute registries",
                &[
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Attributes",
                    "/redfish/v1/Managers/System.Embedded.1/Attributes",
                    "/redfish/v1/Managers/LifecycleController.Embedded.1/Attributes",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Oem/Dell/DellAttributes/iDRAC.Embedded.1",
                    "/redfish/v1/managers/idrac.embedded.1/ATTRIBUTES/",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/%41ttributes?$select=IPv4.1.Address",
                    "//redfish/v1/Managers//iDRAC.Embedded.1///Attributes",
                ],
            ),
            (
                "Dell server configuration profile import",
                &[
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/EID_674_Manager.ImportSystemConfiguration",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/DellManager.ImportSystemConfiguration",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/EID_674_Manager.ImportSystemConfigurationPreview",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/EID_674_Manager.Import%53ystemConfiguration",
                ],
            ),
            (
                "resets to factory defaults",
                &[
                    "/redfish/v1/Managers/1/Actions/Manager.ResetToDefaults",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/DellManager.ResetToDefaults",
                    "/redfish/v1/Managers/1/Actions/Oem/Hpe/HpeiLO.ResetToFactoryDefaults",
                    "/redfish/v1/Managers/1/Actions/Oem/Hpe/HpeiLO.ResetToFactoryDefaults/",
                ],
            ),
            (
                "manager network protocol",
                &[
                    "/redfish/v1/Managers/1/NetworkProtocol",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/NetworkProtocol",
                    "/redfish/v1/Managers/1/NetworkProtocol/Oem/Lenovo/DNS",
                    "/redfish/v1/Managers/1/NetworkService",
                    "/redfish/v1/Managers/1/networkprotocol?x=1",
                ],
            ),
            (
                "manager Ethernet interfaces (standard and OEM fields alike)",
                &[
                    "/redfish/v1/Managers/1/EthernetInterfaces/1",
                    "/redfish/v1/Managers/iDRAC.Embedded.1/EthernetInterfaces/NIC.1",
                    "/redfish/v1/Managers/1/EthernetInterfaces/NIC",
                    "/redfish/v1/Managers/1/Ethernet%49nterfaces/1",
                    "/redfish/v1/Managers/1/EthernetInterfaces/1/./",
                ],
            ),
            (
                "host interfaces and dedicated network ports",
                &[
                    "/redfish/v1/Managers/BMC/HostInterfaces/1",
                    "/redfish/v1/Managers/1/HostInterfaces/1",
                    "/redfish/v1/Managers/BMC/DedicatedNetworkPorts/1",
                ],
            ),
            (
                "account services (standard and OEM)",
                &[
                    "/redfish/v1/AccountService/Accounts/2",
                    "/redfish/v1/AccountService/Oem/Hpe/DirectoryTest",
                    "/redfish/v1/AccountService/LDAP/Certificates",
                    "/redfish/v1/accountservice/",
                ],
            ),
            (
                "Supermicro directory logins",
                &[
                    "/redfish/v1/Managers/1/Oem/Supermicro/LDAP",
                    "/redfish/v1/Managers/1/Oem/Supermicro/ActiveDirectory",
                    "/redfish/v1/Managers/1/Oem/Supermicro/RADIUS",
                ],
            ),
            ("a path that cannot be made canonical", &["/redfish/v1/Managers/1/../1/Attributes"]),
        ];
        for (family, paths) in families {
            for path in paths {
                for method in ["PATCH", "POST", "PUT", "DELETE"] {
                    assert!(p.check(rf(method, path)).is_err(), "{family}: {method} {path} allowed");
                }
            }
        }
        for path in [
            "/redfish/v1/Managers/iDRAC.Embedded.1/Attributes",
            "/redfish/v1/Managers/1/NetworkProtocol",
            "/redfish/v1/Managers/1/HostInterfaces/1",
            "/redfish/v1/Managers/1/Oem/Supermicro/LDAP",
        ] {
            assert!(p.check(rf("GET", path)).is_ok(), "reading {path} stays allowed");
        }
        assert!(p.check(rf("PATCH", "/redfish/v1/Systems/System.Embedded.1/Bios/Settings")).is_ok());
        assert!(p.check(rf("POST", "/redfish/v1/Managers/1/Actions/Manager.Reset")).is_ok(), "a BMC restart");
        // IPMI: LAN channel access, payload access, the BMC key, OEM LAN selection.
        for (netfn, cmd) in
            [(0x0c, 0x01), (0x06, 0x40), (0x06, 0x4c), (0x06, 0x56), (0x30, 0x24), (0x30, 0x28), (0x30, 0x70)]
        {
            assert!(p.check(ipmi(netfn, cmd)).is_err(), "netfn {netfn:#04x} cmd {cmd:#04x}");
        }
        for (netfn, cmd) in [(0x0c, 0x02), (0x06, 0x41), (0x06, 0x4d), (0x30, 0x25), (0x30, 0x45)] {
            assert!(p.check(ipmi(netfn, cmd)).is_ok(), "a read or an unrelated OEM command: {netfn:#04x} {cmd:#04x}");
        }
    }

    #[test]
    fn default_denies_firmware_and_allows_the_rest() {
        let p = RawPolicy::default();
        assert!(p.check(ipmi(0x06, 0x01)).is_ok());
        assert!(p.check(ipmi(0x30, 0x01)).is_ok());
        let e = p.check(ipmi(0x08, 0x00)).unwrap_err().to_string();
        assert!(e.contains("deny ipmi:netfn=0x08-0x09") && e.contains("netfn 0x08"), "{e}");
        assert!(p.check(ipmi(0x2c, 0x31)).unwrap_err().to_string().contains("cmd=0x2e-0x34"));
        assert!(p.check(ipmi(0x2c, 0x01)).is_ok());
        assert!(p.check(rf("GET", "/redfish/v1/UpdateService")).is_ok());
        assert!(p.check(rf("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate")).is_err());
        assert!(p.check(rf("POST", "/redfish/v1/updateservice/actions/x")).is_err(), "case-insensitive");
        assert!(p.check(rf("POST", "/redfish/v1/Managers/1/Oem/Dell/DellUpdateService/Actions/Install")).is_err());
        assert!(p.check(rf("PATCH", "/redfish/v1/Systems/1")).is_ok());
    }

    #[test]
    fn first_match_decides_and_no_match_denies() {
        let p = RawPolicy::parse(
            "allow ipmi:netfn=0x06,cmd=0x01\ndeny ipmi:netfn=0x06 # the rest of App\nallow redfish:GET:/redfish/v1/*",
        )
        .unwrap();
        assert!(p.check(ipmi(0x06, 0x01)).is_ok());
        assert!(p.check(ipmi(0x06, 0x02)).unwrap_err().to_string().contains("deny ipmi:netfn=0x06"));
        assert!(p.check(ipmi(0x00, 0x02)).unwrap_err().to_string().contains("no raw policy rule allows it"));
        assert!(p.check(rf("GET", "/redfish/v1/Systems/1?$expand=.")).is_ok());
        assert!(p.check(rf("DELETE", "/redfish/v1/Systems/1")).is_err());
    }

    #[test]
    fn off_denies_everything() {
        let p = RawPolicy::parse("off").unwrap();
        assert_eq!(p, RawPolicy::off());
        assert!(p.check(ipmi(0x06, 0x01)).unwrap_err().to_string().contains("raw passthrough is off"));
        assert!(p.check(rf("GET", "/redfish/v1")).is_err());
        assert_eq!(p.describe(), "off");
    }

    #[test]
    fn default_can_be_extended() {
        let p = RawPolicy::parse("deny redfish:*:/redfish/v1/AccountService*; default").unwrap();
        assert!(p.check(rf("GET", "/redfish/v1/AccountService/Accounts")).is_err());
        assert!(p.check(ipmi(0x08, 0x01)).is_err());
        assert!(p.check(ipmi(0x06, 0x01)).is_ok());
    }

    #[test]
    fn rules_spelled_with_a_trailing_slash_match_what_they_name() {
        // bmcweb spells its routes with a trailing slash; a rule copied from
        // them must deny (and allow) the path it names, in every spelling.
        let policy = RawPolicy::parse(
            "deny redfish:POST:/redfish/v1/Systems/system/LogServices/Dump/Actions/LogService.ClearLog/; \
             allow redfish:GET:/redfish/v1/Managers/bmc//; allow redfish:*:*",
        )
        .unwrap();
        let post = |path| RawTarget::Redfish { method: "POST", path };
        let get = |path| RawTarget::Redfish { method: "GET", path };
        for spelled in [
            "/redfish/v1/Systems/system/LogServices/Dump/Actions/LogService.ClearLog",
            "/redfish/v1/Systems/system/LogServices/Dump/Actions/LogService.ClearLog/",
            "/redfish/v1//Systems/system/LogServices/Dump/Actions/LogService.ClearLog",
        ] {
            let e = policy.check(post(spelled)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Denied, "{spelled}: {e}");
            assert!(e.to_string().contains("denied"), "{spelled}: {e}");
        }
        assert!(policy.check(get("/redfish/v1/Managers/bmc/")).is_ok());
        let only = RawPolicy::parse("allow redfish:GET:/redfish/v1/Managers/bmc/").unwrap();
        assert!(only.check(get("/redfish/v1/Managers/bmc")).is_ok(), "the allow rule matches its path");
        assert_eq!(canonical_pattern("/"), "/");
        assert_eq!(canonical_pattern("/redfish/v1/*"), "/redfish/v1/*");
    }

    #[test]
    fn parse_errors_are_clear() {
        for bad in [
            "permit ipmi:*",
            "allow",
            "allow snmp:*",
            "allow ipmi:netfn=0x100",
            "allow ipmi:netfn=9-3",
            "allow ipmi:lun=1",
            "allow redfish:GET",
            "allow redfish:FETCH:/x",
            "",
            "off; allow ipmi:*",
        ] {
            assert!(RawPolicy::parse(bad).is_err(), "{bad:?} parsed");
        }
        let missing = RawPolicy::from_arg("@/nonexistent/policy").unwrap_err();
        assert!(missing.to_string().starts_with("cannot read raw policy file /nonexistent/policy: "), "{missing}");
        assert_eq!(missing.kind(), ErrorKind::File);
        let io = std::error::Error::source(&missing).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound), "the I/O error is kept");
        assert_eq!(
            RawPolicy::parse("allow ipmi:netfn=9-3").unwrap_err().to_string(),
            "rule `allow ipmi:netfn=9-3`: range `9-3` is empty"
        );
        assert_eq!(canonical_redfish_path("/redfish/v1/../x").unwrap_err().kind(), ErrorKind::Path);
    }

    #[test]
    fn globs() {
        assert!(glob("/redfish/v1/*", "/redfish/v1/systems/1"));
        assert!(glob("*updateservice*", "/redfish/v1/updateservice"));
        assert!(!glob("/redfish/v1/systems", "/redfish/v1/systems/1"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }
}

#[cfg(test)]
mod destructive_tests {
    use super::*;
    use crate::{Action, EventLogOp};

    #[test]
    fn destructive_actions_are_denied_unless_a_rule_allows_them() {
        let clear = Action::EventLog(EventLogOp::clear());
        assert!(clear.is_destructive() && !Action::EventLog(EventLogOp::read()).is_destructive());
        let e = RawPolicy::default().check((&clear).into()).unwrap_err();
        assert_eq!((e.kind(), e.code()), (ErrorKind::Denied, crate::ErrorCode::RawNotAllowed));
        assert_eq!(
            e.to_string(),
            "destructive action event_log_clear is denied by the raw policy rule `deny action:*`"
        );
        assert!(RawPolicy::off().check((&clear).into()).is_err());
        let allowed = RawPolicy::parse("allow action:event_log_clear; default").unwrap();
        assert!(allowed.check((&clear).into()).is_ok());
        assert!(allowed.check(RawTarget::Ipmi { netfn: 0x08, cmd: 0 }).is_err(), "the defaults still apply");
        assert!(RawPolicy::parse("allow action:Event-Log").is_err());
    }

    /// What the default denies as a destructive typed action it also
    /// denies spelled as a raw request: Clear SEL over IPMI, and the Redfish
    /// actions (and deletes) the typed actions use. Reads stay allowed.
    #[test]
    fn the_raw_spellings_of_destructive_actions_are_denied_by_default() {
        let p = RawPolicy::default();
        let ipmi = RawTarget::Ipmi { netfn: 0x0a, cmd: 0x47 };
        let e = p.check(ipmi).unwrap_err().to_string();
        assert!(e.contains("netfn=0x0a,cmd=0x47"), "Clear SEL: {e}");
        for (method, path) in [
            ("POST", "/redfish/v1/Systems/1/LogServices/Log/Actions/LogService.ClearLog"),
            ("POST", "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Actions/LogService.ClearLog"),
            ("POST", "/redfish/v1/Managers/1/Oem/Vendor/Actions/VendorLog.ClearLog"),
            ("DELETE", "/redfish/v1/Systems/1/LogServices/SEL/Entries/1"),
            ("POST", "/redfish/v1/Systems/1/Bios/Actions/Bios.ResetBios"),
            ("POST", "/redfish/v1/Systems/1/SecureBoot/Actions/SecureBoot.ResetKeys"),
            ("POST", "/redfish/v1/Systems/1/SecureBoot/SecureBootDatabases/PK/Actions/SecureBootDatabase.ResetKeys"),
            ("DELETE", "/redfish/v1/Systems/1/SecureBoot/SecureBootDatabases/PK/Certificates/1"),
            ("POST", "/redfish/v1/Systems/1/Bios/Actions/Bios.Reset%42ios"),
        ] {
            let e = p.check(RawTarget::Redfish { method, path }).unwrap_err().to_string();
            assert!(e.contains("denied by the raw policy rule"), "{method} {path}: {e}");
        }
        for (method, path) in [
            ("GET", "/redfish/v1/Systems/1/LogServices/Log/Entries"),
            ("GET", "/redfish/v1/Systems/1/SecureBoot/SecureBootDatabases/PK/Certificates/1"),
            ("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"),
            ("PATCH", "/redfish/v1/Systems/1/Bios/Settings"),
        ] {
            assert!(p.check(RawTarget::Redfish { method, path }).is_ok(), "{method} {path}");
        }
        assert!(p.check(RawTarget::Ipmi { netfn: 0x0a, cmd: 0x40 }).is_ok(), "reading the SEL info stays allowed");
        // An operator who allows a destructive action allows its raw spelling with a rule of its own.
        let allowed =
            RawPolicy::parse("allow action:event_log_clear; allow ipmi:netfn=0x0a,cmd=0x47; default").unwrap();
        assert!(allowed.check(ipmi).is_ok());
    }
}
