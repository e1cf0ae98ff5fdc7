//! Memory namespaces: `<scope kind>/<scope id>[/<segment>…]`.

use berth_core::ids::check_id;
use berth_core::limits::Limit;
use berth_core::limits::{MEMORY_NAMESPACE_BYTES_MAX, MEMORY_NAMESPACE_SEGMENTS_MAX, MEMORY_SEGMENT_CHARS_MAX};
use berth_core::{Error, ProjectId, Result, UserId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Whose memory a namespace is: the first two segments of every namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryScope {
    /// `user/<user id>`: one user's memory.
    User(UserId),
    /// `project/<project id>`: shared by a project's users.
    Project(ProjectId),
    /// `app/<name>`: tenant-wide (every user reads it; services and admins write it).
    App(String),
    /// `berth/<name>`: berth's own bookkeeping (carried-write markers and indexes); no
    /// principal reads or writes it through the API.
    System(String),
}

impl MemoryScope {
    pub fn kind(&self) -> &'static str {
        match self {
            MemoryScope::User(_) => "user",
            MemoryScope::Project(_) => "project",
            MemoryScope::App(_) => "app",
            MemoryScope::System(_) => "berth",
        }
    }

    pub fn id(&self) -> &str {
        match self {
            MemoryScope::User(user) => user.as_str(),
            MemoryScope::Project(project) => project.as_str(),
            MemoryScope::App(name) => name,
            MemoryScope::System(name) => name,
        }
    }

    /// The namespace of the scope itself (`user/alice`).
    pub fn namespace(&self) -> Namespace {
        Namespace { text: format!("{}/{}", self.kind(), self.id()), scope: self.clone() }
    }
}

/// A validated memory namespace. Segments are separated by `/`; the first names the
/// scope kind (`user`, `project`, `app`), the second its id (the id grammar), the rest
/// are free: 1–128 characters without `/` or control characters, never `.` or `..`;
/// at most 16 segments and 512 bytes in all. Namespaces order by their text, so a
/// namespace's descendants sort directly after it (`/` is the smallest byte allowed).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    text: String,
    scope: MemoryScope,
}

impl Namespace {
    pub fn parse(text: &str) -> Result<Namespace> {
        let what = "namespace";
        if text.len() > MEMORY_NAMESPACE_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: Limit::MemoryNamespaceBytes,
                limit: MEMORY_NAMESPACE_BYTES_MAX as u64,
                actual: text.len() as u64,
            });
        }
        let segments: Vec<&str> = text.split('/').collect();
        if segments.len() > MEMORY_NAMESPACE_SEGMENTS_MAX {
            return Err(Error::LimitExceeded {
                what: Limit::MemoryNamespaceSegments,
                limit: MEMORY_NAMESPACE_SEGMENTS_MAX as u64,
                actual: segments.len() as u64,
            });
        }
        if segments.len() < 2 {
            return Err(Error::invalid(what, "a namespace starts with a scope: user/<id>, project/<id> or app/<name>"));
        }
        for (index, segment) in segments.iter().enumerate() {
            check_segment(segment)
                .map_err(|reason| Error::invalid(what, format!("segment {}: {reason}", index + 1)))?;
        }
        let id = segments[1];
        let scope = match segments[0] {
            "user" => MemoryScope::User(UserId::parse(id)?),
            "project" => MemoryScope::Project(ProjectId::parse(id)?),
            "app" => {
                check_id("app name", id)?;
                MemoryScope::App(id.to_owned())
            }
            "berth" => {
                check_id("namespace", id)?;
                MemoryScope::System(id.to_owned())
            }
            other => {
                return Err(Error::invalid(
                    what,
                    format!("unknown scope {other:?}: a namespace starts with user/, project/ or app/"),
                ))
            }
        };
        Ok(Namespace { text: text.to_owned(), scope })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn scope(&self) -> &MemoryScope {
        &self.scope
    }

    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.text.split('/')
    }

    pub fn depth(&self) -> usize {
        self.segments().count()
    }

    /// Is `self` equal to `prefix` or inside it (`user/a/b` is inside `user/a`, not
    /// inside `user/a/` nor `user/ab`)?
    pub fn is_within(&self, prefix: &Namespace) -> bool {
        is_within(&self.text, &prefix.text)
    }

    /// Does an item here count against its tenant's usage and quota? Everything but
    /// berth's own bookkeeping (`berth/…`): a tenant is charged for what it stored.
    pub fn is_charged(&self) -> bool {
        !matches!(self.scope, MemoryScope::System(_))
    }

    /// The first `depth` segments (the namespace itself if it has no more; never fewer
    /// than the scope's two).
    pub fn truncated(&self, depth: usize) -> Namespace {
        let depth = depth.max(2);
        match self.text.match_indices('/').nth(depth - 1) {
            Some((cut, _)) => Namespace { text: self.text[..cut].to_owned(), scope: self.scope.clone() },
            None => self.clone(),
        }
    }
}

