//! `bmcctl man [--out DIR]`: man pages (roff), generated from the clap
//! definitions: bmcctl(1) to stdout, or bmcctl.1 and one page per
//! subcommand at any depth (bmcctl-machine.1, bmcctl-machine-ls.1, ...)
//! written into a directory. Needs no NATS.

use crate::cli::Cli;
use clap::CommandFactory;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A page: titled in capitals by man's convention (`BMCCTL-MACHINE`), in section 1.
fn man(cmd: clap::Command) -> clap_mangen::Man {
    let title = cmd.get_display_name().unwrap_or_else(|| cmd.get_name()).to_uppercase();
    clap_mangen::Man::new(cmd).title(title).manual("bmcfleet")
}

/// The built command line (subcommands know their display names,
/// `bmcctl-machine`, once built); no `help` subcommand pages.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// bmcctl(1).
pub fn page() -> Vec<u8> {
    let mut out = Vec::new();
    man(command()).render(&mut out).expect("writing to memory");
    out
}

/// Write bmcctl.1 and a page per (visible) subcommand into `dir`; the paths written.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            walk(sub, dir, written)?;
        }
        let page = man(cmd);
        let path = dir.join(page.get_filename());
        let mut file = std::fs::File::create(&path)?;
        page.render(&mut file)?;
        file.flush()?;
        written.push(path);
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    walk(command(), dir, &mut written)?;
    Ok(written)
}

pub fn run(out: Option<&Path>) -> anyhow::Result<ExitCode> {
    match out {
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&page())?;
            stdout.flush()?;
        }
        Some(dir) => {
            let written = write_all(dir).map_err(|e| anyhow::anyhow!("writing man pages to {}: {e}", dir.display()))?;
            eprintln!("wrote {} man pages to {}", written.len(), dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_titled_and_lists_every_top_level_command() {
        let text = String::from_utf8(page()).unwrap();
        assert!(text.contains(".TH BMCCTL 1"), "{}", &text[..200.min(text.len())]);
        for sub in command().get_subcommands().filter(|s| !s.is_hide_set()) {
            // roff spells a hyphen `\-`.
            let name = sub.get_name().replace('-', "\\-");
            assert!(text.contains(&format!("bmcctl\\-{name}(1)")), "no {name}");
        }
    }

    #[test]
    fn a_directory_gets_a_page_per_command_at_any_depth() {
        let dir = std::env::temp_dir().join(format!("bmcctl-man-{}", ulid::Ulid::new()));
        let written = write_all(&dir).unwrap();
        let names: Vec<String> =
            written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for want in ["bmcctl.1", "bmcctl-machine.1", "bmcctl-machine-ls.1", "bmcctl-power.1", "bmcctl-event-log-read.1"]
        {
            assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("-help")), "{names:?}");
        let machine = std::fs::read_to_string(dir.join("bmcctl-machine.1")).unwrap();
        assert!(machine.contains(".TH BMCCTL-MACHINE 1"), "{machine}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
