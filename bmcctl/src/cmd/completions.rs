//! `bmcctl completions SHELL`: the shell completion script, generated from
//! the clap definitions (so every command, flag and value enum of
//! [`crate::cli`] completes without a hand-kept list). Needs no NATS.

use crate::cli::Cli;
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

/// The completion script of bmcctl for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "bmcctl", &mut out);
    out
}

pub fn run(shell: Shell) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script(shell))?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_commands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::Elvish, Shell::PowerShell] {
            let text = String::from_utf8(script(shell)).unwrap();
            for word in ["machine", "completions", "event-log", "--output"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
        }
    }
}