/// Where berth's own bookkeeping lives: every namespace of `MemoryScope::System` starts
/// so (and no other), and none of it is charged (`Namespace::is_charged`). SQL backends
/// test it as the range [`SYSTEM_NAMESPACES`, `SYSTEM_NAMESPACES_END`).
pub const SYSTEM_NAMESPACES: &str = "berth/";

/// The least text past every namespace that starts with `SYSTEM_NAMESPACES` (`0` is the
/// byte after `/`).
pub const SYSTEM_NAMESPACES_END: &str = "berth0";

/// The scope part of a namespace held as text (its first two segments: `user/alice` of
/// `user/alice/notes`), for backends counting per scope.
pub fn scope_of(namespace: &str) -> &str {
    match namespace.match_indices('/').nth(1) {
        Some((cut, _)) => &namespace[..cut],
        None => namespace,
    }
}

/// Text form of `Namespace::is_within`, for backends holding namespaces as strings.
pub fn is_within(namespace: &str, prefix: &str) -> bool {
    namespace == prefix || (namespace.starts_with(prefix) && namespace.as_bytes().get(prefix.len()) == Some(&b'/'))
}

fn check_segment(segment: &str) -> std::result::Result<(), String> {
    if segment.is_empty() {
        return Err("empty".into());
    }
    let chars = segment.chars().count();
    if chars > MEMORY_SEGMENT_CHARS_MAX {
        return Err(format!("{chars} characters, at most {MEMORY_SEGMENT_CHARS_MAX}"));
    }
    if segment == "." || segment == ".." {
        return Err("\".\" and \"..\" are not segments".into());
    }
    if let Some(bad) = segment.chars().find(|c| c.is_control()) {
        return Err(format!("control character U+{:04X}", bad as u32));
    }
    Ok(())
}

/// Checks a memory key: 1–512 bytes of UTF-8 without control characters.
pub fn check_key(key: &str) -> Result<()> {
    use berth_core::limits::MEMORY_KEY_BYTES_MAX;
    if key.is_empty() {
        return Err(Error::invalid("key", "empty"));
    }
    if key.len() > MEMORY_KEY_BYTES_MAX {
        return Err(Error::LimitExceeded {
            what: Limit::MemoryKeyBytes,
            limit: MEMORY_KEY_BYTES_MAX as u64,
            actual: key.len() as u64,
        });
    }
    if let Some(bad) = key.chars().find(|c| c.is_control()) {
        return Err(Error::invalid("key", format!("control character U+{:04X}", bad as u32)));
    }
    Ok(())
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Namespace({:?})", self.text)
    }
}

impl Serialize for Namespace {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Namespace, D::Error> {
        let text = String::deserialize(deserializer)?;
        Namespace::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for good in ["user/alice", "project/p1/notes", "app/support/faq/ünïcode words", "user/a/b/c"] {
            Namespace::parse(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "",
            "user",
            "user/",
            "user//x",
            "team/x",
            "user/../x",
            "user/a/..",
            "user/a/.",
            "user/a b",
            "user/a/\u{7}",
            "/user/a",
            "user/a/",
        ] {
            assert!(Namespace::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("user/a/{}", "x".repeat(129));
        assert!(Namespace::parse(&long).is_err());
        let deep = format!("user/a{}", "/x".repeat(15));
        assert_eq!(Namespace::parse(&deep).unwrap_err().code(), "limit_exceeded");
    }

    #[test]
    fn within_and_truncation() {
        let ns = Namespace::parse("user/a/b/c").unwrap();
        assert!(ns.is_within(&Namespace::parse("user/a").unwrap()));
        assert!(ns.is_within(&Namespace::parse("user/a/b/c").unwrap()));
        assert!(!ns.is_within(&Namespace::parse("user/a/bb").unwrap()));
        assert!(!Namespace::parse("user/ab").unwrap().is_within(&Namespace::parse("user/a").unwrap()));
        assert_eq!(ns.truncated(3).as_str(), "user/a/b");
        assert_eq!(ns.truncated(1).as_str(), "user/a");
        assert_eq!(ns.truncated(9).as_str(), "user/a/b/c");
        assert_eq!(ns.scope(), &MemoryScope::User(UserId::parse("a").unwrap()));
        assert_eq!((scope_of("user/a/b/c"), scope_of("user/a")), ("user/a", "user/a"));
    }

    #[test]
    fn only_berths_own_namespaces_are_uncharged() {
        for (text, charged) in
            [("user/berth", true), ("app/berth/x", true), ("berth/carried", false), ("berth/scopes/user/a", false)]
        {
            let namespace = Namespace::parse(text).unwrap();
            assert_eq!(namespace.is_charged(), charged, "{text}");
            let in_range = (SYSTEM_NAMESPACES..SYSTEM_NAMESPACES_END).contains(&text);
            assert_eq!(in_range, !charged, "{text}: the SQL range agrees");
        }
    }
}
