//! The machine file of `bmcctl machine apply`: read, parsed and checked
//! whole before bmcctl connects to NATS, so a bad file costs no connection
//! and exits 2 ([`crate::Usage`]). Every error reads
//! `FILE:LINE:COLUMN: machines[I] (NAME): what`, where the position is the
//! offending text, not merely the entry that holds it: serde reports a
//! missing field at the start of its mapping, so when the field's key is
//! in the entry's text at another indentation (an indentation slip that
//! moved it into another mapping) the error points at that key instead.
//!
//! Then, connected: [`check_credentials`] refuses machines naming a
//! credential that is not in the credentials bucket (`bmcctl cred put`),
//! or only warns with `--allow-missing-credentials` (names the workers
//! hold in their `--credentials-file` only, which bmcctl cannot see).

use crate::Usage;
use bmcfleet_schema::Machine;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MachineFile {
    machines: Vec<Machine>,
}

/// Where an entry of the `machines` list starts: its 1-based line and
/// the column of its first key (that of serde's mapping start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    line: usize,
    column: usize,
}

/// A position in the file (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// The indentation of a line (spaces), or `None` for a blank or comment line.
fn indent(line: &str) -> Option<usize> {
    let t = line.trim_start_matches(' ');
    (!t.is_empty() && !t.starts_with('#')).then(|| line.len() - t.len())
}

/// The entries of a block-style `machines:` list, in order. A flow-style
/// list (`machines: [...]`, JSON) yields none: errors then carry serde's
/// position only.
fn entries(text: &str) -> Vec<Entry> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines.iter().position(|l| {
        indent(l) == Some(0) && l.strip_prefix("machines").is_some_and(|r| r.trim_start().starts_with(':'))
    }) else {
        return Vec::new();
    };
    let mut seq_col = None;
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        let Some(ind) = indent(l) else { continue };
        let rest = &l[ind..];
        let item = rest == "-" || rest.starts_with("- ");
        match seq_col {
            None if item => seq_col = Some(ind),
            None => break,
            Some(c) if ind < c || (ind == c && !item) => break,
            Some(_) => {}
        }
        if item && Some(ind) == seq_col {
            let after = rest[1..].trim_start_matches(' ');
            let column = if after.is_empty() || after.starts_with('#') {
                // `-` alone: the mapping starts on the next content line.
                lines[i + 1..].iter().find_map(|n| indent(n)).map_or(ind + 3, |c| c + 1)
            } else {
                l.len() - after.len() + 1
            };
            out.push(Entry { line: i + 1, column });
        }
    }
    out
}

/// The entry (index) holding 1-based `line`, if the list is block style.
fn entry_at(entries: &[Entry], line: usize) -> Option<usize> {
    entries.iter().rposition(|e| e.line <= line)
}

/// Where the key `field` sits inside entry `i`'s text at an indentation
/// other than its fields' (so serde did not see it as one of them).
fn misplaced_key(text: &str, entries: &[Entry], i: usize, field: &str) -> Option<Position> {
    let e = entries[i];
    let end = entries.get(i + 1).map_or(usize::MAX, |n| n.line);
    let lines: Vec<&str> = text.lines().collect();
    // The entry's first line holds `- ` before the first key; its other lines are plain.
    for (n, l) in lines.iter().enumerate().take(end.saturating_sub(1).min(lines.len())).skip(e.line - 1) {
        let Some(ind) = indent(l) else { continue };
        let mut body = &l[ind..];
        let mut col = ind + 1;
        if n + 1 == e.line {
            body = body.trim_start_matches(['-', ' ']);
            col = l.len() - body.len() + 1;
        }
        if body.strip_prefix(field).is_some_and(|r| r.trim_start().starts_with(':')) && col != e.column {
            return Some(Position { line: n + 1, column: col });
        }
    }
    None
}

