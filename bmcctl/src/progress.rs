//! The progress bar of a fleet run, and when bmcctl colours anything.
//!
//! The bar ([`indicatif`]) is drawn on stderr, and only when stderr is a
//! terminal (`TERM` not `dumb`) and the output is not `json`: a pipe, a
//! file or a test gets the summary on stdout and nothing else. It counts
//! machines done, running and failed, and the run's time; lines printed
//! while it runs (failures as they happen, `stopping: ...`) go above it,
//! on stderr too.
//!
//! Colour (the bar, the summary's results) only on a terminal, and never
//! when `NO_COLOR` is set to anything but the empty string
//! (<https://no-color.org>). The decision is ours, made once per stream
//! ([`color`]); the bar is painted by [`paint`] as the summary is, so
//! indicatif's own colour detection plays no part.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::ffi::OsStr;
use std::io::IsTerminal;

/// Width of the bar, in cells.
const BAR: usize = 24;

/// Most redraws per second (indicatif drops the others).
const REDRAWS_PER_SECOND: u8 = 10;

/// Whether a stream that `is_terminal` can be drawn on, given `TERM`.
fn drawable(is_terminal: bool, term: Option<&OsStr>) -> bool {
    is_terminal && term.is_none_or(|t| t != "dumb")
}

/// Whether stdout is a terminal (the summary may be coloured).
pub fn terminal() -> bool {
    drawable(std::io::stdout().is_terminal(), std::env::var_os("TERM").as_deref())
}

/// Whether stderr is a terminal a bar can be redrawn on.
pub fn stderr_terminal() -> bool {
    drawable(std::io::stderr().is_terminal(), std::env::var_os("TERM").as_deref())
}

/// Whether to colour output on a `terminal`: `NO_COLOR` unset or empty.
pub fn color(terminal: bool) -> bool {
    color_with(terminal, std::env::var_os("NO_COLOR").as_deref())
}

/// [`color`], given the value of `NO_COLOR`.
pub fn color_with(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

/// `text` in the ANSI colour `code` when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// `#` for the machines done, `.` for the rest, `BAR` cells in all.
fn cells(done: u64, total: Option<u64>) -> String {
    let filled = match total {
        Some(total) if total > 0 => (BAR as u64 * done.min(total) / total) as usize,
        _ => BAR,
    };
    format!("{}{}", "#".repeat(filled), ".".repeat(BAR - filled))
}

/// The bar's style: `power_on [#####...] 12/40 done · 3 running · 1 failed · 00:00:12`,
/// its cells green, or yellow once a machine `failing`, when `color`.
fn style(color: bool, failing: bool) -> ProgressStyle {
    let code = if failing { "33" } else { "32" };
    ProgressStyle::with_template("{prefix} [{cells}] {pos}/{len} done · {msg} · {elapsed_precise}")
        .expect("a valid template")
        .with_key("cells", move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&paint(&cells(s.pos(), s.len()), code, color));
        })
}

/// A fleet run's progress bar (hidden unless drawn at all).
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    /// Drawn at all (stderr is a terminal, and not `json`).
    on: bool,
    color: bool,
    started: u64,
    failed: u64,
}

impl Bar {
    /// A bar for `total` machines running `what`, drawn on stderr when `on`.
    pub fn new(what: &str, total: usize, on: bool, color: bool) -> Bar {
        let target =
            if on { ProgressDrawTarget::stderr_with_hz(REDRAWS_PER_SECOND) } else { ProgressDrawTarget::hidden() };
        Bar::with_target(what, total, target, on, color)
    }

