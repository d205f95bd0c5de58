//! Making text safe to show and to send: the one sanitiser, the one ANSI stripper, the one URL
//! masker and the one query-value encoder of the workspace.
//!
//! Titles, names, statuses and notes are written by any client; printed raw, an ESC sequence in
//! a card title can clear the operator's screen or retitle the terminal, and a bidi override can
//! make a line read differently from what it is. Every human-facing renderer (and the hooks
//! that hand peer text to a model) prints through [`sanitize`].

use std::borrow::Cow;

/// Whether `c` is dropped from terminal output: C0 controls other than newline and tab, DEL,
/// C1 controls, the zero-width space and non-joiner, and the bidirectional marks, embedding,
/// override and isolate controls.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'
                | '\u{200C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` without terminal control and bidi characters (newlines and tabs are kept); borrowed
/// when there was nothing to remove.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    if text.chars().any(unsafe_char) {
        Cow::Owned(text.chars().filter(|c| !unsafe_char(*c)).collect())
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` without ANSI escape sequences: CSI (`ESC [ … final letter`, colours and cursor
/// moves) and OSC (`ESC ] … BEL` or `ESC ] … ESC \\`, terminal titles and links).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(d) = chars.next() {
                    if d == '\u{7}' {
                        break;
                    }
                    if d == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `scheme://user:secret@host/…` → `scheme://user:***@host/…`, for messages, logs and
/// `/health`; a URL without a password is returned as is.
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((cred, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match cred.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Percent-encode a query value: every byte but the unreserved ones (`A-Z a-z 0-9 - _ . ~`,
/// the unreserved set of RFC 3986) becomes `%XX`.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_keep_only_unreserved_bytes() {
        assert_eq!(url_encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(url_encode("s 1:x/y&z=é"), "s%201%3Ax%2Fy%26z%3D%C3%A9");
    }

    #[test]
    fn ansi_and_urls() {
        assert_eq!(strip_ansi("\u{1b}[32m INFO\u{1b}[0m x"), " INFO x");
        assert_eq!(
            strip_ansi("a\u{1b}]0;title\u{7}b\u{1b}]8;;u\u{1b}\\c"),
            "abc"
        );
        assert_eq!(mask_url("postgres://a:b@h/d"), "postgres://a:***@h/d");
        assert_eq!(mask_url("postgres://a@h/d"), "postgres://a@h/d");
        assert_eq!(mask_url("plain"), "plain");
    }

    #[test]
    fn strips_escapes_and_bidi_keeps_text() {
        let hostile = "a\x1b[2J\x1b]0;owned\x07b\0c\u{202E}d\u{2066}e\u{9b}f\r\x7f";
        assert_eq!(sanitize(hostile), "a[2J]0;ownedbcdef");
        assert!(matches!(
            sanitize("plain\ttext\nline é ✓"),
            Cow::Borrowed(_)
        ));
    }
}
