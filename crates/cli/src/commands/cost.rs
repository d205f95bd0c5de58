//! `trantor cost`: what the crew's turns cost, per card, seat, day or credential
//! (docs/protocol.md §7.6).

use super::{Common, HubResult, print_json, table, usage};
use std::process::ExitCode;
use trantor_proto::{CostReply, CostSummary, now_ms};

pub(crate) const COST_HELP: &str = concat!(
    "\
Every turn a seat runs is recorded on the hub with the tokens and dollars its CLI reported
(Claude Code's own dollars; Codex's tokens priced from the runner's table, marked ~). A turn
whose CLI reported nothing readable still counts, as unknown.

Examples:
  trantor cost                       this project's cost per card
  trantor cost --card 12             one card
  trantor cost --seat claude:web     one seat, per card
  trantor cost --since 7d --by day   the last week, per day
  trantor cost --all --by seat       every project, per seat

",
    exit_codes!()
);

/// `trantor cost` options.
#[derive(Debug, clap::Args)]
pub struct CostArgs {
    /// Only turns that worked on this card.
    #[arg(long, value_name = "N")]
    pub card: Option<String>,
    /// Only this seat's turns (its session, e.g. claude:web).
    #[arg(long, value_name = "SESSION")]
    pub seat: Option<String>,
    /// Only turns since then: 7d, 24h, 30m, a date (2026-12-01) or ms since the epoch.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Group per card, seat, day or credential [default: card].
    #[arg(long, default_value = "card", value_parser = ["card", "seat", "day", "credential"])]
    pub by: String,
    /// Every project's turns, not only this project's.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `--since` as ms since the epoch: a duration back from `now`, a UTC date, or ms.
pub(crate) fn parse_since(v: &str, now: i64) -> Option<i64> {
    let v = v.trim();
    if let Some((y, rest)) = v.split_once('-')
        && let Some((m, d)) = rest.split_once('-')
    {
        let (y, m, d) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
        if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
            return None;
        }
        return Some(trantor_proto::date::days_from_civil(y, m, d) * 86_400_000);
    }
    let unit = |s: &str, per: i64| s.parse::<i64>().ok().map(|n| now - n.max(0) * per);
    match v.chars().last()? {
        'd' => unit(&v[..v.len() - 1], 86_400_000),
        'h' => unit(&v[..v.len() - 1], 3_600_000),
        'm' => unit(&v[..v.len() - 1], 60_000),
        _ => v.parse::<i64>().ok().filter(|n| *n >= 0),
    }
}

/// Dollars for a person: `$0.0123`, `~$1.20` when estimated, `?` when none is known.
pub(crate) fn dollars(c: &CostSummary) -> String {
    if c.turns > 0 && c.unknown == c.turns {
        return "?".into();
    }
    let d = if c.usd >= 1.0 {
        format!("${:.2}", c.usd)
    } else {
        format!("${:.4}", c.usd)
    };
    if c.estimated { format!("~{d}") } else { d }
}

/// A token count for a person: `1234`, `12.3k`, `4.5M`.
pub(crate) fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

pub(crate) async fn cost(a: CostArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let mut q: Vec<(&str, String)> = vec![("by", a.by.clone())];
    if let Some(c) = &a.card {
        let n: i64 = c
            .trim()
            .trim_start_matches('#')
            .parse()
            .map_err(|_| usage(format!("--card wants a card id, not {c:?}")))?;
        q.push(("card", n.to_string()));
    }
    if let Some(s) = &a.seat {
        q.push(("seat", s.trim().to_string()));
    }
    if let Some(s) = &a.since {
        let ms = parse_since(s, now_ms()).ok_or_else(|| {
            usage(format!(
                "--since wants 7d, 24h, 30m, a date or ms, not {s:?}"
            ))
        })?;
        q.push(("since", ms.to_string()));
    }
    // A card or a seat names its own project; otherwise this project's, unless --all.
    if !a.all && a.card.is_none() && a.seat.is_none() {
        q.push(("project", id.project.clone()));
    }
    let reply: CostReply = hub.cost(&q).await.hub(&hub)?;
    if a.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    if reply.total.turns == 0 {
        say!("no turns recorded yet for this selection");
        return Ok(ExitCode::SUCCESS);
    }
    let label = |k: &str| match a.by.as_str() {
        "card" if k == "0" => "(no card)".to_string(),
        "card" => format!("#{k}"),
        "credential" if k.is_empty() => "(none named)".to_string(),
        _ => k.to_string(),
    };
    let mut groups = reply.groups.clone();
    if a.by == "day" {
        groups.sort_by(|x, y| x.key.cmp(&y.key));
    }
    let row = |key: String, c: &CostSummary| {
        vec![
            key,
            c.turns.to_string(),
            tokens(c.tokens_in),
            tokens(c.tokens_out),
            dollars(c),
            if c.unknown > 0 {
                format!("{} unknown", c.unknown)
            } else {
                String::new()
            },
        ]
    };
    let mut rows: Vec<Vec<String>> = groups.iter().map(|g| row(label(&g.key), &g.cost)).collect();
    rows.push(row("total".into(), &reply.total));
    let head = a.by.to_uppercase();
    say!(
        "{}",
        table::render(&[head.as_str(), "TURNS", "IN", "OUT", "USD", ""], &rows)
    );
    if reply.total.estimated {
        say!(
            "~ some dollars are estimated from the runner's price table (the CLI reported tokens only)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_dates_and_ms() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_since("7d", now), Some(3 * 86_400_000));
        assert_eq!(parse_since("24h", now), Some(9 * 86_400_000));
        assert_eq!(parse_since("30m", now), Some(now - 1_800_000));
        assert_eq!(parse_since("1970-01-03", now), Some(2 * 86_400_000));
        assert_eq!(parse_since("12345", now), Some(12345));
        for bad in ["", "soon", "7w", "2026-13-01", "-5", "d"] {
            assert_eq!(parse_since(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn dollars_say_estimated_and_unknown() {
        let c = |usd: f64, turns: u64, unknown: u64, estimated: bool| CostSummary {
            usd,
            turns,
            unknown,
            estimated,
            ..Default::default()
        };
        assert_eq!(dollars(&c(0.01234, 1, 0, false)), "$0.0123");
        assert_eq!(dollars(&c(1.2, 2, 1, true)), "~$1.20");
        assert_eq!(dollars(&c(0.0, 2, 2, false)), "?");
        assert_eq!(tokens(1234), "1234");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(4_500_000), "4.5M");
    }
}
