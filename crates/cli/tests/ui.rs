//! The dashboard in a real browser: Debian's Chromium, headless, driven over WebDriver
//! (chromedriver + fantoccini) against a real hub on a temporary directory and a free port.
//!
//! Without chromium and chromedriver the tests skip with a message; under `CI=true` they fail.
//! Set `TRANTOR_UI_SHOTS=<dir>` to save a screenshot of each view there (docs/ui-*.png are made
//! this way).

mod common;

use common::{GroupChild, Hub, free_port};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one condition in the page may take to come true (a deadline, not a timing).
const GUARD: Duration = Duration::from_secs(30);

fn find_exe(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push("/usr/bin".into());
    dirs.push("/usr/lib/chromium".into());
    for n in names {
        for d in &dirs {
            let p = d.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// A headless Chromium session; the driver (and its browser) die with it.
struct Browser {
    client: Client,
    _driver: GroupChild,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Start chromedriver and a browser, or `None` (with a message) when they are not installed.
    async fn start(test: &str) -> Option<Browser> {
        let chromium = find_exe(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = find_exe(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let msg = format!(
                "{test}: chromium and chromedriver are needed (apt-get install chromium \
                 chromium-driver)"
            );
            common::skip_or_fail(&msg);
            return None;
        };
        // Tests run in parallel and each picks a free port for its driver; another process can
        // take the port between the pick and the driver's bind, so a driver that answers and
        // then refuses the session is started again on a fresh port (three tries).
        let mut attempt = 0;
        let (client, driver_proc, profile) = loop {
            attempt += 1;
            let port = free_port();
            let mut cmd = Command::new(&driver);
            cmd.arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut driver_proc = GroupChild::spawn(cmd);
            let deadline = Instant::now() + GUARD;
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "chromedriver did not listen");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let profile = tempfile::tempdir().expect("profile dir");
            let mut caps = serde_json::Map::new();
            caps.insert(
                "goog:chromeOptions".into(),
                json!({
                    "binary": chromium,
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", "--window-size=1400,1000",
                        format!("--user-data-dir={}", profile.path().display()),
                    ],
                }),
            );
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps)
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break (client, driver_proc, profile),
                Err(e) if attempt < 3 => {
                    eprintln!("{test}: webdriver session on port {port} failed ({e}); retrying");
                    driver_proc.kill_group();
                }
                Err(e) => panic!("webdriver session: {e}"),
            }
        };
        Some(Browser {
            client,
            _driver: driver_proc,
            _profile: profile,
        })
    }

    /// Evaluate a JavaScript expression in the page.
    async fn eval(&self, expr: &str) -> Value {
        self.client
            .execute(&format!("return ({expr});"), vec![])
            .await
            .unwrap_or(Value::Null)
    }

    /// Wait until a JavaScript expression is truthy in the page.
    async fn until(&self, what: &str, expr: &str) {
        let deadline = Instant::now() + GUARD;
        loop {
            let v = self.eval(expr).await;
            let ok = match &v {
                Value::Bool(b) => *b,
                Value::Null => false,
                Value::Number(n) => n.as_f64().unwrap_or(0.0) != 0.0,
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if ok {
                return;
            }
            if Instant::now() > deadline {
                let notice = self
                    .eval("document.getElementById('notice').textContent")
                    .await;
                panic!("timed out waiting for {what} (`{expr}` = {v}; notice: {notice})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Open the dashboard and wait for its first render.
    async fn open(&self, hub: &Hub, project: &str, view: &str) {
        let url = format!("{}/?project={project}&as=human:{project}#{view}", hub.url());
        self.client.goto(&url).await.expect("goto");
        self.until("the page to load", "document.body.dataset.ready === '1'")
            .await;
        // A mark that a reload would wipe: the tests check it survives every live update.
        self.eval("(window.__noReload = 1)").await;
    }

    /// The page never reloaded since `open`, and the browser blocked nothing it tried to load.
    async fn no_reload_happened(&self) {
        assert_eq!(
            self.eval("window.__noReload").await,
            json!(1),
            "the page reloaded"
        );
        assert_eq!(
            self.eval("window.trantorUi.stats.cspViolations").await,
            json!([]),
            "Content-Security-Policy violations"
        );
    }

    async fn shot(&self, name: &str) {
        let Some(dir) = std::env::var_os("TRANTOR_UI_SHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(&dir).expect("shots dir");
        std::fs::write(PathBuf::from(dir).join(format!("{name}.png")), png).expect("write shot");
    }
}

/// A JSON client for the hub under test.
struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(hub: &Hub) -> Api {
        trantor_proto::tls::install_default_provider();
        Api {
            base: hub.url(),
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("post");
        let st = r.status().as_u16();
        (st, r.json().await.unwrap_or(Value::Null))
    }

    async fn ok(&self, path: &str, body: Value) -> Value {
        let (st, v) = self.post(path, body.clone()).await;
        assert_eq!(st, 200, "POST {path} {body} -> {v}");
        v
    }

    async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    async fn card(&self, project: &str, title: &str, extra: Value) -> i64 {
        let mut body =
            json!({ "title": title, "project": project, "by": format!("lead:{project}") });
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        self.ok("/task", body).await["task"]["id"]
            .as_i64()
            .expect("card id")
    }
}

/// The column a card sits in, as the page shows it.
fn column_of(id: i64) -> String {
    format!(
        "(() => {{ const c = document.querySelector('#board li.card[data-id=\"{id}\"]'); \
         return c ? c.closest('ol').dataset.col : ''; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_updates_live_and_shows_a_refused_move() {
    let Some(b) = Browser::start("board_updates_live_and_shows_a_refused_move").await else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    let p = "acme";
    let first = api.card(p, "seed card", json!({})).await;
    b.open(&hub, p, "board").await;
    b.until(
        "the seed card in To do",
        &format!("{} === 'todo'", column_of(first)),
    )
    .await;

    // A card added through the API appears without a reload.
    let id = api
        .card(
            p,
            "wire the parser",
            json!({"assignee": "dev:acme", "checklist": ["lex", "parse"]}),
        )
        .await;
    b.until(
        "the new card on the board",
        &format!("{} === 'todo'", column_of(id)),
    )
    .await;
    b.until(
        "the checklist progress on the card",
        &format!(
            "document.querySelector('#board li.card[data-id=\"{id}\"]').textContent.includes('0/2')"
        ),
    )
    .await;
    // Moved through the API: it changes column.
    api.ok(
        "/task/update",
        json!({"id": id, "status": "testing", "by": "dev:acme"}),
    )
    .await;
    b.until(
        "the card in Testing",
        &format!("{} === 'testing'", column_of(id)),
    )
    .await;
    b.until(
        "the drill-gate mark",
        &format!("document.querySelector('#board li.card[data-id=\"{id}\"] .mark.gate') !== null"),
    )
    .await;

    // Moved from the page to done without a drill line: the hub refuses and the page says why.
    let sel = b
        .client
        .find(Locator::Css(&format!("select[data-move=\"{id}\"]")))
        .await
        .expect("move select");
    sel.select_by_value("done").await.expect("select done");
    b.until(
        "the hub's refusal on the page",
        "document.getElementById('notice').textContent.includes('no drill line')",
    )
    .await;
    assert_eq!(b.eval(&column_of(id)).await, json!("testing"));
    let status = api.get(&format!("/card?id={id}")).await["task"]["status"].clone();
    assert_eq!(status, json!("testing"), "the refused move must not happen");

    // With a drill line the same move from the page goes through.
    api.ok(
        "/task/update",
        json!({"id": id, "drill": "cargo test -p parser", "by": "dev:acme"}),
    )
    .await;
    b.until(
        "the drill line on the card",
        &format!(
            "document.querySelector('#board li.card[data-id=\"{id}\"]').textContent.includes('cargo test -p parser')"
        ),
    )
    .await;
    let sel = b
        .client
        .find(Locator::Css(&format!("select[data-move=\"{id}\"]")))
        .await
        .expect("move select");
    sel.select_by_value("done").await.expect("select done");
    b.until("the card in Done", &format!("{} === 'done'", column_of(id)))
        .await;
    let card = api.get(&format!("/card?id={id}")).await;
    assert_eq!(card["task"]["status"], json!("done"));
    let last = card["task"]["history"]
        .as_array()
        .and_then(|h| h.last())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        last["by"],
        json!("human:acme"),
        "moved as the page's person"
    );

    // Add a card from the page's form.
    let title = b
        .client
        .find(Locator::Id("new-title"))
        .await
        .expect("title");
    title.send_keys("typed in the page").await.expect("type");
    b.client
        .find(Locator::Css("#add-card button[type=submit]"))
        .await
        .expect("add")
        .click()
        .await
        .expect("click add");
    b.until(
        "the page's card on the board",
        "[...document.querySelectorAll('#board li.card')].some(c => c.textContent.includes('typed in the page'))",
    )
    .await;
    let tasks = api.get(&format!("/tasks?project={p}")).await;
    let made = tasks["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["title"] == "typed in the page")
        .cloned()
        .expect("the card the page added is in the hub");
    assert_eq!(made["by"], json!("human:acme"));

    // Open a card: its full log.
    api.ok(
        "/task/update",
        json!({"id": first, "note": "first note on the seed", "by": "dev:acme"}),
    )
    .await;
    b.client
        .find(Locator::Css(&format!(
            "#board li.card[data-id=\"{first}\"]"
        )))
        .await
        .expect("card")
        .click()
        .await
        .expect("click card");
    b.until(
        "the card's log in the dialog",
        "document.getElementById('card-dialog').open && document.getElementById('cd-body').textContent.includes('first note on the seed')",
    )
    .await;
    b.eval("document.getElementById('card-dialog').close()")
        .await;

    // Another project's first card adds it to the switcher live; switching shows only its board.
    let other = api.card("other", "elsewhere", json!({})).await;
    b.until(
        "the new project in the switcher",
        "[...document.getElementById('project').options].some(o => o.value === 'other')",
    )
    .await;
    assert_eq!(
        b.eval(&column_of(other)).await,
        json!(""),
        "not on acme's board"
    );
    b.client
        .find(Locator::Id("project"))
        .await
        .expect("switcher")
        .select_by_value("other")
        .await
        .expect("switch");
    b.until(
        "the other project's card",
        &format!("{} === 'todo'", column_of(other)),
    )
    .await;
    assert_eq!(
        b.eval("document.querySelectorAll('#board li.card').length")
            .await,
        json!(1)
    );
    b.no_reload_happened().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seats_show_the_runner_state_and_messages_go_out() {
    let Some(b) = Browser::start("seats_show_the_runner_state_and_messages_go_out").await else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    let p = "acme";
    let now = trantor_now();
    // Presence as the runner reports it: /register with phase, phaseSince, status, agent…
    api.ok(
        "/register",
        json!({"session": "dev:acme", "project": p, "status": "idle", "phase": "idle",
               "agent": "claude", "model": "sonnet", "persona": "dev"}),
    )
    .await;
    b.open(&hub, p, "seats").await;
    b.until(
        "the seat as idle",
        "document.querySelector('#seats li[data-session=\"dev:acme\"]')?.dataset.state === 'idle'",
    )
    .await;
    // The runner parks the seat (docs/runner.md §12): phase parked, status `parked (reason) · until …`.
    api.ok(
        "/register",
        json!({"session": "dev:acme", "project": p, "status": "parked (exhausted) · until 2026-12-01 09:00 UTC",
               "phase": "parked", "phaseSince": now, "agent": "claude", "model": "sonnet",
               "persona": "dev"}),
    )
    .await;
    b.until(
        "the seat shown as parked",
        "document.querySelector('#seats li[data-session=\"dev:acme\"]')?.dataset.state === 'parked'",
    )
    .await;
    let seat = b
        .eval("document.querySelector('#seats li[data-session=\"dev:acme\"]').textContent")
        .await;
    let seat = seat.as_str().unwrap_or("");
    assert!(seat.contains("parked (exhausted)"), "{seat}");
    assert!(seat.contains("until 2026-12-01 09:00 UTC"), "{seat}");
    assert!(seat.contains("claude") && seat.contains("sonnet") && seat.contains("persona dev"));
    assert_eq!(
        b.eval("document.querySelector('#seats li[data-session=\"dev:acme\"]').classList.contains('failing')").await,
        json!(true),
        "a parked seat stands out"
    );

    // Post a message to the seat from the page.
    b.until(
        "the seat in the recipient picker",
        "[...document.getElementById('msg-to').options].some(o => o.value === 'dev:acme')",
    )
    .await;
    b.client
        .find(Locator::Id("msg-to"))
        .await
        .expect("to")
        .select_by_value("dev:acme")
        .await
        .expect("pick");
    b.client
        .find(Locator::Id("msg-text"))
        .await
        .expect("text")
        .send_keys("please pick up #1")
        .await
        .expect("type");
    b.client
        .find(Locator::Css("#post-msg button[type=submit]"))
        .await
        .expect("send")
        .click()
        .await
        .expect("click");
    b.until(
        "the sent notice",
        "document.getElementById('notice').textContent.includes('sent to dev:acme')",
    )
    .await;
    let recent = api.get("/recent?limit=10").await;
    let m = recent["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["text"] == "please pick up #1")
        .cloned()
        .expect("the page's message reached the hub");
    assert_eq!(
        (m["from"].clone(), m["to"].clone()),
        (json!("human:acme"), json!("dev:acme"))
    );
    b.no_reload_happened().await;
}

fn trantor_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_after_a_hub_restart_loses_and_duplicates_nothing() {
    let Some(b) =
        Browser::start("reconnect_after_a_hub_restart_loses_and_duplicates_nothing").await
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let mut hub = Hub::start_in(tmp.path(), port, &[]);
    let api = Api::new(&hub);
    let p = "acme";
    let a = api.card(p, "before the restart", json!({})).await;
    b.open(&hub, p, "timeline").await;
    b.until("the first card's event", &format!("document.querySelector('#timeline li[data-type=created]') !== null && window.trantorUi.state.cards.has({a})")).await;

    hub.kill9();
    b.until(
        "the page to notice the hub went away",
        "document.getElementById('conn').dataset.state === 'down'",
    )
    .await;
    let hub = Hub::start_in(tmp.path(), port, &[]);
    // Written before the page can have reconnected: only the catch-up from the cursor brings it.
    let c = api.card(p, "right after the restart", json!({})).await;
    api.ok(
        "/task/update",
        json!({"id": a, "status": "doing", "by": "dev:acme"}),
    )
    .await;
    b.until(
        "the page live again",
        "document.getElementById('conn').dataset.state === 'live'",
    )
    .await;
    let d = api.card(p, "after the reconnect", json!({})).await;
    for (id, col) in [(a, "doing"), (c, "todo"), (d, "todo")] {
        b.until(
            &format!("card {id} in {col}"),
            &format!("{} === '{col}'", column_of(id)),
        )
        .await;
    }
    // Every event of the project exactly once, in the page's log and on screen.
    let events = api.get(&format!("/events?project={p}&limit=2000")).await;
    let want: Vec<i64> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["id"].as_i64())
        .collect();
    b.until(
        "every event in the page",
        &format!("window.trantorUi.state.events.length >= {}", want.len()),
    )
    .await;
    let got: Vec<i64> =
        serde_json::from_value(b.eval("window.trantorUi.state.events.map(e => e.id)").await)
            .expect("ids");
    assert_eq!(got, want, "page events vs the hub's log");
    b.until(
        "the timeline rows",
        &format!(
            "document.querySelectorAll('#timeline li').length === {}",
            want.len()
        ),
    )
    .await;
    let rows: Vec<i64> = serde_json::from_value(
        b.eval("[...document.querySelectorAll('#timeline li')].map(li => Number(li.dataset.id))")
            .await,
    )
    .expect("rows");
    let mut uniq = rows.clone();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(uniq.len(), rows.len(), "a duplicated row: {rows:?}");
    assert_eq!(
        b.eval("document.querySelectorAll('#board li.card').length")
            .await,
        json!(3)
    );
    b.no_reload_happened().await;
    drop(hub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_and_timeline_show_the_crew() {
    let Some(b) = Browser::start("flow_and_timeline_show_the_crew").await else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    let p = "acme";
    for (s, phase, status) in [
        ("lead:acme", "idle", "idle"),
        ("dev:acme", "working", "working · message"),
        ("qa:acme", "parked", "parked (auth)"),
    ] {
        api.ok(
            "/register",
            json!({"session": s, "project": p, "status": status, "phase": phase,
                   "agent": "claude", "model": "sonnet", "persona": s.split(':').next()}),
        )
        .await;
    }
    let c1 = api
        .card(
            p,
            "parser",
            json!({"assignee": "dev:acme", "status": "doing", "checklist": ["lex", "parse"], "drill": "cargo test"}),
        )
        .await;
    let c2 = api.card(p, "docs", json!({"assignee": "qa:acme"})).await;
    api.card(
        p,
        "release notes",
        json!({"status": "done", "drill": "read"}),
    )
    .await;
    let k = api
        .ok(
            "/send",
            json!({"from": "lead:acme", "to": "dev:acme", "text": format!("take #{c1}"), "kind": "contract"}),
        )
        .await["id"]
        .as_i64()
        .expect("id");
    api.ok(
        "/send",
        json!({"from": "dev:acme", "to": "lead:acme", "text": "on it", "re": k}),
    )
    .await;
    // The contract's delivery record, as dev's runner marks it.
    api.ok(
        "/delivery/fence",
        json!({"session": "dev:acme", "instance": "run-dev"}),
    )
    .await;
    for (state, extra) in [
        ("claimed", json!({})),
        ("started", json!({"turn": 1, "pid": 4242})),
        ("consumed", json!({"turn": 1, "outcome": "delivered"})),
    ] {
        let mut body =
            json!({"id": k, "session": "dev:acme", "instance": "run-dev", "state": state});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        api.ok("/delivery", body).await;
    }
    // A contract to a seat that never shows up: undelivered, and overdue (abandoned).
    api.ok(
        "/send",
        json!({"from": "lead:acme", "to": "ghost:acme", "text": format!("write #{c2}")}),
    )
    .await;
    api.ok(
        "/task/update",
        json!({"id": c2, "status": "doing", "by": "qa:acme"}),
    )
    .await;
    api.ok(
        "/task/update",
        json!({"id": c2, "status": "testing", "by": "qa:acme"}),
    )
    .await;
    api.ok(
        "/task/update",
        json!({"id": c2, "status": "doing", "by": "lead:acme", "note": "bounced: the examples do not build"}),
    )
    .await;
    b.client
        .set_window_size(1400, 900)
        .await
        .expect("window size");
    b.open(&hub, p, "board").await;
    b.until(
        "the bounced mark",
        &format!(
            "document.querySelector('#board li.card[data-id=\"{c2}\"] .mark.bounced') !== null"
        ),
    )
    .await;
    b.shot("ui-board").await;
    // The card opens to its full log; Escape closes it.
    b.client
        .find(Locator::Css(&format!("#board li.card[data-id=\"{c2}\"]")))
        .await
        .expect("card")
        .click()
        .await
        .expect("click card");
    b.until(
        "the bounce note in the card's log",
        "document.getElementById('card-dialog').open && document.getElementById('cd-body').textContent.includes('the examples do not build')",
    )
    .await;
    b.shot("ui-card").await;
    b.client
        .find(Locator::Id("cd-move"))
        .await
        .expect("dialog move")
        .send_keys("\u{E00C}")
        .await
        .expect("escape");
    b.until(
        "the dialog closed",
        "!document.getElementById('card-dialog').open",
    )
    .await;

    b.client
        .find(Locator::Id("tab-seats"))
        .await
        .expect("tab")
        .click()
        .await
        .expect("click");
    b.until(
        "the working seat on its card",
        &format!(
            "(document.querySelector('#seats li[data-session=\"dev:acme\"]')?.textContent || '').includes('on card #{c1}')"
        ),
    )
    .await;
    b.shot("ui-seats").await;

    b.client
        .find(Locator::Id("tab-flow"))
        .await
        .expect("tab")
        .click()
        .await
        .expect("click");
    b.until(
        "the lanes",
        "document.querySelectorAll('#flow section.lane').length === 2",
    )
    .await;
    let ghost = b
        .eval("[...document.querySelectorAll('#flow li.msg')].find(m => m.textContent.includes('ghost:acme')).textContent")
        .await;
    let ghost = ghost.as_str().unwrap_or("");
    assert!(
        ghost.contains("undelivered") && ghost.contains("overdue"),
        "{ghost}"
    );
    // Each contract's current delivery state: the ghost's is still only stored on the hub.
    assert!(ghost.contains("delivery: stored"), "{ghost}");
    let answered = b
        .eval(&format!(
            "document.querySelector('#flow li.msg[data-id=\"{k}\"]').textContent"
        ))
        .await;
    assert!(
        answered.as_str().unwrap_or("").contains("answered"),
        "{answered}"
    );
    let state = b
        .eval(&format!(
            "document.querySelector('#flow li.msg[data-id=\"{k}\"] .mark.delivery').dataset.delivery + ' ' + document.querySelector('#flow li.msg[data-id=\"{k}\"] .mark.delivery').title"
        ))
        .await;
    assert_eq!(
        state.as_str().unwrap_or(""),
        "consumed turn 1 · by run-dev · delivered",
        "{state}"
    );
    b.shot("ui-flow").await;

    // The timeline, filtered by kind, then by card.
    b.client
        .find(Locator::Id("tab-timeline"))
        .await
        .expect("tab")
        .click()
        .await
        .expect("click");
    b.until(
        "timeline rows",
        "document.querySelectorAll('#timeline li').length > 5",
    )
    .await;
    b.client
        .find(Locator::Id("tl-kind"))
        .await
        .expect("kind")
        .select_by_value("moved")
        .await
        .expect("moved");
    b.until(
        "only moves",
        "[...document.querySelectorAll('#timeline li')].every(li => li.dataset.type === 'moved') && document.querySelectorAll('#timeline li').length === 3",
    )
    .await;
    b.client
        .find(Locator::Id("tl-kind"))
        .await
        .expect("kind")
        .select_by_value("")
        .await
        .expect("any");
    b.client
        .find(Locator::Id("tl-card"))
        .await
        .expect("card filter")
        .send_keys(&c1.to_string())
        .await
        .expect("type");
    b.until(
        "only card 1's events and the messages citing it",
        &format!(
            "document.querySelectorAll('#timeline li').length === 2 && [...document.querySelectorAll('#timeline li')].every(li => li.textContent.includes('#{c1}'))"
        ),
    )
    .await;
    b.client
        .find(Locator::Id("tl-card"))
        .await
        .expect("card filter")
        .clear()
        .await
        .expect("clear");
    b.until(
        "the whole timeline again",
        "document.querySelectorAll('#timeline li').length > 5",
    )
    .await;
    b.shot("ui-timeline").await;

    // Search narrows the board; a narrow window stacks the columns.
    b.client
        .find(Locator::Id("tab-board"))
        .await
        .expect("tab")
        .click()
        .await
        .expect("click");
    b.client
        .find(Locator::Id("search"))
        .await
        .expect("search")
        .send_keys("parser")
        .await
        .expect("type");
    b.until(
        "one card left visible",
        "document.querySelectorAll('#board li.card:not([hidden])').length === 1",
    )
    .await;
    b.client.set_window_size(420, 900).await.expect("narrow");
    b.until(
        "columns stacked",
        "getComputedStyle(document.getElementById('board')).gridTemplateColumns.split(' ').length === 1",
    )
    .await;
    assert_eq!(
        b.eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
            .await,
        json!(true),
        "no sideways scrolling on a narrow window"
    );
    b.shot("ui-narrow").await;

    // Keyboard: the tabs move with the arrow keys and every control has a label.
    b.eval("document.getElementById('tab-board').focus()").await;
    b.client
        .find(Locator::Id("tab-board"))
        .await
        .expect("tab")
        .send_keys("\u{E014}")
        .await
        .expect("arrow right");
    b.until(
        "the seats tab selected by keyboard",
        "document.getElementById('tab-seats').getAttribute('aria-selected') === 'true' && document.activeElement.id === 'tab-seats'",
    )
    .await;
    let unlabelled = b
        .eval("[...document.querySelectorAll('input, select, button')].filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim()).map(e => e.id || e.outerHTML.slice(0, 60))")
        .await;
    assert_eq!(unlabelled, json!([]), "controls without a label");
    b.no_reload_happened().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_seats_and_a_thousand_cards_stay_responsive() {
    let Some(b) = Browser::start("twenty_seats_and_a_thousand_cards_stay_responsive").await else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    let p = "big";
    let statuses = ["todo", "doing", "testing", "done", "blocked"];
    for i in 0..20 {
        api.ok(
            "/register",
            json!({"session": format!("seat{i}:{p}"), "project": p, "status": "idle",
                   "phase": if i % 4 == 0 { "working" } else { "idle" }, "agent": "claude",
                   "model": "sonnet", "persona": format!("seat{i}")}),
        )
        .await;
    }
    let mut ids = Vec::new();
    let started = Instant::now();
    for i in 0..1000 {
        let st = statuses[i % statuses.len()];
        let id = api
            .card(
                p,
                &format!("card number {i}"),
                json!({"status": st, "assignee": format!("seat{}:{p}", i % 20),
                       "checklist": ["one", "two"], "drill": if st == "done" { "cargo test" } else { "" }}),
            )
            .await;
        ids.push(id);
    }
    eprintln!("seeded 1000 cards in {:?}", started.elapsed());

    let t0 = Instant::now();
    b.open(&hub, p, "board").await;
    let opened = t0.elapsed();
    b.until(
        "1000 cards rendered",
        "document.querySelectorAll('#board li.card').length === 1000",
    )
    .await;
    let stats = b.eval("window.trantorUi.stats").await;
    // One live move: from the API call to the card in its new column, measured in the page.
    let id = ids[0];
    b.eval(&format!(
        "(window.__moveT0 = performance.now(), new MutationObserver((_, o) => {{ \
           const c = document.querySelector('#board ol[data-col=\"done\"] li.card[data-id=\"{id}\"]'); \
           if (c) {{ window.__moveMs = performance.now() - window.__moveT0; o.disconnect(); }} \
         }}).observe(document.getElementById('board'), {{childList: true, subtree: true}}), 1)"
    ))
    .await;
    api.ok(
        "/task/update",
        json!({"id": id, "status": "done", "drill": "cargo test", "by": "lead:big"}),
    )
    .await;
    b.until("the live move", "window.__moveMs !== undefined")
        .await;
    let move_ms = b.eval("window.__moveMs").await;
    // Search over 1000 cards.
    b.client
        .find(Locator::Id("search"))
        .await
        .expect("search")
        .send_keys("number 99")
        .await
        .expect("type");
    b.until(
        "the search result",
        "document.querySelectorAll('#board li.card:not([hidden])').length === 11",
    )
    .await;
    let search_ms = b.eval("window.trantorUi.stats.searchMs").await;
    b.client
        .find(Locator::Id("tab-seats"))
        .await
        .expect("tab")
        .click()
        .await
        .expect("click");
    b.until(
        "the 20 seats (and the lead, a peer since its writes)",
        "document.querySelectorAll('#seats li.seat[data-session^=\"seat\"]').length === 20",
    )
    .await;
    eprintln!(
        "UI responsiveness (20 seats, 1000 cards): page open to ready {opened:?} (WebDriver \
         round trips included); in-page load {} ms, board render {} ms; live move API->DOM {} \
         ms; search filter over the board {} ms",
        stats["loadMs"], stats["boardRenderMs"], move_ms, search_ms
    );
    assert_eq!(stats["cards"], json!(1000));
    b.no_reload_happened().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_embedded_same_origin_and_json_clients_keep_the_banner() {
    let hub = Hub::start();
    trantor_proto::tls::install_default_provider();
    let http = reqwest::Client::new();
    let page = http
        .get(format!("{}/", hub.url()))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .expect("get /");
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert!(
        h["content-type"]
            .to_str()
            .unwrap_or("")
            .starts_with("text/html")
    );
    let csp = h["content-security-policy"].to_str().unwrap_or("");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(
        h.get("access-control-allow-origin").is_none(),
        "no CORS, ever"
    );
    let html = page.text().await.expect("html");
    assert!(html.contains("/ui/app.js") && !html.contains("https://"));
    for (path, ty) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let r = http
            .get(format!("{}{path}", hub.url()))
            .send()
            .await
            .expect("asset");
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap_or("")
                .starts_with(ty),
            "{path}"
        );
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }
    // A program (no text/html in Accept) still gets the JSON banner at `/`.
    let banner: Value = http
        .get(format!("{}/", hub.url()))
        .send()
        .await
        .expect("banner")
        .json()
        .await
        .expect("json");
    assert_eq!(banner["name"], json!("trantor hub"));
    // A page from another origin is refused, the dashboard's own origin is not.
    let foreign = http
        .post(format!("{}/task", hub.url()))
        .header("origin", "http://evil.example")
        .json(&json!({"title": "x", "project": "p"}))
        .send()
        .await
        .expect("post");
    assert_eq!(foreign.status(), 403);
    let own = http
        .post(format!("{}/task", hub.url()))
        .header("origin", hub.url())
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"title": "x", "project": "p", "by": "human:p"}))
        .send()
        .await
        .expect("post");
    assert_eq!(own.status(), 200);
}

#[test]
fn trantor_ui_prints_the_url_and_fails_clearly_without_a_hub() {
    let hub = Hub::start();
    let out = Command::new(common::bin())
        .args([
            "ui",
            "--no-open",
            "--json",
            "--project",
            "my proj",
            "--session",
            "ann:my proj",
        ])
        .env("RELAY_URL", hub.url())
        .env("HOME", &hub.data_dir)
        .env_remove("DISPLAY")
        .output()
        .expect("run trantor ui");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["url"],
        json!(format!(
            "{}/ui?project=my%20proj&as=ann%3Amy%20proj",
            hub.url()
        ))
    );
    assert_eq!(v["opened"], json!(false));

    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = Command::new(common::bin())
        .args(["ui", "--no-open"])
        .env("RELAY_URL", &dead)
        .env("HOME", &hub.data_dir)
        .output()
        .expect("run trantor ui");
    assert_eq!(out.status.code(), Some(3), "unreachable hub is exit 3");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the trantor hub"));
}

/// The cost ledger on the dashboard (docs/protocol.md §7.6): a card shows what its turns cost,
/// the card dialog and the seat say it in full, the Cost tab adds it up per day, seat and card,
/// and a turn recorded while the page is open reaches the card without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_what_each_card_seat_and_day_cost() {
    let Some(b) = Browser::start("the_dashboard_shows_what_each_card_seat_and_day_cost").await
    else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    let p = "ledger";
    api.ok(
        "/register",
        json!({"session": "dev:ledger", "project": p, "status": "idle", "phase": "idle",
               "agent": "claude"}),
    )
    .await;
    let id = api
        .card(p, "priced work", json!({"assignee": "dev:ledger"}))
        .await;
    let turn = |n: u64, usd: f64, estimated: bool| {
        json!({"session": "dev:ledger", "instance": "run-1", "turn": n, "project": p,
               "card": id, "agent": "claude", "outcome": "completed",
               "usage": {"input": 1000, "output": 200, "cacheRead": 5000, "cacheWrite": 0},
               "usd": usd, "estimated": estimated, "source": "test"})
    };
    api.ok("/turns", turn(1, 0.0421, false)).await;
    b.open(&hub, p, "board").await;
    let on_card =
        format!("document.querySelector('#board li.card[data-id=\"{id}\"] .cost')?.textContent");
    b.until("the card's cost", &format!("{on_card} === '$0.0421'"))
        .await;
    // A turn recorded while the page is open: the next card event brings it in.
    api.ok("/turns", turn(2, 0.01, true)).await;
    api.ok(
        "/task/update",
        json!({"id": id, "status": "doing", "by": "dev:ledger"}),
    )
    .await;
    b.until(
        "the card's cost after the second turn",
        &format!("{on_card} === '~$0.0521'"),
    )
    .await;
    b.eval(&format!(
        "document.querySelector('#board li.card[data-id=\"{id}\"]').click()"
    ))
    .await;
    b.until(
        "the card dialog's cost row",
        "document.getElementById('cd-body').textContent.includes('~$0.0521 over 2 turns')",
    )
    .await;
    b.eval("document.getElementById('card-dialog').close()")
        .await;
    b.eval("document.getElementById('tab-cost').click()").await;
    b.until(
        "the cost tab",
        "document.getElementById('cost-total')?.textContent.includes('~$0.0521 over 2 turns')",
    )
    .await;
    let tables = b
        .eval("[...document.querySelectorAll('#cost table caption')].map(c => c.textContent)")
        .await;
    assert_eq!(
        tables,
        json!(["Per day (UTC)", "Per seat", "Per card"]),
        "{tables}"
    );
    let seat_row = b
        .eval("document.querySelector('#cost tr[data-key=\"dev:ledger\"]')?.textContent")
        .await;
    assert!(
        seat_row.as_str().is_some_and(|t| t.contains("~$0.0521")),
        "{seat_row}"
    );
    b.eval("document.getElementById('tab-seats').click()").await;
    b.until(
        "the seat's cost",
        "document.querySelector('#seats li[data-session=\"dev:ledger\"]')?.textContent.includes('cost ~$0.0521')",
    )
    .await;
    b.shot("ui-cost").await;
    b.no_reload_happened().await;
}

/// The original's dashboard (`ui.html` from the npm package `trantor@0.18.72`), served from a
/// loopback origin whose other paths reach our hub (`tests-compat/log_proxy.py --static`): its
/// board, its project strip and its timeline fill from our hub, and every call it makes is
/// answered — apart from the insights routes this hub does not serve (docs/compat-notes.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_originals_dashboard_fills_from_our_hub() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    if find_exe(&["python3"]).is_none() {
        common::skip_or_fail("the_originals_dashboard_fills_from_our_hub: python3 is needed");
        return;
    }
    let Some(b) = Browser::start("the_originals_dashboard_fills_from_our_hub").await else {
        return;
    };
    let hub = Hub::start();
    let api = Api::new(&hub);
    api.ok(
        "/register",
        json!({"session": "claude:web", "project": "web", "status": "on the login form"}),
    )
    .await;
    api.ok(
        "/project",
        json!({"project": "web", "brief": "the shop's web front", "by": "lead:web"}),
    )
    .await;
    let todo = api
        .card(
            "web",
            "write the login form",
            json!({"assignee": "claude:web"}),
        )
        .await;
    let doing = api
        .card(
            "web",
            "wire the session cookie",
            json!({"assignee": "claude:web"}),
        )
        .await;
    let done = api
        .card(
            "web",
            "pick the font",
            json!({"assignee": "claude:web", "drill": "look at it"}),
        )
        .await;
    api.ok(
        "/task/update",
        json!({"id": doing, "status": "doing", "by": "claude:web"}),
    )
    .await;
    api.ok(
        "/task/update",
        json!({"id": done, "status": "done", "by": "claude:web", "note": "Drill: looked at it"}),
    )
    .await;
    api.ok(
        "/send",
        json!({"from": "lead:web", "to": "claude:web", "text": "start with the login form"}),
    )
    .await;

    let logs = tempfile::tempdir().expect("logs");
    let log = logs.path().join("calls.jsonl");
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/log_proxy.py"),
    )
    .arg("--listen")
    .arg(format!("127.0.0.1:{port}"))
    .arg("--upstream")
    .arg(hub.url())
    .arg("--log")
    .arg(&log)
    .arg("--static")
    .arg(format!("/ui={}", pkg.join("ui.html").display()))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let _proxy = GroupChild::spawn(cmd);
    let deadline = Instant::now() + GUARD;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the proxy did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    b.client
        .goto(&format!("http://127.0.0.1:{port}/ui"))
        .await
        .expect("goto");
    // The board: the project's three cards in their columns, the counters, the brief.
    let proj = r#"document.querySelector('.proj[data-projname="web"]')"#;
    b.until(
        "the web board",
        &format!("{proj} && {proj}.querySelectorAll('.tcard').length === 3"),
    )
    .await;
    for (id, col) in [(todo, "todo"), (doing, "doing"), (done, "done")] {
        let at = b
            .eval(&format!(
                "(() => {{ const c = {proj}.querySelector('.tcard[data-id=\"{id}\"]'); \
                 return c && c.closest('.col').classList.contains('{col}'); }})()"
            ))
            .await;
        assert_eq!(at, json!(true), "card #{id} in {col}");
    }
    assert_eq!(
        b.eval("document.getElementById('nproj').textContent").await,
        json!("1")
    );
    assert_eq!(
        b.eval("document.getElementById('ntask').textContent").await,
        json!("3")
    );
    // claude:web, and lead:web (it wrote the cards and the message).
    assert_eq!(
        b.eval("document.getElementById('nsess').textContent").await,
        json!("2")
    );
    let brief = b
        .eval(&format!("{proj}.querySelector('.brief').textContent"))
        .await;
    assert_eq!(brief, json!("the shop's web front"));
    // The projects strip and the live agent.
    b.until(
        "the live project tab",
        r#"document.querySelector('#ptabs .ptab.live[data-proj="web"]')"#,
    )
    .await;
    let agents = b
        .eval(&format!(
            "[...{proj}.querySelectorAll('.agent')].map(a => a.getAttribute('title')).join('|')"
        ))
        .await;
    assert!(
        agents
            .as_str()
            .is_some_and(|t| t.contains("claude:web · online")),
        "{agents}"
    );
    // The conversation lane shows the message.
    b.until(
        "the message in the project's chat",
        &format!("{proj}.querySelector('.chatlog') && {proj}.querySelector('.chatlog').textContent.includes('start with the login form')"),
    )
    .await;
    // The timeline: created and moved, from /history.
    b.eval(r#"document.querySelector('.vbtn[data-view="timeline"][data-proj="web"]').click()"#)
        .await;
    b.until(
        "the timeline",
        r#"document.querySelectorAll('.timeline[data-proj="web"] .tevent').length >= 5"#,
    )
    .await;
    let timeline = b
        .eval(r#"document.querySelector('.timeline[data-proj="web"]').textContent"#)
        .await;
    let timeline = timeline.as_str().unwrap_or_default();
    assert!(
        timeline.contains("created \"write the login form\" as todo")
            && timeline.contains("moved \"pick the font\" todo → done"),
        "{timeline}"
    );
    b.shot("original-ui").await;

    // Every call the page made was answered; only the insights routes are not served here.
    let calls = std::fs::read_to_string(&log).expect("proxy log");
    let mut seen = std::collections::BTreeSet::new();
    for line in calls.lines() {
        let c: Value = serde_json::from_str(line).expect("log line");
        let path = c["path"].as_str().unwrap_or_default().to_string();
        let status = c["status"].as_i64().unwrap_or(0);
        seen.insert(path.clone());
        if path == "/favicon.ico" {
            continue; // the browser's own request, not the page's (the original 404s it too)
        }
        if ["/learning", "/economics", "/balances"].contains(&path.as_str()) {
            assert_eq!(status, 404, "{line}");
            continue;
        }
        assert!(
            status > 0 && status < 400,
            "the page's call was refused: {line}"
        );
    }
    for want in ["/projects", "/tasks", "/recent", "/history"] {
        assert!(
            seen.contains(want),
            "the page never called {want}: {seen:?}"
        );
    }
}
