//! `trantor ui`: open the hub's dashboard in the browser, or print where it is.

use super::{Common, HubResult, print_json, usage};
use std::process::{ExitCode, Stdio};
use trantor_proto::text::url_encode;

pub(crate) const UI_HELP: &str = concat!(
    "\
The dashboard is served by the hub itself (board, seats, flow, timeline, live). This verb finds
the hub the same way every other verb does, checks that it answers, and opens the page for this
project in the browser (xdg-open, or open on macOS) when there is a display. It always prints the
URL, so on a headless machine or over ssh you can open it yourself (forward the port first).

The page acts (adds and moves cards, posts messages) as the session given by --session or
resolved as usual; you can change it in the page's \"Acting as\" box.

Examples:
  trantor ui                               this project's dashboard
  trantor ui --project demo --no-open      print the URL only
  trantor demo --keep && RELAY_URL=<the demo's hub> trantor ui --project demo

",
    exit_codes!()
);

/// `trantor ui` options.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// Print the URL without trying to open a browser.
    #[arg(long)]
    pub no_open: bool,
    #[command(flatten)]
    pub common: Common,
}

/// The dashboard URL for `project`, acting as `session`.
pub(crate) fn dashboard_url(hub: &str, project: &str, session: &str) -> String {
    format!(
        "{}/ui?project={}&as={}",
        hub.trim_end_matches('/'),
        url_encode(project),
        url_encode(session)
    )
}

/// The program that opens a URL in the person's browser here, if there is one and a display.
fn opener() -> Option<std::path::PathBuf> {
    if cfg!(target_os = "macos") {
        return super::find_on_path("open");
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if !display {
        return None;
    }
    super::find_on_path("xdg-open")
}

pub(crate) async fn ui(a: UiArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let health = hub.health().await.hub(&hub)?;
    let auth = health.auth_mode.as_str();
    if auth != "off" {
        // The page has no way yet to carry a person's signed identity; say so instead of
        // opening a page whose every action the hub would refuse.
        return Err(usage(format!(
            "the hub at {} enforces identity (authMode {auth}); the dashboard cannot act with a \
             signed identity yet",
            hub.base()
        )));
    }
    let url = dashboard_url(hub.base(), &id.project, &id.session);
    let opened = match (a.no_open, opener()) {
        (false, Some(prog)) => std::process::Command::new(&prog)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .is_ok(),
        _ => false,
    };
    if a.common.json {
        print_json(&serde_json::json!({ "url": url, "opened": opened }))?;
    } else if opened {
        say!("opened the dashboard: {url}");
    } else {
        say!("the dashboard: {url}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_carries_project_and_session_encoded() {
        assert_eq!(
            dashboard_url("http://127.0.0.1:4477/", "my proj", "human:my proj"),
            "http://127.0.0.1:4477/ui?project=my%20proj&as=human%3Amy%20proj"
        );
    }
}
