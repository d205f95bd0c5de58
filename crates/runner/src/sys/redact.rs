//! Output redaction (docs/runner.md §10): the hub's secret table plus the runner's own rules
//! for `NAME_KEY=…`/`NAME_TOKEN=…` assignments and bearer headers. Applied to every captured line
//! before it is written anywhere, and to every bus text built from a turn's output.

use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

static ASSIGN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"\b([A-Za-z0-9_]*(?:KEY|TOKEN))=(["']?)[A-Za-z0-9_\-./+=:]{32,}"#).ok()
});
static BEARER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)(Authorization:\s*Bearer\s+)[A-Za-z0-9_\-./+=]{16,}").ok());
static EXTRA_KEYS: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b(?:xai-[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,})").ok()
});

/// `text` with every secret replaced; borrowed when nothing matched (ordinary text is left
/// byte-identical).
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = trantor_proto::secrets::redact(text);
    if let Some(r) = ASSIGN.as_ref()
        && r.is_match(&out)
    {
        out = Cow::Owned(r.replace_all(&out, "$1=$2<redacted:$1>").into_owned());
    }
    if let Some(r) = BEARER.as_ref()
        && r.is_match(&out)
    {
        out = Cow::Owned(r.replace_all(&out, "$1<redacted>").into_owned());
    }
    if let Some(r) = EXTRA_KEYS.as_ref()
        && r.is_match(&out)
    {
        out = Cow::Owned(r.replace_all(&out, "<redacted>").into_owned());
    }
    out
}

/// A line buffer for a byte stream: whole lines come out redacted, a partial line is held until
/// its newline arrives or the stream ends, so a key never slips through split across reads.
#[derive(Debug, Default)]
pub struct LineRedactor {
    partial: Vec<u8>,
}

impl LineRedactor {
    /// Feed bytes; returns the redacted complete lines (with their newlines).
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        self.partial.extend_from_slice(bytes);
        let Some(last_nl) = self.partial.iter().rposition(|b| *b == b'\n') else {
            // A runaway line without a newline is flushed in pieces rather than held forever.
            if self.partial.len() > 64 * 1024 {
                return self.finish();
            }
            return String::new();
        };
        let rest = self.partial.split_off(last_nl + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        redact(&String::from_utf8_lossy(&whole)).into_owned()
    }

    /// The stream ended: the held partial line, redacted.
    pub fn finish(&mut self) -> String {
        let whole = std::mem::take(&mut self.partial);
        redact(&String::from_utf8_lossy(&whole)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_and_bearers_are_redacted() {
        let key = "a".repeat(40);
        let t = format!("export OPENAI_API_KEY=\"{key}\" and MY_TOKEN={key}");
        let r = redact(&t);
        assert!(!r.contains(&key), "{r}");
        assert!(r.contains("OPENAI_API_KEY=\"<redacted:OPENAI_API_KEY>"));
        assert!(r.contains("MY_TOKEN=<redacted:MY_TOKEN>"));
        let b = redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz");
        assert_eq!(b, "Authorization: Bearer <redacted>");
        assert!(matches!(redact("plain words, KEY=short"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_key_split_across_reads_is_still_caught() {
        let key = format!("sk-ant-api03-{}", "b".repeat(40));
        let mut lr = LineRedactor::default();
        let (a, b) = key.split_at(20);
        let mut out = lr.feed(format!("start {a}").as_bytes());
        assert!(out.is_empty());
        out.push_str(&lr.feed(format!("{b} end\nnext").as_bytes()));
        out.push_str(&lr.finish());
        assert!(!out.contains(&key));
        assert!(out.contains("REDACTED"));
        assert!(out.ends_with("next"));
    }
}
