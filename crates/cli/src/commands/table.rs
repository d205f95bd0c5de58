//! A plain aligned text table for terminal output.

/// Width the last column is cut to, so rows stay on one line in an ordinary terminal.
const LAST_COLUMN_MAX: usize = 72;

fn width(s: &str) -> usize {
    s.chars().count()
}

fn cut(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Render `rows` under `headers`, columns padded to their widest cell; the last column is cut
/// to a readable width. Newlines inside cells are flattened to spaces.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let clean: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            (0..n)
                .map(|i| {
                    let cell = r.get(i).map(String::as_str).unwrap_or("");
                    let flat = cell.replace(['\n', '\r', '\t'], " ");
                    if i + 1 == n {
                        cut(&flat, LAST_COLUMN_MAX)
                    } else {
                        flat
                    }
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for r in &clean {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(width(c));
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == n {
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(widths[i] - width(c) + 2));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(headers.to_vec())];
    for r in &clean {
        out.push(line(r.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_and_cuts() {
        let rows = vec![
            vec!["1".to_string(), "doing".to_string(), "x".repeat(100)],
            vec![
                "22".to_string(),
                "todo".to_string(),
                "short\nline".to_string(),
            ],
        ];
        let t = render(&["ID", "STATUS", "TITLE"], &rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ID  STATUS  TITLE");
        assert!(lines[1].starts_with("1   doing   x"));
        assert!(lines[1].ends_with('…'));
        assert_eq!(lines[2], "22  todo    short line");
    }
}
