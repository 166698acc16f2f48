//! Pull progress for the CLI's image pulls (`node images load`, `node ensure-image`), on
//! stderr so stdout stays the command's answer: on a terminal, a block redrawn in place with
//! a line per blob and the totals; otherwise a plain line per blob as it lands and one with
//! the totals. The embedded store reports per blob; a CRI runtime only its result.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use podpass_node::images::{BlobKind, PullObserver, PullProgress};

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// `tty` when stderr is a terminal, else `plain`.
    Auto,
    /// A block redrawn in place.
    Tty,
    /// A line per blob and one with the totals.
    Plain,
    /// Nothing.
    None,
}

impl ProgressMode {
    /// The mode to draw in, `None` when nothing is drawn.
    pub fn resolve(self) -> Option<Style> {
        match self {
            Self::Auto if std::io::stderr().is_terminal() => Some(Style::Tty),
            Self::Auto | Self::Plain => Some(Style::Plain),
            Self::Tty => Some(Style::Tty),
            Self::None => None,
        }
    }
}

/// How progress is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Redrawn in place (ANSI).
    Tty,
    /// Appended lines.
    Plain,
}

/// A terminal is redrawn at most this often while bytes arrive (every blob's end and the
/// pull's end are always drawn).
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Width of the bar in the terminal view.
const BAR: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlobState {
    Waiting,
    Downloading,
    Downloaded,
    Present,
}

#[derive(Debug)]
struct Blob {
    digest: String,
    size: u64,
    kind: BlobKind,
    done: u64,
    state: BlobState,
}

#[derive(Debug)]
struct Pull {
    image: String,
    blobs: Vec<Blob>,
    started: Instant,
    finished: Option<Instant>,
}

impl Pull {
    fn downloaded(&self) -> u64 {
        self.blobs.iter().filter(|b| b.state != BlobState::Present).map(|b| b.done).sum()
    }

    fn present(&self) -> u64 {
        self.blobs.iter().filter(|b| b.state == BlobState::Present).map(|b| b.size).sum()
    }

    fn total(&self) -> u64 {
        self.blobs.iter().map(|b| b.size).sum()
    }

    fn layers(&self) -> usize {
        self.blobs.iter().filter(|b| b.kind == BlobKind::Layer).count()
    }

    /// "layer 2/3" or "config".
    fn label(&self, index: usize) -> String {
        match self.blobs[index].kind {
            BlobKind::Config => "config".to_owned(),
            BlobKind::Layer => {
                let n = self.blobs[..=index].iter().filter(|b| b.kind == BlobKind::Layer).count();
                format!("layer {n}/{}", self.layers())
            }
        }
    }

    fn summary(&self, now: Instant) -> String {
        let end = self.finished.unwrap_or(now);
        let secs = end.saturating_duration_since(self.started).as_secs_f64();
        let downloaded = self.downloaded();
        let rate = if secs > 0.0 { downloaded as f64 / secs } else { 0.0 };
        let layers = self.layers();
        format!(
            "{} {}: {layers} layer{}, {} downloaded, {} already present, in {secs:.1} s ({}/s)",
            if self.finished.is_some() { "pulled" } else { "pulling" },
            self.image,
            if layers == 1 { "" } else { "s" },
            bytes(downloaded),
            bytes(self.present()),
            bytes(rate as u64),
        )
    }
}

#[derive(Debug)]
struct State {
    pull: Option<Pull>,
    /// Lines of the block last drawn on the terminal (to move back over).
    drawn: usize,
    last_draw: Option<Instant>,
}

/// Draws pull progress on a writer (stderr in the CLI).
pub struct Printer {
    style: Style,
    out: Mutex<(Box<dyn Write + Send>, State)>,
}

impl std::fmt::Debug for Printer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Printer").field("style", &self.style).finish_non_exhaustive()
    }
}

impl Printer {
    /// A printer on stderr.
    pub fn stderr(style: Style) -> Self {
        Self::new(style, Box::new(std::io::stderr()))
    }

    fn new(style: Style, out: Box<dyn Write + Send>) -> Self {
        Self { style, out: Mutex::new((out, State { pull: None, drawn: 0, last_draw: None })) }
    }

