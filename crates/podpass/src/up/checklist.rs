//! What `podpass up` prints: a readiness checklist, one line per part as it comes up (on a
//! terminal, a "waiting for …" line first, replaced by the part's line once ready), then
//! the story's lines.

use std::io::Write;
use std::time::Instant;

/// The printer. Write errors are ignored: a reader that went away (`podpass up | head`)
/// must not stop the supervisor before it has stopped its children.
pub struct Checklist {
    terminal: bool,
    /// A "waiting" line is on screen without its newline.
    pending: bool,
}

impl Checklist {
    /// A printer to stdout; `terminal` lets it rewrite the waiting line.
    pub fn new(terminal: bool) -> Checklist {
        Checklist { terminal, pending: false }
    }

    fn clear(&mut self) {
        if self.pending {
            out(format_args!("\r\x1b[K"));
            self.pending = false;
        }
    }

    /// A line of output.
    pub fn say(&mut self, line: &str) {
        self.clear();
        out(format_args!("{line}\n"));
    }

    /// `part` is starting and waits for `what`.
    pub fn waiting(&mut self, part: &str, what: &str) {
        self.clear();
        if self.terminal {
            out(format_args!("  … {part:<14} waiting for {what}"));
            self.pending = true;
        } else {
            out(format_args!("  … {part:<14} waiting for {what}\n"));
        }
    }

    /// `part` is ready.
    pub fn done(&mut self, part: &str, detail: &str, began: Instant) {
        self.clear();
        out(format_args!("  ✓ {part:<14} {detail}   ({:.1} s)\n", began.elapsed().as_secs_f64()));
    }

    /// The part being waited for failed: end its line.
    pub fn fail(&mut self) {
        if self.pending {
            out(format_args!("\n"));
            self.pending = false;
        }
    }
}

fn out(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(args);
    let _ = stdout.flush();
}