    fn with_target(what: &str, total: usize, target: ProgressDrawTarget, on: bool, color: bool) -> Bar {
        let bar = ProgressBar::with_draw_target(Some(total as u64), target)
            .with_style(style(color, false))
            .with_prefix(what.to_owned());
        let me = Bar { bar, on, color, started: 0, failed: 0 };
        me.bar.set_message(me.message());
        me
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// What the bar says after its counter: `3 running · 1 failed`.
    fn message(&self) -> String {
        let running = self.started.saturating_sub(self.bar.position());
        let failed = format!("{} failed", self.failed);
        let failed = if self.failed > 0 { paint(&failed, "31", self.color) } else { failed };
        format!("{running} running · {failed}")
    }

    pub fn started(&mut self) {
        self.started += 1;
        self.bar.set_message(self.message());
    }

    pub fn finished(&mut self, ok: bool) {
        if !ok {
            self.failed += 1;
            if self.failed == 1 {
                self.bar.set_style(style(self.color, true));
            }
        }
        self.bar.inc(1);
        self.bar.set_message(self.message());
    }

    /// Redraw (the clock moves).
    pub fn tick(&self) {
        self.bar.tick();
    }

    /// The run is over: draw the final count once more and leave it (before
    /// the summary), as it is: a run that stopped early does not read as complete.
    pub fn finish(&self) {
        self.bar.abandon();
    }

    /// Print a line on stderr above the bar (stdout keeps the summary alone).
    pub fn above(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    /// Whether to colour what goes above the bar.
    pub fn color(&self) -> bool {
        self.color
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A terminal that keeps what is written to it.
    #[derive(Clone, Debug, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<String>>);

    impl indicatif::TermLike for Capture {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.write_str("\r\x1b[2K")
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A bar drawn on a [`Capture`], four machines: two succeed, one fails, one runs.
    fn run(color: bool) -> String {
        let term = Capture::default();
        let target = ProgressDrawTarget::term_like_with_hz(Box::new(term.clone()), 100);
        let mut b = Bar::with_target("power_on", 4, target, true, color);
        b.started();
        b.started();
        b.finished(true);
        b.started();
        b.started();
        b.finished(false);
        b.finished(true);
        b.finish();
        let text = term.0.lock().unwrap().clone();
        text
    }

    #[test]
    fn the_bar_counts_done_running_and_failed() {
        let text = run(false);
        let last = text.rsplit("\r\x1b[2K").next().unwrap();
        let want = format!("power_on [{}{}] 3/4 done · 1 running · 1 failed · 00:00:0", "#".repeat(18), ".".repeat(6));
        assert!(last.starts_with(&want), "the final count: {last:?} in {text:?}");
        assert!(!text.contains("\x1b[3"), "no colour asked for: {text:?}");
    }

    #[test]
    fn colour_is_painted_by_us_and_only_when_asked() {
        let text = run(true);
        let last = text.rsplit("\r\x1b[2K").next().unwrap();
        assert!(text.contains(&format!("\x1b[32m{}", "#".repeat(6))), "green while all succeed: {text:?}");
        assert!(
            last.contains(&format!("\x1b[33m{}", "#".repeat(18))) && last.contains("\x1b[31m1 failed\x1b[0m"),
            "yellow after a failure: {last:?}"
        );
    }

    #[test]
    fn a_bar_not_drawn_is_hidden() {
        let b = Bar::new("power_on", 1, false, true);
        assert!(!b.is_on() && b.bar.is_hidden());
    }

    #[test]
    fn no_color_set_to_anything_but_empty_turns_colour_off() {
        assert!(color_with(true, None));
        assert!(color_with(true, Some(OsStr::new(""))), "an empty NO_COLOR is unset");
        assert!(!color_with(true, Some(OsStr::new("1"))));
        assert!(!color_with(true, Some(OsStr::new("false"))), "any value, even `false`");
        assert!(!color_with(false, None), "never colour what is not a terminal");
        assert!(
            !drawable(true, Some(OsStr::new("dumb")))
                && drawable(true, Some(OsStr::new("xterm")))
                && !drawable(false, None)
        );
    }

    #[test]
    fn cells_fill_with_the_machines_done() {
        assert_eq!(cells(0, Some(4)), ".".repeat(24));
        assert_eq!(cells(1, Some(3)), format!("{}{}", "#".repeat(8), ".".repeat(16)));
        assert_eq!(cells(5, Some(4)), "#".repeat(24));
        assert_eq!(cells(0, Some(0)), "#".repeat(24), "nothing to do is done");
    }
}
