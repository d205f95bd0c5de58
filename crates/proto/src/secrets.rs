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
    // No leading `\b`: a key glued to a word character (`xsk-ant-…`) is still a key.
    [
        pattern("anthropic-key", r"sk-ant-[A-Za-z0-9_\-]{20,}"),
        pattern("openai-key", r"sk-(?:proj-|live-|test-)?[A-Za-z0-9_\-]{32,}"),
        pattern("github-token", r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
        pattern("gitlab-token", r"glpat-[A-Za-z0-9_\-]{20,}"),
        pattern("huggingface-token", r"hf_[A-Za-z0-9]{30,}"),
        pattern("npm-token", r"npm_[A-Za-z0-9]{36,}"),
        pattern("aws-access-key", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
        pattern(
            "aws-secret-key",
            r#"(?i)(?:aws[_\s.-]?)?secret[_\s.-]?(?:access[_\s.-]?)?key["'\s]*[:=]\s*["']?[A-Za-z0-9/+]{40}"#,
        ),
        pattern("slack-token", r"xox[abprs]-[A-Za-z0-9\-]{10,}"),
        pattern("google-api-key", r"AIza[0-9A-Za-z_\-]{35}"),
        pattern("stripe-key", r"(?:sk|rk)_live_[0-9A-Za-z]{20,}"),
        pattern(
            "jwt",
            r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        ),
        pattern(
            "private-key",
            r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z]+ )*PRIVATE KEY-----)?",
        ),
        pattern(
            "hex-secret",
            r"(?i)(?:priv(?:ate)?[_\s-]?key|secret|seed|privkey)[^\n]{0,24}?\b[0-9a-f]{64}\b",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
});

/// Characters that render as nothing and can split a key so a pattern misses it: NUL, the
/// zero-width space/joiners, word joiner, BOM, soft hyphen and the other format controls.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\0' | '\u{00AD}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}'
    )
}

/// `text` without the invisible characters a key could be split with; borrowed when it has
/// none. Scanning runs on this form.
pub fn normalise(text: &str) -> Cow<'_, str> {
    if text.chars().any(is_invisible) {
        Cow::Owned(text.chars().filter(|c| !is_invisible(*c)).collect())
    } else {
        Cow::Borrowed(text)
    }
}

/// The kinds of secret found in `text` (after [`normalise`]), in table order, each once. Empty
/// when the text is clean.
///
/// Patterns are applied to the progressively redacted text, so one secret is reported once even
/// when a broader pattern (an OpenAI-style `sk-` key) would also match a narrower one's hit.
pub fn detect(text: &str) -> Vec<&'static str> {
    scan(&normalise(text)).1
}

/// The kinds of secret in any string of a JSON value (keys included), each once.
pub fn detect_json(value: &serde_json::Value) -> Vec<&'static str> {
    fn add(s: &str, kinds: &mut Vec<&'static str>) {
        for k in detect(s) {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    fn walk(v: &serde_json::Value, kinds: &mut Vec<&'static str>) {
        match v {
            serde_json::Value::String(s) => add(s, kinds),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, kinds)),
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    add(k, kinds);
                    walk(x, kinds);
                }
            }
            _ => {}
        }
    }
    let mut kinds = Vec::new();
    walk(value, &mut kinds);
    kinds
}

/// `text` with every secret replaced by `[REDACTED:<kind>]`; borrowed when nothing matched.
/// Text that hid a key behind invisible characters comes back without them.
pub fn redact(text: &str) -> Cow<'_, str> {
    match normalise(text) {
        Cow::Borrowed(t) => scan(t).0,
        Cow::Owned(t) => {
            let (red, kinds) = scan(&t);
            if kinds.is_empty() {
                Cow::Borrowed(text)
            } else {
                Cow::Owned(red.into_owned())
            }
        }
    }
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
        assert_eq!(PATTERNS.len(), 14);
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
    fn new_kinds_glued_and_split_keys() {
        let cases = [
            (format!("hf_{}", "aB3".repeat(12)), "huggingface-token"),
            (format!("glpat-{}", "xY9_".repeat(5)), "gitlab-token"),
            (format!("npm_{}", "Ab1".repeat(12)), "npm-token"),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string(),
                "aws-secret-key",
            ),
            (
                format!("token=xsk-ant-api03-{}", "a".repeat(40)),
                "anthropic-key",
            ),
            (
                format!("sk-ant-\0api03-{}", "a".repeat(40)),
                "anthropic-key",
            ),
            (
                format!("sk-ant-\u{200B}api03-{}", "a".repeat(40)),
                "anthropic-key",
            ),
            (format!("gh\u{FEFF}p_{}", "A1b2".repeat(10)), "github-token"),
            ("keyAKIAABCDEFGHIJKLMNOPx".to_string(), "aws-access-key"),
        ];
        for (text, kind) in cases {
            assert!(
                detect(&text).contains(&kind),
                "{text:?} → {:?}",
                detect(&text)
            );
            assert!(
                redact(&text).contains(&format!("[REDACTED:{kind}]")),
                "{text:?}"
            );
        }
        let v = serde_json::json!({"a": [{"deep": format!("hf_{}", "z".repeat(34))}]});
        assert_eq!(detect_json(&v), vec!["huggingface-token"]);
    }

    #[test]
    fn ordinary_text_is_clean() {
        for t in [
            "fix #12 and run cargo test",
            "commit 3f2a9c1e4b5d6a7b8c9d0e1f2a3b4c5d6e7f8a9b",
            "sk- is a prefix",
            "see https://example.com/a-b-c",
            "the hf_ prefix and npm_ and glpat- alone",
            "secret key rotation is due",
            "zero\u{200B}width but harmless",
        ] {
            assert!(detect(t).is_empty(), "{t}");
            assert!(matches!(redact(t), Cow::Borrowed(_)));
        }
    }
}
