//! "Fire up the crew" from the person's own session: the Advisor (`POST /advise`,
//! `relay_advise`, `trantor advise`, `trantor profile`), against a real hub and the real agent
//! CLIs pinned by `tests-compat/install-real-clis.sh`.

mod common;

use common::{Hub, bin, hub_request, real_clis_bin};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// A PATH with the real CLIs first and the system's tools (node, git) after.
fn path_with(bin_dir: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display())
}

fn trantor(home: &Path, url: &str, path: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("HOME", home)
        .env("RELAY_URL", url)
        .env("RELAY_SESSION", "me:shop")
        .env("RELAY_PROJECT", "shop")
        .env_remove("AGENT_BUS_DIR")
        .env("PATH", path)
        .env("TRANTOR_LOG", "warn")
        .output()
        .expect("run trantor")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_advise_through_trantor_mcp_routes_three_packages_over_the_installed_clis() {
    let Some(clis) = real_clis_bin() else { return };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let path = path_with(&clis);
    // The person's plans: Claude on Max, Codex on Plus; OpenCode left out counts as api.
    let o = trantor(
        home.path(),
        &hub.url(),
        &path,
        &["profile", "set", "claude=max", "codex=plus"],
    );
    assert!(o.status.success(), "{}", text(&o));

    let (url, h, p) = (hub.url(), home.path().to_path_buf(), path.clone());
    let cmd = tokio::process::Command::new(bin()).configure(move |c| {
        c.arg("mcp")
            .env("RELAY_URL", &url)
            .env("RELAY_SESSION", "me:shop")
            .env("RELAY_PROJECT", "shop")
            .env_remove("AGENT_BUS_DIR")
            .env_remove("TRANTOR_SEAT")
            .env("HOME", &h)
            .env("PATH", &p)
            .env("TRANTOR_LOG", "warn");
    });
    let client = ().serve(TokioChildProcess::new(cmd).expect("spawn")).await.expect("handshake");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "relay_advise"));
    let args = json!({
        "task": "asteroids game",
        "packages": [
            {"title": "engine", "difficulty": "hard", "files": ["src/engine.rs"], "drill": "the ship flies"},
            {"title": "hud", "difficulty": "medium"},
            {"title": "readme", "difficulty": "easy"},
        ],
    });
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        client.call_tool(
            CallToolRequestParams::new("relay_advise")
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        ),
    )
    .await
    .expect("relay_advise answered")
    .expect("protocol");
    let out: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_ne!(r.is_error, Some(true), "{out}");
    assert!(
        out.contains("| # | package | difficulty | route |"),
        "{out}"
    );
    for row in [
        "| 1 | engine | hard |",
        "| 2 | hud | medium |",
        "| 3 | readme | easy |",
    ] {
        assert!(out.contains(row), "missing {row} in {out}");
    }
    let json_part = out
        .split_once("ready relay_task_add calls):\n")
        .map(|(_, j)| j)
        .unwrap_or("");
    let advice: Value = serde_json::from_str(json_part).expect("advice JSON");
    assert_eq!(advice["mode"], "crew", "{out}");
    let routes = advice["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 3);
    // Every route goes to a CLI installed in this test, with its model.
    for r in routes {
        let route = r["route"].as_str().unwrap_or("");
        let agent = route.split(':').next().unwrap_or("");
        assert!(["claude", "codex", "opencode"].contains(&agent), "{route}");
        assert!(!r["reason"].as_str().unwrap_or("").is_empty());
    }
    // Subscriptions first: the hard package goes to Claude on Max at no marginal cost.
    assert_eq!(routes[0]["route"], "claude:claude-opus-4-5", "{out}");
    assert_eq!(routes[0]["chargedUsd"], 0.0);
    assert_eq!(
        advice["seats"]["why"].as_str().map(|s| s.contains("seat")),
        Some(true)
    );
    let cards = advice["card_args"].as_array().expect("card args");
    assert_eq!(cards.len(), 3);
    assert_eq!(cards[0]["tool"], "relay_task_add");
    assert_eq!(cards[0]["args"]["assignee"], "claude:shop");
    assert_eq!(cards[0]["args"]["drill"], "the ship flies");
    // The card args are real relay_task_add calls: the first one adds its card.
    let add = client
        .call_tool(
            CallToolRequestParams::new("relay_task_add")
                .with_arguments(cards[0]["args"].as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("task add");
    assert_ne!(add.is_error, Some(true));
    let _ = client.cancel().await;
}

#[test]
fn advise_refuses_what_it_cannot_route_and_profile_refuses_unknown_plans() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let path = "/usr/local/bin:/usr/bin:/bin";
    let o = trantor(
        home.path(),
        &hub.url(),
        path,
        &["profile", "set", "claude=gold"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("unknown plan 'gold' for claude"),
        "{}",
        text(&o)
    );
    assert!(
        !home.path().join(".agent-bus/profile.json").exists(),
        "nothing written"
    );
    let o = trantor(home.path(), &hub.url(), path, &["profile", "show"]);
    assert!(text(&o).contains("no plan profile yet"), "{}", text(&o));

    // A package with no difficulty, on the command line and through the route.
    let o = trantor(home.path(), &hub.url(), path, &["advise", "engine"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no difficulty"), "{}", text(&o));
    let (code, body) = hub_request(
        hub.port,
        "POST",
        "/advise",
        Some(&json!({"project": "shop", "task": "x", "packages": [{"title": "engine"}]})),
    )
    .expect("hub answers");
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("\"engine\""),
        "{body}"
    );

    // No agent CLI on PATH: solo, said so.
    let o = trantor(
        home.path(),
        &hub.url(),
        path,
        &["advise", "--json", "hard:engine", "easy:docs"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let a: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(a["mode"], "solo");
    assert!(
        a["why"][0].as_str().unwrap_or("").contains("no agent CLI"),
        "{a}"
    );
    assert_eq!(a["seats"]["count"], 0);
}