/// Where a flow-style or JSON entry is: the first `name: NAME` (quoted or
/// not) in the text, at its key. Entries of such files have no lines of
/// their own for [`entries`] to find.
fn name_position(text: &str, name: &str) -> Option<Position> {
    for (n, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(k) = line[from..].find("name") {
            let key = from + k;
            from = key + 4;
            let before = line[..key].trim_end_matches(['"', '\'']);
            if !(before.is_empty() || before.ends_with(['{', ',', ' ', '-'])) {
                continue;
            }
            let rest = line[from..].trim_start_matches(['"', '\'']).trim_start();
            let Some(value) = rest.strip_prefix(':') else { continue };
            let value = value.trim_start().trim_start_matches(['"', '\'']);
            if value.strip_prefix(name).is_some_and(|r| r.is_empty() || r.starts_with(['"', '\'', ',', '}', ' '])) {
                let column = line[..key].trim_end_matches(['"', '\'']).len() + 1;
                return Some(Position { line: n + 1, column });
            }
        }
    }
    None
}

/// `file:line:column: machines[i] (name): message`, parts as known.
fn located(file: &str, at: Option<Position>, entry: Option<(usize, Option<&str>)>, message: &str) -> anyhow::Error {
    let mut out = file.to_owned();
    if let Some(p) = at {
        out.push_str(&format!(":{}:{}", p.line, p.column));
    }
    out.push_str(": ");
    if let Some((i, name)) = entry {
        out.push_str(&format!("machines[{i}]"));
        if let Some(n) = name {
            out.push_str(&format!(" ({n})"));
        }
        out.push_str(": ");
    }
    out.push_str(message);
    anyhow::Error::new(Usage(out))
}

/// serde's message without its own ` at line L column C` suffix nor the
/// `machines[I]: ` path of the entry (said once, by [`located`]).
fn bare_message(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    let suffix = e.location().map(|l| format!(" at line {} column {}", l.line(), l.column()));
    let text = suffix.and_then(|s| text.strip_suffix(&s)).unwrap_or(&text);
    let path_end = text
        .strip_prefix("machines[")
        .and_then(|r| r.split_once(']'))
        .filter(|(i, _)| i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|(_, rest)| rest.strip_prefix(": ").or_else(|| rest.strip_prefix('.')));
    path_end.unwrap_or(text).to_owned()
}

/// Parse and check a machine file (no NATS needed): YAML or JSON, unknown
/// fields, each record's values, no name or BMC endpoint twice. Errors are
/// [`Usage`] (exit 2) and carry the file, line and column.
pub fn parse(text: &str, file: &str) -> anyhow::Result<Vec<Machine>> {
    let entries = entries(text);
    let parsed: MachineFile = match serde_norway::from_str(text) {
        Ok(p) => p,
        Err(e) => {
            let message = bare_message(&e);
            let at = e.location().map(|l| Position { line: l.line(), column: l.column() });
            let entry = at.and_then(|p| entry_at(&entries, p.line));
            // serde puts a missing field at its mapping's start: find the key if it is there, misplaced.
            let missing = message.strip_prefix("missing field `").and_then(|r| r.split('`').next());
            if let (Some(field), Some(i)) = (missing, entry) {
                if let Some(p) = misplaced_key(text, &entries, i, field) {
                    let m = format!(
                        "`{field}` is indented differently from the entry's other fields (column {}), so it is not \
                         one of them: {message}",
                        entries[i].column
                    );
                    return Err(located(file, Some(p), Some((i, None)), &m));
                }
            }
            return Err(located(file, at, entry.map(|i| (i, None)), &message));
        }
    };
    let at = |i: usize| {
        entries
            .get(i)
            .map(|e| Position { line: e.line, column: e.column })
            .or_else(|| name_position(text, &parsed.machines[i].name))
    };
    let mut names = BTreeMap::new();
    for (i, m) in parsed.machines.iter().enumerate() {
        let here = Some((i, Some(m.name.as_str())));
        if let Err(e) = m.validate() {
            return Err(located(file, at(i), here, &e.to_string()));
        }
        if let Some(j) = names.insert(m.name.clone(), i) {
            let msg = format!("the name `{}` is also used by machines[{j}]", m.name);
            return Err(located(file, at(i), here, &msg));
        }
        // One BMC endpoint is one machine (host, port, system: Machine::conflict_with).
        if let Some(why) = parsed.machines[..i].iter().find_map(|o| m.conflict_with(o)) {
            return Err(located(file, at(i), here, &why.to_string()));
        }
    }
    Ok(parsed.machines)
}

