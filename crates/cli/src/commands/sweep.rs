//! `trantor sweep`: move in-progress cards that nobody has touched for a while to the stale
//! lane (`POST /sweep`, docs/protocol.md §15.2) — the broom for a live seat that forgot its
//! card, which the hub's own reaper (it stales only cards whose owner is offline) leaves alone.
//! It previews first and changes nothing without `--yes`.

use super::identity::OwnerArgs;
use super::invite::operator_client;
use super::{HubResult, print_json, usage};
use std::process::ExitCode;
use trantor_proto::ClientError;
use trantor_proto::lanes::{SweepReply, SweepRequest};

pub(crate) const SWEEP_HELP: &str = concat!(
    "\
Finds this project's doing and testing cards idle longer than --older and, with --yes, moves
them to the stale lane (re-queue or close them from the board). The hub refuses while a seat
holding one of them is working, and says which. Owner-signed, like every owner route.

Examples:
  trantor sweep                    preview this project's stuck cards
  trantor sweep --yes              move them to stale
  trantor sweep --older 2h         a different idle threshold (ms, s, m, h, d; a bare number is minutes)
  trantor sweep --all-projects     every board on the hub

",
    exit_codes!()
);

/// `trantor sweep` options.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Idle threshold: a card untouched longer than this is a candidate.
    #[arg(long, short = 'o', default_value = "30m", value_name = "DURATION")]
    pub older: String,
    /// Move the candidates (without it, only preview).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Every project on the hub, not only this one.
    #[arg(long, visible_alias = "all")]
    pub all_projects: bool,
    #[command(flatten)]
    pub owner: OwnerArgs,
}

/// A duration in ms from `90s`, `30m`, `2h`, `1d`, `500ms` or a bare number of minutes.
pub(crate) fn parse_duration_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" => 1.0,
        "s" => 1_000.0,
        "" | "m" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (n * mult).round();
    (ms <= i64::MAX as f64).then_some(ms as i64)
}

/// An age as the sweep prints it: minutes, hours past 90 minutes, days past a day.
pub(crate) fn fmt_age(ms: i64) -> String {
    let m = (ms as f64 / 60_000.0).round() as i64;
    if m >= 1440 {
        format!("{}d", m / 1440)
    } else if m >= 90 {
        format!("{}h", m / 60)
    } else {
        format!("{m}m")
    }
}

/// Run `trantor sweep`.
pub(crate) async fn sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let older_ms = parse_duration_ms(&a.older).ok_or_else(|| {
        usage(format!(
            "--older {:?}: give a duration like 90s, 30m, 2h or 1d",
            a.older
        ))
    })?;
    let (id, hub) = operator_client(&a.owner.common, a.owner.owner.as_deref())?;
    let project = (!a.all_projects).then(|| id.project.clone());
    let req = |dry_run: bool| SweepRequest {
        project: project.clone(),
        older_ms: Some(older_ms),
        dry_run,
        by: Some("cli-sweep".into()),
    };
    let preview: SweepReply = hub.post("/sweep", &req(true)).await.hub(&hub)?;
    let json = a.owner.common.json;
    if !json && !say_preview(&preview, project.as_deref(), older_ms) {
        return Ok(ExitCode::SUCCESS);
    }
    if !a.yes {
        if json {
            print_json(&preview)?;
        } else if !preview.candidates.is_empty() {
            say!("");
            say!(
                "  {} card(s) would move to the stale lane. Re-run to confirm:",
                preview.candidates.len()
            );
            say!(
                "    trantor sweep{}{} --yes",
                if a.all_projects {
                    " --all-projects"
                } else {
                    ""
                },
                if a.older != "30m" {
                    format!(" --older {}", a.older)
                } else {
                    String::new()
                }
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if preview.candidates.is_empty() {
        if json {
            print_json(&preview)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    match hub.post::<_, SweepReply>("/sweep", &req(false)).await {
        Ok(done) => {
            if json {
                print_json(&done)?;
            } else {
                say!("");
                say!(
                    "  ✓ swept {} card(s) → stale. Re-queue or close them on the board.",
                    done.swept.unwrap_or(0)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(ClientError::Http {
            status: 409, body, ..
        }) => {
            let working = body
                .extra
                .get("working")
                .and_then(|w| w.as_array())
                .map(|w| {
                    w.iter()
                        .filter_map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            Err(anyhow::anyhow!(
                "the hub swept nothing: {} ({working}). Wait for those seats to finish, or \
                 narrow the sweep with --older.",
                body.error
            ))
        }
        Err(e) => Err(e).hub(&hub),
    }
}

/// The dry run's candidates for a person (`project`: none for every project); false when
/// there are none (and it said so).
fn say_preview(preview: &SweepReply, project: Option<&str>, older_ms: i64) -> bool {
    let scope = match project {
        Some(p) => format!("project {p:?}"),
        None => "every project".to_string(),
    };
    say!("");
    say!("🧹 trantor sweep — {scope} · idle > {}", fmt_age(older_ms));
    say!("{}", "─".repeat(52));
    if preview.candidates.is_empty() {
        say!("  nothing stuck — every in-progress card is fresh.");
        return false;
    }
    for c in &preview.candidates {
        let title: String = c.title.chars().take(58).collect();
        let who = if c.assignee.is_empty() {
            "?"
        } else {
            &c.assignee
        };
        let proj = if project.is_none() {
            format!(" · {}", c.project)
        } else {
            String::new()
        };
        say!(
            "  #{} [{}] {title} · {who} · idle {}{proj}",
            c.id,
            c.status,
            fmt_age(c.age_ms)
        );
    }
    if !preview.working.is_empty() {
        say!(
            "  working now (the hub will refuse until they finish): {}",
            preview.working.join(", ")
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_or_are_refused() {
        for (given, want) in [
            ("30m", Some(1_800_000)),
            ("30", Some(1_800_000)),
            ("2h", Some(7_200_000)),
            ("1.5h", Some(5_400_000)),
            ("90s", Some(90_000)),
            ("500ms", Some(500)),
            ("1d", Some(86_400_000)),
            (" 2H ", Some(7_200_000)),
            ("0", Some(0)),
            ("", None),
            ("h", None),
            ("-5m", None),
            ("5w", None),
            ("5 m", Some(300_000)),
        ] {
            assert_eq!(parse_duration_ms(given), want, "{given:?}");
        }
    }

    #[test]
    fn ages_read_as_people_say_them() {
        for (ms, want) in [
            (0, "0m"),
            (29 * 60_000, "29m"),
            (89 * 60_000, "89m"),
            (90 * 60_000, "1h"),
            (23 * 3_600_000, "23h"),
            (3 * 86_400_000, "3d"),
        ] {
            assert_eq!(fmt_age(ms), want, "{ms}");
        }
    }
}
