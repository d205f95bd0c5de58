//! `trantor new <name>` against a real hub: a git folder on `main` with the
//! `.trantor/project.json` marker, the brief in the repository and on the hub, a first card; the
//! folder moved and renamed is still the same project (the resolver reads the marker first); a
//! hub that is down is said plainly; bad names and briefs leave nothing behind.

mod common;

use common::{Hub, bin, free_port, hub_request, url_encode};
use std::path::Path;
use std::process::{Command, Stdio};

fn trantor(cwd: &Path, home: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("AGENT_BUS_DIR")
        .env_remove("RELAY_DATA_DIR")
        .env_remove("RELAY_PROJECT")
        .env_remove("RELAY_SESSION")
        .env_remove("RELAY_URL")
        .env_remove("TRANTOR_PROJECTS_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run trantor");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = trantor_proto::git::git_command(dir)
        .args(args)
        .output()
        .expect("git");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn new_makes_a_marked_git_project_posts_the_brief_and_a_first_card() {
    let hub = Hub::start();
    let url = hub.url();
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path().join("home");
    let code_dir = tmp.path().join("code");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&code_dir).expect("code");
    let brief = tmp.path().join("brief.md");
    std::fs::write(
        &brief,
        "# Shop\n\nA small shop with a cart and a checkout.\n",
    )
    .expect("brief");

    let (code, out) = trantor(
        tmp.path(),
        &home,
        &[
            "new",
            "shop",
            "--brief",
            brief.to_str().expect("utf-8"),
            "--dir",
            code_dir.to_str().expect("utf-8"),
            "--url",
            &url,
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No session was started"), "{out}");
    let dir = code_dir.join("shop");
    assert_eq!(git(&dir, &["branch", "--show-current"]), "main");
    assert_eq!(git(&dir, &["status", "--porcelain"]), "", "all committed");
    let marker: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(".trantor/project.json")).expect("marker"),
    )
    .expect("json");
    assert_eq!(marker["id"], "shop");
    assert!(
        std::fs::read_to_string(dir.join("BRIEF.md"))
            .expect("PRD")
            .contains("a cart and a checkout")
    );

    let (status, project) =
        hub_request(hub.port, "GET", "/project?project=shop", None).expect("project");
    assert_eq!(status, 200, "{project}");
    assert!(
        project["brief"]
            .as_str()
            .unwrap_or("")
            .contains("a cart and a checkout"),
        "{project}"
    );
    let (_, tasks) = hub_request(
        hub.port,
        "GET",
        &format!("/tasks?project={}", url_encode("shop")),
        None,
    )
    .expect("tasks");
    assert!(tasks.to_string().contains("genesis: shop"), "{tasks}");

    // Moved and renamed, the checkout is still the project `shop`.
    let moved = tmp.path().join("elsewhere-renamed");
    std::fs::rename(&dir, &moved).expect("move");
    let (code, board) = trantor(&moved, &home, &["board", "--json", "--url", &url]);
    assert_eq!(code, 0, "{board}");
    assert!(board.contains("genesis: shop"), "{board}");
}

#[test]
fn new_with_the_hub_down_says_so_and_still_makes_the_folder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let down = format!("http://127.0.0.1:{}", free_port());
    let (code, out) = trantor(tmp.path(), tmp.path(), &["new", "web", "--url", &down]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("NOT on the hub"), "{out}");
    assert!(out.contains("cannot reach"), "{out}");
    assert!(tmp.path().join("web/.trantor/project.json").is_file());
}

#[test]
fn bad_names_missing_briefs_and_used_folders_are_refused_leaving_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let down = format!("http://127.0.0.1:{}", free_port());
    for name in ["../up", "-x", "a b", ""] {
        let (code, out) = trantor(tmp.path(), tmp.path(), &["new", name, "--url", &down]);
        assert_eq!(code, 2, "{name}: {out}");
    }
    let (code, out) = trantor(
        tmp.path(),
        tmp.path(),
        &[
            "new",
            "api",
            "--brief",
            "/nonexistent/brief.md",
            "--url",
            &down,
        ],
    );
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot read the brief"), "{out}");
    assert!(!tmp.path().join("api").exists());
    std::fs::create_dir_all(tmp.path().join("used")).expect("mkdir");
    std::fs::write(tmp.path().join("used/file"), "x").expect("write");
    let (code, out) = trantor(tmp.path(), tmp.path(), &["new", "used", "--url", &down]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not empty"), "{out}");
}