/// The credential names of `machines` that are not in `stored` (the
/// credentials bucket's keys), with the machines naming each.
pub fn missing_credentials<'a>(
    machines: impl IntoIterator<Item = &'a Machine>,
    stored: &BTreeSet<String>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in machines {
        if !stored.contains(&m.credentials) {
            out.entry(m.credentials.clone()).or_default().push(m.name.clone());
        }
    }
    out
}

/// The names in the credentials bucket; none when it does not exist yet
/// (no `cred put` ever ran).
pub async fn stored_credentials(js: &async_nats::jetstream::Context, bucket: &str) -> anyhow::Result<BTreeSet<String>> {
    use anyhow::Context;
    use futures::TryStreamExt;
    let kv = match js.get_key_value(bucket).await {
        Ok(kv) => kv,
        Err(e) if super::machine::bucket_missing(&e) => return Ok(BTreeSet::new()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("the credentials bucket {bucket}"))),
    };
    let keys = kv.keys().await.with_context(|| format!("listing the credentials bucket {bucket}"))?;
    keys.try_collect().await.with_context(|| format!("listing the credentials bucket {bucket}"))
}

/// Refuse (a [`Usage`] error: exit 2, nothing written) or, with `allow`,
/// warn about machines whose credential is not in the credentials bucket.
pub fn check_credentials(missing: &BTreeMap<String, Vec<String>>, bucket: &str, allow: bool) -> anyhow::Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    let list: Vec<String> =
        missing.iter().map(|(c, ms)| format!("`{c}` (named by {})", ms.join(", "))).collect::<Vec<_>>();
    let what = format!("credential not in bucket {bucket}: {}", list.join("; "));
    if allow {
        eprintln!("warning: {what}; the workers must hold it in their --credentials-file, or its batches fail with unknown_credential");
        Ok(())
    } else {
        Err(anyhow::Error::new(Usage(format!(
            "unknown_credential: {what}. Nothing was written. Store it first (`bmcctl cred put NAME ...`), or, if \
             the workers hold it in their --credentials-file, pass --allow-missing-credentials"
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        let e = parse(text, "m.yaml").unwrap_err();
        assert!(e.downcast_ref::<Usage>().is_some(), "{e}");
        e.to_string()
    }

    #[test]
    fn machine_files_are_checked_whole_with_the_entry_named() {
        let ok = "machines:\n  - {name: a, address: 10.0.0.1, credentials: c}\n  - {name: b, address: 10.0.0.2, protocol: ipmi, credentials: c, labels: {rack: '12'}}\n";
        assert_eq!(parse(ok, "m.yaml").unwrap().len(), 2);
        for (text, says) in [
            ("machines:\n  - {name: a, address: 10.0.0.1, credentials: c, pasword: x}\n", "m.yaml:2:"),
            ("machines:\n  - {name: a, address: 10.0.0.1, credentials: c, pasword: x}\n", "unknown field"),
            ("machines:\n  - {name: A B, address: 10.0.0.1, credentials: c}\n", "m.yaml:2:5: machines[0] (A B): "),
            ("machines:\n  - {name: a, address: 10.0.0.300, credentials: c}\n", "invalid BMC address"),
            ("machines:\n  - {name: a, address: 10.0.0.1, credentials: c}\n  - {name: a, address: 10.0.0.2, credentials: c}\n", "m.yaml:3:5: machines[1] (a): the name `a` is also used by machines[0]"),
            ("machines:\n  - {name: a, address: 10.0.0.1, credentials: c}\n  - {name: b, address: '10.0.0.1:623', credentials: c}\n", "same BMC endpoint"),
        ] {
            let e = err(text);
            assert!(e.contains(says) && e.starts_with("m.yaml"), "{text}: {e}");
        }
    }

    #[test]
    fn a_misindented_field_is_reported_where_it_is_not_where_its_entry_starts() {
        // `credentials` slipped two columns right: YAML makes it part of `labels`.
        let text =
            "machines:\n  - name: a\n    labels:\n      rack: '12'\n      credentials: c\n    address: 10.0.0.1\n";
        let e = err(text);
        assert!(e.starts_with("m.yaml:5:7: machines[0]: `credentials` is indented differently"), "{e}");
        assert!(e.contains("missing field `credentials`"), "{e}");
        // Truly missing: the entry's start.
        let e = err("machines:\n  - name: a\n    address: 10.0.0.1\n  - name: b\n    address: 10.0.0.2\n");
        assert!(e.starts_with("m.yaml:2:5: machines[0]: missing field `credentials`"), "{e}");
    }

    #[test]
    fn the_issue_s_indentation_slip_is_reported_on_its_own_line() {
        // serde_norway alone says "missing field `credentials` at line 2 column 5".
        let text = "machines:\n  - name: a\n    address: 10.0.0.1\n   credentials: c\n";
        let e = err(text);
        assert!(e.starts_with("m.yaml:4:4: machines[0]: `credentials` is indented differently"), "{e}");
        assert!(!e.contains(" at line "), "the position is said once: {e}");
    }

    #[test]
    fn yaml_syntax_errors_keep_their_line_and_column() {
        let e = err("machines:\n  - name: a\n    address: 10.0.0.1\n    credentials: 'c\n");
        assert!(e.starts_with("m.yaml:5:1: ") && e.ends_with("quoted scalar at line 4 column 18"), "{e}");
        let e = err("machines:\n  - name: a\n    address: [10.0.0.1]\n");
        assert!(e.starts_with("m.yaml:3:14: machines[0]: address: invalid type"), "{e}");
        assert!(!e.contains(" at line "), "the position is said once: {e}");
        let e = err("machines:\n  - name: a\n    address: 10.0.0.1\n    credentials: c\n    tls: {insecure: maybe}\n");
        assert!(e.starts_with("m.yaml:5:"), "{e}");
    }

    #[test]
    fn json_and_flow_entries_are_located_by_their_name() {
        let json = "{\"machines\": [\n  {\"name\": \"a\", \"address\": \"10.0.0.1\", \"credentials\": \"c\"},\n  {\"name\": \"B\", \"address\": \"10.0.0.3\", \"credentials\": \"c\"}\n]}\n";
        let e = err(json);
        assert!(e.starts_with("m.yaml:3:4: machines[1] (B): "), "{e}");
        let flow =
            "machines: [{name: aa, address: 10.0.0.1, credentials: c}, {name: a, address: 10.0.0.1, credentials: c}]\n";
        let e = err(flow);
        assert!(e.starts_with("m.yaml:1:60: machines[1] (a): "), "{e}");
    }

    #[test]
    fn entries_are_found_in_block_lists_only() {
        let text = "# fleet\nmachines:\n\n  - name: a\n    address: x\n  -\n    name: b\nother: 1\n";
        assert_eq!(entries(text), vec![Entry { line: 4, column: 5 }, Entry { line: 6, column: 5 }]);
        assert_eq!(entries("machines: [{name: a}]\n"), vec![]);
        assert_eq!(
            entries("machines:\n- name: a\n- name: b\n"),
            vec![Entry { line: 2, column: 3 }, Entry { line: 3, column: 3 }]
        );
    }

    #[test]
    fn credentials_not_stored_are_refused_or_with_allow_only_warned() {
        let ms = parse("machines:\n  - {name: a, address: 10.0.0.1, credentials: c}\n  - {name: b, address: 10.0.0.2, credentials: d}\n", "m.yaml").unwrap();
        let stored: BTreeSet<String> = ["c".to_owned()].into();
        let missing = missing_credentials(&ms, &stored);
        assert_eq!(missing, BTreeMap::from([("d".to_owned(), vec!["b".to_owned()])]));
        let e = check_credentials(&missing, "B_CREDENTIALS", false).unwrap_err();
        assert!(e.downcast_ref::<Usage>().is_some());
        assert!(
            e.to_string().starts_with("unknown_credential: credential not in bucket B_CREDENTIALS: `d` (named by b)"),
            "{e}"
        );
        check_credentials(&missing, "B_CREDENTIALS", true).unwrap();
        check_credentials(&BTreeMap::new(), "B_CREDENTIALS", false).unwrap();
    }
}