    fn observe_at(&self, event: &PullProgress<'_>, now: Instant) {
        let Ok(mut guard) = self.out.lock() else { return };
        let (out, state) = &mut *guard;
        let mut text = String::new();
        let force = match *event {
            PullProgress::Resolved { image, blobs } => {
                state.pull = Some(Pull {
                    image: image.to_owned(),
                    blobs: blobs
                        .iter()
                        .map(|b| Blob {
                            digest: b.digest.clone(),
                            size: b.size,
                            kind: b.kind,
                            done: 0,
                            state: BlobState::Waiting,
                        })
                        .collect(),
                    started: now,
                    finished: None,
                });
                // A new block below whatever was drawn before (a retry with other credentials).
                state.drawn = 0;
                if self.style == Style::Plain
                    && let Some(p) = &state.pull
                {
                    text = format!("pulling {}: {} layers, {}\n", p.image, p.layers(), bytes(p.total()));
                }
                true
            }
            PullProgress::Downloading { digest, done, .. } => {
                if let Some(b) = blob(state, digest) {
                    b.done = done;
                    b.state = BlobState::Downloading;
                }
                false
            }
            PullProgress::BlobDone { digest, size, already_present, .. } => {
                if let Some(b) = blob(state, digest) {
                    b.done = size;
                    b.state = if already_present { BlobState::Present } else { BlobState::Downloaded };
                }
                if self.style == Style::Plain
                    && let Some(p) = &state.pull
                    && let Some(i) = p.blobs.iter().position(|b| b.digest == digest)
                {
                    text = format!(
                        "  {} {} {} {}\n",
                        p.label(i),
                        short(digest),
                        bytes(size),
                        if already_present { "already present" } else { "pulled" }
                    );
                }
                true
            }
            PullProgress::Finished { .. } => {
                if let Some(p) = &mut state.pull {
                    p.finished = Some(now);
                    if self.style == Style::Plain {
                        text = format!("{}\n", p.summary(now));
                    }
                }
                true
            }
        };
        if self.style == Style::Tty {
            let due = state.last_draw.is_none_or(|t| now.saturating_duration_since(t) >= REDRAW_EVERY);
            if !(force || due) {
                return;
            }
            let Some(p) = &state.pull else { return };
            let lines = tty_block(p, now);
            if state.drawn > 0 {
                // Back to the block's first line ("cursor previous line").
                text.push_str(&format!("\x1b[{}F", state.drawn));
            }
            for line in &lines {
                text.push_str("\x1b[2K");
                text.push_str(line);
                text.push('\n');
            }
            state.drawn = lines.len();
            state.last_draw = Some(now);
        }
        // Progress is a courtesy: a closed stderr must not fail the pull.
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

impl PullObserver for Printer {
    fn observe(&self, event: &PullProgress<'_>) {
        self.observe_at(event, Instant::now());
    }
}

fn blob<'a>(state: &'a mut State, digest: &str) -> Option<&'a mut Blob> {
    state.pull.as_mut()?.blobs.iter_mut().find(|b| b.digest == digest)
}

/// The terminal block: a line per blob, then the totals.
fn tty_block(p: &Pull, now: Instant) -> Vec<String> {
    let mut lines = Vec::with_capacity(p.blobs.len() + 1);
    let width = (0..p.blobs.len()).map(|i| p.label(i).len()).max().unwrap_or(0);
    for (i, b) in p.blobs.iter().enumerate() {
        let status = match b.state {
            BlobState::Waiting => format!("waiting          {}", bytes(b.size)),
            BlobState::Present => format!("already present  {}", bytes(b.size)),
            BlobState::Downloaded => format!("pulled           {}", bytes(b.size)),
            BlobState::Downloading => {
                let filled = b
                    .done
                    .min(b.size)
                    .saturating_mul(BAR as u64)
                    .checked_div(b.size)
                    .map_or(BAR, |f| usize::try_from(f).unwrap_or(BAR));
                format!("[{}{}] {} / {}", "=".repeat(filled), " ".repeat(BAR - filled), bytes(b.done), bytes(b.size))
            }
        };
        lines.push(format!("  {:<width$}  {}  {status}", p.label(i), short(&b.digest)));
    }
    lines.push(p.summary(now));
    lines
}

/// The first 12 hex digits of a digest, as docker names layers.
fn short(digest: &str) -> &str {
    let hex = digest.split_once(':').map_or(digest, |(_, h)| h);
    hex.get(..12).unwrap_or(hex)
}

