//! What every podpass daemon's configuration shares: problems named by their flag and
//! reported all at once ([`ConfigErrors`], exit [`EXIT_USAGE`]), and flags parsed from an
//! argument list with the daemon's own declarations ([`parse_flags`]).
//!
//! Each daemon has one shape: its `Config` (the flags, declared once with clap) →
//! `prepare()` (every problem at once, nothing bound) → `bind()` → `serve(shutdown)`.

use std::ffi::OsString;
use std::fmt;

use thiserror::Error;

/// The exit code of a daemon whose configuration cannot work (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// One thing wrong with a configuration: the flag at fault, the value or file it names
/// (when the problem is with that one), and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The flag, as the user types it (`--tls-cert-file`).
    pub flag: String,
    /// The value or file at fault (`/etc/podpass/tls.crt`, `"http://x"`), when the flag
    /// takes several or the value is not obvious.
    pub value: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    /// `--flag value: message`, or `--flag: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{} {value}: {}", self.flag, self.message),
            None => write!(f, "{}: {}", self.flag, self.message),
        }
    }
}

/// Every problem with a configuration, one per line; nothing was bound or started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Error)]
pub struct ConfigErrors(pub Vec<ConfigProblem>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl ConfigErrors {
    /// Whether `flag` is among the problems.
    pub fn names(&self, flag: &str) -> bool {
        self.0.iter().any(|p| p.flag == flag)
    }
}

/// Collects a configuration's problems while it is checked.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigProblem>);

impl Problems {
    /// Records that `flag` is wrong: `message`.
    pub fn push(&mut self, flag: impl Into<String>, message: impl fmt::Display) {
        self.0.push(ConfigProblem { flag: flag.into(), value: None, message: message.to_string() });
    }

    /// Records that `value` of `flag` (a file, one of several values) is wrong: `message`.
    pub fn push_value(&mut self, flag: impl Into<String>, value: impl fmt::Display, message: impl fmt::Display) {
        self.0.push(ConfigProblem { flag: flag.into(), value: Some(value.to_string()), message: message.to_string() });
    }

    /// The value of `result`, or `None` with its error recorded against `flag`.
    pub fn check<T, E: fmt::Display>(&mut self, flag: &str, result: Result<T, E>) -> Option<T> {
        result.map_err(|e| self.push(flag, e)).ok()
    }

    /// The value of `result`, or `None` with its error recorded against `value` of `flag`.
    pub fn check_value<T, E: fmt::Display>(
        &mut self,
        flag: &str,
        value: impl fmt::Display,
        result: Result<T, E>,
    ) -> Option<T> {
        result.map_err(|e| self.push_value(flag, value, e)).ok()
    }

    /// Whether nothing is wrong so far.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when nothing is wrong, else every problem.
    pub fn finish(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(ConfigErrors(self.0)) }
    }
}

/// Parses `args` (flags only, no program name) with the flags `T` declares — the same
/// declarations, defaults and value parsers as the daemon's command line. For embedding a
/// daemon, benches and tests.
pub fn parse_flags<T, I, A>(args: I) -> Result<T, clap::Error>
where
    T: clap::Args,
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let command = T::augment_args(clap::Command::new("podpass").no_binary_name(true));
    let matches = command.try_get_matches_from(args)?;
    T::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, clap::Args)]
    struct Flags {
        #[arg(long, default_value_t = 3)]
        count: u32,
        #[arg(long)]
        name: String,
    }

    #[test]
    fn flags_parse_with_their_declared_defaults_and_name_what_is_missing() {
        let f: Flags = parse_flags(["--name", "x"]).unwrap();
        assert_eq!((f.count, f.name.as_str()), (3, "x"));
        let err = parse_flags::<Flags, _, _>(["--count", "4"]).unwrap_err().to_string();
        assert!(err.contains("--name"), "{err}");
    }

    #[test]
    fn every_problem_is_kept_and_printed_one_per_line() {
        let mut p = Problems::default();
        p.push("--a", "first");
        assert_eq!(p.check::<u8, _>("--b", Err("second")), None);
        assert_eq!(p.check::<u8, &str>("--c", Ok(1)), Some(1));
        assert_eq!(p.check_value::<u8, _>("--d", "/x.pem", Err("unreadable")), None);
        let errors = p.finish().unwrap_err();
        assert_eq!(errors.to_string(), "--a: first\n--b: second\n--d /x.pem: unreadable");
        assert!(errors.names("--b") && !errors.names("--c"));
        assert_eq!(Problems::default().finish(), Ok(()));
    }
}
