//! `bmcctl completions SHELL`: the shell completion script, generated from
//! the clap definitions (so every command, flag and value enum of
//! [`crate::cli`] completes without a hand-kept list). Needs no NATS.
//!
//! bash, zsh and fish also complete what only the registry knows: machine names after
//! `--machine` and for `machine get|set|rm|ls|watch`, label pairs after
//! `--selector`, by running the hidden `bmcctl __complete machines|labels`
//! ([`super::complete`]: at most about two seconds, nothing when NATS does
//! not answer) with the `--nats-url` of the line being completed, if any.

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
    if shell == Shell::Bash {
        let text = String::from_utf8_lossy(&out).replace("complete -F _bmcctl ", "complete -F _bmcctl_dynamic ");
        out = text.into_bytes();
        out.extend_from_slice(BASH_DYNAMIC.as_bytes());
    }
    if shell == Shell::Fish {
        out.extend_from_slice(FISH_DYNAMIC.as_bytes());
    }
    if shell == Shell::Zsh {
        out = zsh_dynamic(&String::from_utf8_lossy(&out)).into_bytes();
    }
    out
}

/// zsh: clap's `_bmcctl` becomes `_bmcctl_clap`, and a `_bmcctl` that
/// offers the registry's words first (see the module) takes its place,
/// defined before the script's last lines call it (loaded from `$fpath`)
/// or `compdef` it (sourced). Unchanged if clap's script changes shape
/// (the test of the generated script then fails).
fn zsh_dynamic(clap: &str) -> String {
    const DEFINITION: &str = "\n_bmcctl() {\n";
    const DISPATCH: &str = "\nif [ \"$funcstack[1]\" = \"_bmcctl\" ]; then";
    match (clap.find(DEFINITION), clap.rfind(DISPATCH)) {
        (Some(def), Some(dispatch)) if def < dispatch => format!(
            "{}\n_bmcctl_clap() {{\n{}{ZSH_DYNAMIC}{}",
            &clap[..def],
            &clap[def + DEFINITION.len()..dispatch],
            &clap[dispatch..]
        ),
        _ => clap.to_owned(),
    }
}

/// zsh: registry words first, clap's completion otherwise.
const ZSH_DYNAMIC: &str = r#"
_bmcctl() {
    local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}" what="" sub="" i
    local -a url found
    for (( i = 2; i < CURRENT; i++ )); do
        case "${words[i]}" in
            --nats-url) url=(--nats-url "${words[i+1]}") ;;
            machine) [[ -z "$sub" && $((i + 1)) -lt $CURRENT ]] && sub="${words[i+1]}" ;;
        esac
    done
    case "$prev" in
        --machine) what=machines ;;
        --selector) what=labels ;;
        *) if [[ "$cur" != -* ]]; then
               case "$sub" in get|set|rm|ls|watch) what=machines ;; esac
           fi ;;
    esac
    if [[ -n "$what" ]]; then
        found=(${(f)"$(${words[1]} "${url[@]}" __complete "$what" 2>/dev/null)"})
        if (( ${#found} )); then
            if [[ "$what" == labels && "$cur" == *,* ]]; then
                compadd -p "${cur%,*}," -- "${found[@]}"
            else
                compadd -- "${found[@]}"
            fi
            return 0
        fi
    fi
    _bmcctl_clap "$@"
}
"#;

/// fish: the same registry words, added to clap's candidates.
const FISH_DYNAMIC: &str = r#"
complete -c bmcctl -l machine -f -r -a '(bmcctl __complete machines 2>/dev/null)'
complete -c bmcctl -l selector -f -r -a '(bmcctl __complete labels 2>/dev/null)'
complete -c bmcctl -n '__fish_seen_subcommand_from machine; and __fish_seen_subcommand_from get set rm ls watch' -f -a '(bmcctl __complete machines 2>/dev/null)'
"#;

/// bash: registry words first (see the module), clap's completion otherwise.
const BASH_DYNAMIC: &str = r#"
_bmcctl_dynamic() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" what="" i sub="" url=()
    for (( i = 1; i < COMP_CWORD; i++ )); do
        case "${COMP_WORDS[i]}" in
            --nats-url) url=(--nats-url "${COMP_WORDS[i+1]}") ;;
            machine) [[ -z "$sub" && $((i + 1)) -lt $COMP_CWORD ]] && sub="${COMP_WORDS[i+1]}" ;;
        esac
    done
    case "$prev" in
        --machine) what=machines ;;
        --selector) what=labels ;;
        *) if [[ "$cur" != -* ]]; then
               case "$sub" in get|set|rm|ls|watch) what=machines ;; esac
           fi ;;
    esac
    if [[ -n "$what" ]]; then
        local words prefix=""
        words=$("${COMP_WORDS[0]}" "${url[@]}" __complete "$what" 2>/dev/null)
        if [[ "$what" == labels && "$cur" == *,* ]]; then prefix="${cur%,*},"; fi
        if [[ -n "$words" ]]; then
            COMPREPLY=($(compgen -P "$prefix" -W "$words" -- "${cur#"$prefix"}"))
            return 0
        fi
    fi
    _bmcctl "$@"
}
"#;

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

    /// bash, zsh and fish ask `bmcctl __complete` for the registry's words;
    /// zsh's entry point is the dynamic `_bmcctl`, defined once, before the
    /// lines that call or `compdef` it, with clap's completion behind it.
    #[test]
    fn bash_zsh_and_fish_complete_registry_words() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(script(shell)).unwrap();
            assert!(text.contains("__complete machines") || text.contains("__complete \"$what\""), "{shell}");
        }
        let zsh = String::from_utf8(script(Shell::Zsh)).unwrap();
        assert!(zsh.starts_with("#compdef bmcctl\n"), "{}", &zsh[..40]);
        assert_eq!(zsh.matches("\n_bmcctl() {\n").count(), 1, "one _bmcctl");
        assert_eq!(zsh.matches("\n_bmcctl_clap() {\n").count(), 1, "clap's, renamed");
        let dynamic = zsh.find("\n_bmcctl() {\n").unwrap();
        let dispatch = zsh.find("if [ \"$funcstack[1]\" = \"_bmcctl\" ]").unwrap();
        assert!(dynamic < dispatch && zsh[dispatch..].contains("compdef _bmcctl bmcctl"), "{}", &zsh[dispatch..]);
        assert!(zsh[dynamic..dispatch].contains("_bmcctl_clap \"$@\""), "clap's completion behind the registry's");
    }
}
