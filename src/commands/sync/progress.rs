//! The progress line while `sync --wait` waits: a spinner redrawn in place when stderr is
//! a terminal, else (CI logs, pipes) a plain line each time what a channel shows changes.
//! Results go to stdout and errors to stderr through here, so that the spinner never
//! leaves half a line among them.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

pub struct Progress {
    tty: bool,
    started: Instant,
    frame: usize,
    /// Whether a spinner line is on the screen (to be cleared before other output).
    drawn: bool,
    /// What each waiting channel shows, in the order they were first seen.
    waiting: Vec<(String, String)>,
    /// What the plain lines last said per channel.
    said: HashMap<String, String>,
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            frame: 0,
            drawn: false,
            waiting: Vec::new(),
            said: HashMap::new(),
        }
    }

    /// Whether a ticker should call [`Progress::tick`].
    pub fn animated(&self) -> bool {
        self.tty
    }

    /// What `channel` shows now.
    pub fn update(&mut self, channel: &str, text: &str) {
        match self.waiting.iter_mut().find(|(c, _)| c == channel) {
            Some(slot) => slot.1 = text.to_string(),
            None => self.waiting.push((channel.to_string(), text.to_string())),
        }
        if self.tty {
            self.draw();
        } else if self.said.get(channel).map(String::as_str) != Some(text) {
            self.said.insert(channel.to_string(), text.to_string());
            eprintln!("{channel}: {text}");
        }
    }

    /// `channel` is no longer waited for.
    pub fn done(&mut self, channel: &str) {
        self.waiting.retain(|(c, _)| c != channel);
    }

    /// Advances the spinner.
    pub fn tick(&mut self) {
        if self.tty {
            self.frame = self
                .frame
                .wrapping_add(1)
                .checked_rem(FRAMES.len())
                .unwrap_or(0);
            self.draw();
        }
    }

    fn draw(&mut self) {
        let Some((channel, text)) = self.waiting.first() else {
            self.clear();
            return;
        };
        let more = match self.waiting.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n.saturating_sub(1)),
        };
        let line = format!(
            "{} {}s {channel}: {text}{more}",
            FRAMES.get(self.frame).copied().unwrap_or('-'),
            self.started.elapsed().as_secs(),
        );
        let width = terminal_width().saturating_sub(1);
        let line: String = line.chars().take(width).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{line}");
        let _ = err.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }

    /// A line of results on stdout.
    pub fn out(&mut self, line: &str) -> std::io::Result<()> {
        self.clear();
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        if self.tty {
            self.draw();
        }
        Ok(())
    }

    /// An error line on stderr.
    pub fn err(&mut self, line: &str) {
        self.clear();
        eprintln!("{line}");
        if self.tty {
            self.draw();
        }
    }

    /// Takes the spinner off the screen for good.
    pub fn finish(&mut self) {
        self.waiting.clear();
        self.clear();
    }
}

/// The terminal's width as the shell exports it, else 80.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|w| *w > 10)
        .unwrap_or(80)
}
