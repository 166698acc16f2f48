//! A part's command line, built from the daemon's own flag type: each flag is named by the
//! field of the daemon's `Config` it sets ([`field!`], checked by the compiler), its
//! spelling read from the daemon's clap definition, and the whole line parsed by the
//! `podpass` binary's own parser before the part starts — so a flag is written once, where
//! the daemon declares it, and a line the daemon would refuse is `up`'s error, naming the
//! part, not a child exiting with a usage message.

use std::marker::PhantomData;

use clap::{CommandFactory, Parser};

/// The clap id of a field of a daemon's flag type (`field!(Config, issuer_ca)`, or through a
/// flattened group: `field!(Config, audit.audit_log_path)`); the compiler checks that the
/// field exists.
macro_rules! field {
    ($config:ty, $($path:ident).+) => {{
        let _exists = |c: &$config| {
            let _ = &c.$($path).+;
        };
        $crate::up::command_line::last_segment(stringify!($($path).+))
    }};
}
pub(crate) use field;

/// The last segment of a `a.b.c` field path: the flattened field's own id.
pub(crate) const fn last_segment(path: &'static str) -> &'static str {
    let bytes = path.as_bytes();
    let mut i = bytes.len();
    while i > 0 {
        if bytes[i - 1] == b'.' {
            let (_, last) = path.split_at(i);
            return last.trim_ascii_start();
        }
        i -= 1;
    }
    path
}

/// A command line being built for a daemon whose flags are `C`.
pub(crate) struct CommandLine<C> {
    words: Vec<String>,
    flags: Vec<String>,
    command: clap::Command,
    /// Fields named that `C` has no flag for.
    unknown: Vec<&'static str>,
    _flags: PhantomData<fn() -> C>,
}

impl<C: clap::Args> CommandLine<C> {
    /// `podpass [--log-format json] <words…>`, then the daemon's flags.
    pub(crate) fn new(words: &[&str], json_logs: bool) -> Self {
        let mut all = Vec::new();
        if json_logs {
            let cli = crate::Cli::command();
            let arg = cli.get_arguments().find(|a| a.get_id() == "log_format");
            if let Some(long) = arg.and_then(clap::Arg::get_long) {
                all.extend([format!("--{long}"), "json".to_owned()]);
            }
        }
        all.extend(words.iter().map(|w| (*w).to_owned()));
        let command = C::augment_args(clap::Command::new("part"));
        CommandLine { words: all, flags: Vec::new(), command, unknown: Vec::new(), _flags: PhantomData }
    }

    fn long(&mut self, id: &'static str) -> Option<String> {
        let long = self.command.get_arguments().find(|a| a.get_id() == id).and_then(clap::Arg::get_long);
        if long.is_none() {
            self.unknown.push(id);
        }
        long.map(|l| format!("--{l}"))
    }

    /// Sets the flag of field `id` to `value` (call again for a repeatable flag).
    pub(crate) fn set(mut self, id: &'static str, value: impl std::fmt::Display) -> Self {
        if let Some(long) = self.long(id) {
            self.flags.extend([long, value.to_string()]);
        }
        self
    }

    /// Sets the flag of field `id` to a path.
    pub(crate) fn path(self, id: &'static str, value: &std::path::Path) -> Self {
        let value = value.display().to_string();
        self.set(id, value)
    }

    /// Sets the flag of field `id` when `value` is given.
    pub(crate) fn maybe(self, id: &'static str, value: Option<impl std::fmt::Display>) -> Self {
        match value {
            Some(v) => self.set(id, v),
            None => self,
        }
    }

    /// The line's arguments (after the program), parsed by `podpass`'s own parser first.
    pub(crate) fn build(self, part: &str) -> anyhow::Result<Vec<String>> {
        if !self.unknown.is_empty() {
            // A field without a flag: `#[arg(skip)]`, or an id renamed from its field.
            anyhow::bail!("{part}: the daemon has no flag for {:?}", self.unknown);
        }
        let args: Vec<String> = self.words.into_iter().chain(self.flags).collect();
        let argv = std::iter::once("podpass".to_owned()).chain(args.iter().cloned());
        if let Err(e) = crate::Cli::try_parse_from(argv) {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            anyhow::bail!("{part}: podpass would refuse its command line: {first}");
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_line_is_spelled_by_the_daemons_flags_and_parsed_before_it_runs() {
        type Auth = podpass_registry_auth::Config;
        let line = CommandLine::<Auth>::new(&["registry-auth"], true)
            .set(field!(Auth, issuers), "https://127.0.0.1:6443")
            .set(field!(Auth, audience), "registry")
            .path(field!(Auth, policy), std::path::Path::new("/p.yaml"))
            .path(field!(Auth, signing_key), std::path::Path::new("/k.pem"))
            .set(field!(Auth, registry_service), "registry")
            .path(field!(Auth, audit.audit_log_path), std::path::Path::new("/a.log"))
            .build("registry-auth")
            .unwrap();
        assert_eq!(
            line,
            [
                "--log-format",
                "json",
                "registry-auth",
                "--issuer",
                "https://127.0.0.1:6443",
                "--audience",
                "registry",
                "--policy",
                "/p.yaml",
                "--signing-key",
                "/k.pem",
                "--registry-service",
                "registry",
                "--audit-log-path",
                "/a.log"
            ]
        );
        // A value the daemon refuses is up's error, naming the part and the flag.
        let refused = CommandLine::<Auth>::new(&["registry-auth"], false)
            .set(field!(Auth, issuers), "https://x")
            .set(field!(Auth, audience), "a")
            .set(field!(Auth, policy), "/p")
            .set(field!(Auth, signing_key), "/k")
            .set(field!(Auth, registry_service), "r")
            .set(field!(Auth, listen), "not-an-address")
            .build("registry-auth")
            .unwrap_err();
        let message = refused.to_string();
        assert!(message.starts_with("registry-auth: podpass would refuse its command line: "), "{message}");
        assert!(message.contains("--listen"), "{message}");
        // So is a required flag left out.
        let missing = CommandLine::<Auth>::new(&["registry-auth"], false).build("registry-auth").unwrap_err();
        assert!(missing.to_string().contains("required"), "{missing}");
        assert_eq!(last_segment("audit.audit_log_path"), "audit_log_path");
        assert_eq!(last_segment("listen"), "listen");
    }
}