/// Bytes in binary units with one decimal (`512 B`, `1.5 KiB`, `3.0 MiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use podpass_node::images::BlobInfo;

    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    const CONFIG: &str = "sha256:c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0";
    const L1: &str = "sha256:1111111111112222222222222222222222222222222222222222222222222222";
    const L2: &str = "sha256:3333333333334444444444444444444444444444444444444444444444444444";

    fn blobs() -> Vec<BlobInfo> {
        vec![
            BlobInfo { digest: CONFIG.into(), size: 300, kind: BlobKind::Config },
            BlobInfo { digest: L1.into(), size: 2 * 1024 * 1024, kind: BlobKind::Layer },
            BlobInfo { digest: L2.into(), size: 1536, kind: BlobKind::Layer },
        ]
    }

    /// A pull where the config and the first layer are downloaded (in two chunks each
    /// 50 ms apart) and the second layer is already present; one second in all.
    fn play(printer: &Printer) {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let image = "127.0.0.1:5000/team/app:v1";
        let blobs = blobs();
        printer.observe_at(&PullProgress::Resolved { image, blobs: &blobs }, at(0));
        printer.observe_at(&PullProgress::Downloading { image, digest: CONFIG, done: 300, size: 300 }, at(10));
        printer
            .observe_at(&PullProgress::BlobDone { image, digest: CONFIG, size: 300, already_present: false }, at(20));
        let big = 2 * 1024 * 1024;
        printer.observe_at(&PullProgress::Downloading { image, digest: L1, done: big / 2, size: big }, at(30));
        printer.observe_at(&PullProgress::Downloading { image, digest: L1, done: big / 2 + 1, size: big }, at(40));
        printer.observe_at(&PullProgress::Downloading { image, digest: L1, done: big, size: big }, at(500));
        printer.observe_at(&PullProgress::BlobDone { image, digest: L1, size: big, already_present: false }, at(510));
        printer.observe_at(&PullProgress::BlobDone { image, digest: L2, size: 1536, already_present: true }, at(520));
        printer.observe_at(&PullProgress::Finished { image, id: CONFIG }, at(1000));
    }

    #[test]
    fn plain_is_a_line_per_blob_and_the_totals() {
        let sink = Shared::default();
        play(&Printer::new(Style::Plain, Box::new(sink.clone())));
        assert_eq!(
            sink.text(),
            "pulling 127.0.0.1:5000/team/app:v1: 2 layers, 2.0 MiB\n\
             \x20 config c0c0c0c0c0c0 300 B pulled\n\
             \x20 layer 1/2 111111111111 2.0 MiB pulled\n\
             \x20 layer 2/2 333333333333 1.5 KiB already present\n\
             pulled 127.0.0.1:5000/team/app:v1: 2 layers, 2.0 MiB downloaded, 1.5 KiB already present, in 1.0 s (2.0 MiB/s)\n"
        );
    }

    #[test]
    fn the_terminal_block_is_redrawn_in_place_and_throttled() {
        let sink = Shared::default();
        play(&Printer::new(Style::Tty, Box::new(sink.clone())));
        let text = sink.text();
        // Drawn: resolved, config done, L1 full (460 ms after the last draw), L1 done, L2
        // done, finished. Skipped: the chunks 10–20 ms after a draw.
        assert_eq!(text.matches("127.0.0.1:5000/team/app:v1: 2 layers").count(), 6, "{text:?}");
        // Every redraw after the first moves back over the 4-line block.
        assert_eq!(text.matches("\x1b[4F").count(), 5, "{text:?}");
        let last = text.rsplit("\x1b[4F").next().unwrap();
        let lines: Vec<&str> = last.split('\n').map(|l| l.trim_start_matches("\x1b[2K")).collect();
        assert_eq!(
            lines,
            [
                "  config     c0c0c0c0c0c0  pulled           300 B",
                "  layer 1/2  111111111111  pulled           2.0 MiB",
                "  layer 2/2  333333333333  already present  1.5 KiB",
                "pulled 127.0.0.1:5000/team/app:v1: 2 layers, 2.0 MiB downloaded, 1.5 KiB already present, in 1.0 s (2.0 MiB/s)",
                "",
            ]
        );
        // The draw at 500 ms showed the bar full.
        assert!(text.contains(&format!("[{}] 2.0 MiB / 2.0 MiB", "=".repeat(BAR))), "{text:?}");
    }

    #[test]
    fn a_bar_mid_download_and_a_retry_starts_a_new_block() {
        let sink = Shared::default();
        let printer = Printer::new(Style::Tty, Box::new(sink.clone()));
        let image = "r/app:v1";
        let blobs = blobs();
        let t0 = Instant::now();
        printer.observe_at(&PullProgress::Resolved { image, blobs: &blobs }, t0);
        let big = 2 * 1024 * 1024;
        printer.observe_at(
            &PullProgress::Downloading { image, digest: L1, done: big / 4, size: big },
            t0 + Duration::from_millis(200),
        );
        let text = sink.text();
        assert!(text.contains(&format!("[{}{}] 512.0 KiB / 2.0 MiB", "=".repeat(6), " ".repeat(18))), "{text:?}");
        assert!(text.contains("waiting          1.5 KiB"), "{text:?}");
        // A second attempt (other credentials) draws below, not over, the first.
        printer.observe_at(&PullProgress::Resolved { image, blobs: &blobs }, t0 + Duration::from_millis(300));
        let again = sink.text()[text.len()..].to_owned();
        assert!(!again.contains("\x1b[4F"), "{again:?}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
        assert_eq!(short("sha256:abc"), "abc");
        assert_eq!(short("nodigest"), "nodigest");
    }
}
