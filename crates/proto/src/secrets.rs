//! Secret detection and redaction, shared by the hub (which refuses secrets in message text and
//! card notes) and the runner (which redacts agent output before writing anything).
//!
//! One table of patterns, so what the hub refuses and what the runner scrubs never drift apart.

use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

struct Pattern {
    kind: &'static str,
    re: Regex,
}

fn pattern(kind: &'static str, re: &str) -> Option<Pattern> {
    // The patterns are constants; a failure to compile is a programming error caught by the unit
    // tests below, so it is skipped rather than panicking at run time.
    Regex::new(re).ok().map(|re| Pattern { kind, re })
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    [
        pattern("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
        pattern("openai-key", r"\bsk-(?:proj-|live-|test-)?[A-Za-z0-9_\-]{32,}"),
        pattern("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
        pattern("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        pattern("slack-token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
        pattern("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
        pattern("stripe-key", r"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}"),
        pattern(
            "jwt",
            r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        ),
        pattern(
            "private-key",
            r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z]+ )*PRIVATE KEY-----)?",
        ),
        pattern(
            "hex-secret",
            r"(?i)\b(?:priv(?:ate)?[_\s-]?key|secret|seed|privkey)\b[^\n]{0,24}?\b[0-9a-f]{64}\b",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
});

/// The kinds of secret found in `text`, in table order, each once. Empty when the text is clean.
///
/// Patterns are applied to the progressively redacted text, so one secret is reported once even
/// when a broader pattern (an OpenAI-style `sk-` key) would also match a narrower one's hit.
pub fn detect(text: &str) -> Vec<&'static str> {
    scan(text).1
}

/// `text` with every secret replaced by `[REDACTED:<kind>]`; borrowed when nothing matched.
pub fn redact(text: &str) -> Cow<'_, str> {
    scan(text).0
}

fn scan(text: &str) -> (Cow<'_, str>, Vec<&'static str>) {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    let mut kinds = Vec::new();
    for p in PATTERNS.iter() {
        if p.re.is_match(&out) {
            kinds.push(p.kind);
            let replaced =
                p.re.replace_all(&out, format!("[REDACTED:{}]", p.kind).as_str())
                    .into_owned();
            out = Cow::Owned(replaced);
        }
    }
    (out, kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(PATTERNS.len(), 10);
    }

    #[test]
    fn detects_and_redacts_common_keys() {
        let key = format!("sk-ant-api03-{}", "a".repeat(40));
        let text = format!("use {key} please");
        assert_eq!(detect(&text), vec!["anthropic-key"]);
        let red = redact(&text);
        assert!(!red.contains(&key));
        assert!(red.contains("[REDACTED:anthropic-key]"));

        let gh = format!("ghp_{}", "A1b2".repeat(10));
        assert_eq!(detect(&gh), vec!["github-token"]);
        assert!(detect("AKIAABCDEFGHIJKLMNOP").contains(&"aws-access-key"));
        let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----";
        assert_eq!(detect(pem), vec!["private-key"]);
        assert_eq!(redact(pem), "[REDACTED:private-key]");
        let hex = format!("privkey: {}", "ab".repeat(32));
        assert_eq!(detect(&hex), vec!["hex-secret"]);
    }

    #[test]
    fn ordinary_text_is_clean() {
        for t in [
            "fix #12 and run cargo test",
            "commit 3f2a9c1e4b5d6a7b8c9d0e1f2a3b4c5d6e7f8a9b",
            "sk- is a prefix",
            "see https://example.com/a-b-c",
        ] {
            assert!(detect(t).is_empty(), "{t}");
            assert!(matches!(redact(t), Cow::Borrowed(_)));
        }
    }
}
