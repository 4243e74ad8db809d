//! The live progress line of a fleet run: one line, redrawn in place, on a
//! terminal only (stdout is a TTY, `TERM` is not `dumb`, and not `--json`),
//! so a pipe or a file gets the summary and nothing else. Colour unless
//! `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).
//!
//! Written by hand: a counter line is all a fleet run needs, and the usual
//! crate (`indicatif`) is not among our dependencies.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Width of the bar, in cells.
const BAR: usize = 24;

/// Erase the current line and return to its start.
const CLEAR: &str = "\r\x1b[2K";

/// Whether stdout is a terminal a line can be redrawn on.
pub fn terminal() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// Whether to colour output on a `terminal` (`NO_COLOR` unset or empty).
pub fn color(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `text` in the ANSI colour `code` when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// The counters of a run and how to draw them.
#[derive(Debug)]
pub struct Line {
    /// Drawn at all (a terminal, and not `--json`).
    on: bool,
    color: bool,
    /// What runs (the action kinds).
    what: String,
    total: usize,
    started: usize,
    done: usize,
    failed: usize,
    since: Instant,
}

impl Line {
    pub fn new(what: &str, total: usize, on: bool, color: bool) -> Line {
        Line { on, color, what: what.to_owned(), total, started: 0, done: 0, failed: 0, since: Instant::now() }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    pub fn started(&mut self) {
        self.started += 1;
        self.draw();
    }

    pub fn finished(&mut self, ok: bool) {
        self.done += 1;
        if !ok {
            self.failed += 1;
        }
        self.draw();
    }

    /// Redraw the line (when drawn at all).
    pub fn draw(&self) {
        if self.on {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{CLEAR}{}", self.render(self.since.elapsed()));
            let _ = out.flush();
        }
    }

    /// Erase the line (before the summary).
    pub fn clear(&self) {
        if self.on {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{CLEAR}");
            let _ = out.flush();
        }
    }

    /// Print a line of stdout above the progress line.
    pub fn above(&self, text: &str) {
        self.clear();
        println!("{text}");
        self.draw();
    }

    /// Print a message on stderr, keeping the progress line intact.
    pub fn above_stderr(&self, text: &str) {
        self.clear();
        eprintln!("{text}");
        self.draw();
    }

    /// The line itself: `power_on [#####.....] 12/40 done · 3 running · 1 failed · 0:12`.
    pub fn render(&self, elapsed: Duration) -> String {
        let filled = (BAR * self.done).checked_div(self.total).unwrap_or(BAR);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(BAR - filled));
        let bar = paint(&bar, if self.failed > 0 { "33" } else { "32" }, self.color);
        let running = self.started - self.done;
        let failed = format!("{} failed", self.failed);
        let failed = if self.failed > 0 { paint(&failed, "31", self.color) } else { failed };
        let secs = elapsed.as_secs();
        format!("{} [{bar}] {}/{} done · {running} running · {failed} · {}:{:02}", self.what, self.done, self.total, secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_and_colours_only_when_asked() {
        let mut l = Line::new("power_on", 4, false, false);
        l.started();
        l.started();
        l.finished(true);
        l.started();
        l.finished(false);
        assert_eq!(l.render(Duration::from_secs(75)), format!("power_on [{}{}] 2/4 done · 1 running · 1 failed · 1:15", "#".repeat(12), ".".repeat(12)));
        let plain = l.render(Duration::ZERO);
        assert!(!plain.contains('\x1b'), "{plain:?}");
        let coloured = Line { color: true, ..l };
        assert!(coloured.render(Duration::ZERO).contains("\x1b[31m1 failed\x1b[0m"));
        assert!(!color(false), "never colour what is not a terminal");
    }
}
