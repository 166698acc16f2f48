//! The policy's globs: `*` is any run of characters, except that in repository patterns it
//! stops at `/` and `**` crosses it (`team-a/*` is `team-a/app`, not `team-a/app/cache`).

/// One piece of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(char),
    /// `*`: any run, not crossing `/` when the pattern is path-aware.
    Star,
    /// `**`: any run, `/` included.
    AnyPath,
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pieces: Vec<Piece>,
}

impl Glob {
    /// A glob where `*` matches any run of characters (`/` included).
    pub fn plain(pattern: &str) -> Self {
        Self { pieces: pattern.chars().map(|c| if c == '*' { Piece::AnyPath } else { Piece::Literal(c) }).collect() }
    }

    /// A path glob: `*` stops at `/`, `**` crosses it.
    pub fn path(pattern: &str) -> Self {
        let mut pieces = Vec::new();
        Self::push_path(&mut pieces, pattern);
        Self { pieces }
    }

    /// A path glob whose placeholders (`{namespace}`, …) are replaced by their values as
    /// literal text: glob characters in a value match only themselves.
    pub fn path_substituted(pattern: &str, values: &[(&str, &str)]) -> Self {
        let mut pieces = Vec::new();
        let mut rest = pattern;
        loop {
            let next = values.iter().filter_map(|(name, value)| rest.find(name).map(|at| (at, *name, *value))).min();
            let Some((at, name, value)) = next else { break };
            Self::push_path(&mut pieces, &rest[..at]);
            pieces.extend(value.chars().map(Piece::Literal));
            rest = &rest[at + name.len()..];
        }
        Self::push_path(&mut pieces, rest);
        Self { pieces }
    }

    fn push_path(pieces: &mut Vec<Piece>, pattern: &str) {
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '*' {
                pieces.push(Piece::Literal(c));
            } else if chars.peek() == Some(&'*') {
                while chars.peek() == Some(&'*') {
                    chars.next();
                }
                pieces.push(Piece::AnyPath);
            } else {
                pieces.push(Piece::Star);
            }
        }
    }

    /// Whether `text` matches the whole pattern. Dynamic programming over (piece, char):
    /// O(pattern × text), so no pattern can make matching exponential.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        // reachable[j]: the pieces so far can consume exactly text[..j]
        let mut reachable = vec![false; text.len() + 1];
        reachable[0] = true;
        for piece in &self.pieces {
            let mut next = vec![false; text.len() + 1];
            match piece {
                Piece::Literal(c) => {
                    for j in 0..text.len() {
                        next[j + 1] = reachable[j] && text[j] == *c;
                    }
                }
                Piece::Star | Piece::AnyPath => {
                    let crosses = matches!(piece, Piece::AnyPath);
                    let mut carry = false;
                    for j in 0..=text.len() {
                        carry = reachable[j] || (carry && j > 0 && (crosses || text[j - 1] != '/'));
                        next[j] = carry;
                    }
                }
            }
            reachable = next;
        }
        reachable[text.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_star_stops_at_slash_and_double_star_crosses() {
        let g = Glob::path("team-a/*");
        assert!(g.matches("team-a/app"));
        assert!(!g.matches("team-a/app/cache"));
        assert!(!g.matches("team-ab/app"));
        let g = Glob::path("team-a/**");
        assert!(g.matches("team-a/app/cache"));
        assert!(!g.matches("team-b/app"));
        assert!(Glob::path("*/base").matches("library/base"));
        assert!(!Glob::path("*/base").matches("a/b/base"));
        assert!(Glob::path("**").matches("a/b/c"));
        assert!(Glob::path("app").matches("app") && !Glob::path("app").matches("apps"));
    }

    #[test]
    fn substituted_values_are_literal_text() {
        let values = [("{namespace}", "*"), ("{serviceaccount}", "**")];
        let g = Glob::path_substituted("{namespace}/*", &values);
        assert!(!g.matches("team-a/app"), "a namespace named * is not a glob");
        assert!(g.matches("*/app"));
        let g = Glob::path_substituted("x/{serviceaccount}/{namespace}-*", &values);
        assert!(g.matches("x/**/*-cache"));
        assert!(!g.matches("x/a/b/c-cache"));
        let values = [("{namespace}", "team-a"), ("{serviceaccount}", "builder")];
        assert_eq!(Glob::path_substituted("{namespace}/{serviceaccount}/**", &values), Glob::path("team-a/builder/**"));
    }

    #[test]
    fn plain_star_matches_anything() {
        assert!(Glob::plain("*").matches(""));
        assert!(Glob::plain("team-*").matches("team-a"));
        assert!(!Glob::plain("team-*").matches("tea"));
        assert!(Glob::plain("https://*.example").matches("https://a.b.example"));
    }

    #[test]
    fn hostile_patterns_stay_linear() {
        let g = Glob::plain(&"*a".repeat(200));
        assert!(!g.matches(&"a".repeat(199)));
        assert!(g.matches(&"a".repeat(400)));
    }
}
