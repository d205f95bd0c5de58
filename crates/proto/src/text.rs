//! Making text from the hub safe to print on a terminal.
//!
//! Titles, names, statuses and notes are written by any client; printed raw, an ESC sequence in
//! a card title can clear the operator's screen or retitle the terminal, and a bidi override can
//! make a line read differently from what it is. Every human-facing renderer prints through
//! [`sanitize`].

use std::borrow::Cow;

/// Whether `c` is dropped from terminal output: C0 controls other than newline and tab, DEL,
/// C1 controls, and the bidirectional embedding, override and isolate controls.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
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

#[cfg(test)]
mod tests {
    use super::*;

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
