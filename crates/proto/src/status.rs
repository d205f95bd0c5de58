//! A card's status (docs/protocol.md §3.3) as a type: the seven statuses the hub knows, with
//! their exact wire strings, and a fallback that keeps any other string as sent.
//!
//! Compatibility: our clients also read cards from the original JavaScript hub, and a hub
//! rebuilds a deleted card with status `deleted` (`GET /card`, docs/protocol.md §7.5). A status
//! this crate does not know is therefore never an error on the wire: it reads as
//! [`CardStatus::Other`] and is written back unchanged, so a card round-trips byte for byte.
//! Only [`str::parse`] (input a person typed) refuses an unknown status.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// A card's status. Serialised as its wire string (`"todo"`, `"doing"`, …); any other string
/// reads as [`CardStatus::Other`] and is written back as it came.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum CardStatus {
    /// `todo`: queued (a new card's status, and what a card without one reads as).
    #[default]
    Todo,
    /// `doing`: being worked.
    Doing,
    /// `testing`: the work is done and waits for review.
    Testing,
    /// `failed`: review found it wanting.
    Failed,
    /// `done`: closed.
    Done,
    /// `blocked`: waits on an answer.
    Blocked,
    /// `stale`: abandoned (reached only through moves: the reaper, a sweep).
    Stale,
    /// A status this crate does not know (a newer or the original hub's, `deleted` on a rebuilt
    /// card), kept exactly as sent. Never holds one of the known wire strings.
    Other(String),
}

/// The error of [`CardStatus::from_str`]: the text is not one of the known statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown card status {0:?}: expected one of todo, doing, testing, failed, done, blocked, stale"
)]
pub struct UnknownStatus(pub String);

impl CardStatus {
    /// The known statuses, in board order (the order of [`crate::CARD_STATUSES`]).
    pub const KNOWN: [CardStatus; 7] = [
        CardStatus::Todo,
        CardStatus::Doing,
        CardStatus::Testing,
        CardStatus::Failed,
        CardStatus::Done,
        CardStatus::Blocked,
        CardStatus::Stale,
    ];

    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            CardStatus::Todo => "todo",
            CardStatus::Doing => "doing",
            CardStatus::Testing => "testing",
            CardStatus::Failed => "failed",
            CardStatus::Done => "done",
            CardStatus::Blocked => "blocked",
            CardStatus::Stale => "stale",
            CardStatus::Other(s) => s,
        }
    }

    /// The known status whose wire string is exactly `s`, if any.
    pub fn known(s: &str) -> Option<CardStatus> {
        CardStatus::KNOWN.into_iter().find(|k| k.as_str() == s)
    }

    /// Read a status from the wire: the known status `s` names exactly, else
    /// [`CardStatus::Other`] holding `s`. Never fails.
    pub fn from_wire(s: impl Into<String> + AsRef<str>) -> CardStatus {
        CardStatus::known(s.as_ref()).unwrap_or_else(|| CardStatus::Other(s.into()))
    }

    /// Whether this is `deleted`: the status `GET /card` gives a deleted card it rebuilt from
    /// its last event (docs/protocol.md §7.5).
    pub fn is_deleted(&self) -> bool {
        matches!(self, CardStatus::Other(s) if s == "deleted")
    }

    /// Whether this is one of the seven statuses the hub knows (not [`CardStatus::Other`]).
    pub fn is_known(&self) -> bool {
        !matches!(self, CardStatus::Other(_))
    }

    /// Whether an agent's tool or a person may move a card here: a known status but `stale`,
    /// which only the reaper and a sweep set.
    pub fn is_settable(&self) -> bool {
        self.is_known() && *self != CardStatus::Stale
    }

    /// The statuses an agent's tool or a person may set ([`CardStatus::is_settable`]), in board
    /// order.
    pub fn settable() -> impl Iterator<Item = CardStatus> {
        CardStatus::KNOWN
            .into_iter()
            .filter(CardStatus::is_settable)
    }
}

impl fmt::Display for CardStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parse a status a person typed: surrounding whitespace and ASCII case are ignored (as the
/// hub reads a request's status), and anything but the seven known statuses is refused.
impl FromStr for CardStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<CardStatus, UnknownStatus> {
        CardStatus::known(&s.trim().to_ascii_lowercase()).ok_or_else(|| UnknownStatus(s.into()))
    }
}

/// The wire reading ([`CardStatus::from_wire`]): an unknown string becomes `Other`.
impl From<&str> for CardStatus {
    fn from(s: &str) -> CardStatus {
        CardStatus::from_wire(s)
    }
}

/// The wire reading ([`CardStatus::from_wire`]): an unknown string becomes `Other`.
impl From<String> for CardStatus {
    fn from(s: String) -> CardStatus {
        CardStatus::from_wire(s)
    }
}

impl PartialEq<str> for CardStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CardStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for CardStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CardStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CardStatus, D::Error> {
        String::deserialize(d).map(CardStatus::from_wire)
    }
}

/// A plain string in the schema, as before the type existed: the hub accepts any string and
/// reads an unknown one as documented (docs/protocol.md §7.1, §7.2), so the schema must not
/// refuse it.
impl JsonSchema for CardStatus {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "CardStatus".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        String::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip() {
        for (s, wire) in CardStatus::KNOWN.iter().zip(crate::CARD_STATUSES) {
            assert_eq!(s.as_str(), wire);
            assert_eq!(serde_json::to_string(s).ok(), Some(format!("\"{wire}\"")));
            let back: Option<CardStatus> = serde_json::from_str(&format!("\"{wire}\"")).ok();
            assert_eq!(back.as_ref(), Some(s));
            assert!(s.is_known());
        }
    }

    #[test]
    fn unknown_status_is_kept_as_sent() {
        for raw in ["deleted", "review", "DONE", " todo", ""] {
            let s: Option<CardStatus> = serde_json::to_string(raw)
                .ok()
                .and_then(|j| serde_json::from_str(&j).ok());
            assert_eq!(s, Some(CardStatus::Other(raw.into())));
            let again = s.and_then(|s| serde_json::to_string(&s).ok());
            assert_eq!(again, serde_json::to_string(raw).ok());
        }
        assert!(serde_json::from_str::<CardStatus>("5").is_err());
    }

    #[test]
    fn parse_is_lenient_on_case_and_strict_on_names() {
        assert_eq!(" Doing ".parse::<CardStatus>(), Ok(CardStatus::Doing));
        let e = "review".parse::<CardStatus>().err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "unknown card status \"review\": expected one of todo, doing, testing, failed, \
                 done, blocked, stale"
            )
        );
        assert_eq!(CardStatus::Done.to_string(), "done");
        assert!(CardStatus::Testing == "testing");
    }

    #[test]
    fn schema_is_a_plain_string() {
        let s = schemars::schema_for!(Option<CardStatus>);
        let plain = schemars::schema_for!(Option<String>);
        assert_eq!(s.get("type"), plain.get("type"));
    }
}
