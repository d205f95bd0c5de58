//! Our clients under signed identity (docs/protocol.md §2): our runner seat, our MCP server and
//! our CLI verbs against a hub in `RELAY_AUTH=enforce` mode, the ORIGINAL JavaScript hub (npm
//! `trantor@0.18.72`) and ours, enrolled by trust on first use, by an invite from `trantor invite`,
//! and by an invite the seat mints with the operator's owner key; a refused enrollment is a clear
//! error; a key file with loose permissions is refused by every client.
//!
//! Real processes on temporary directories and free ports; every wait is a condition with a
//! deadline. The original hub needs node and npm (SKIP on a developer machine, failure under
//! `CI=true`), the seats need python3 (the fake agent CLI).

mod common;

use common::{GroupChild, Hub, free_port, hub_request, wait_until};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;
use trantor_proto::{HubClient, Signer, keys};

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
const BOOT: &str = "clients-bootstrap-token-0123456789";
const LONG: Duration = Duration::from_secs(120);

/// A hub in enforce mode: ours in-process, or the original under node.
struct EnforceHub {
    port: u16,
    _ours: Option<Hub>,
    _theirs: Option<GroupChild>,
    _tmp: tempfile::TempDir,
}

impl EnforceHub {
    /// `enroll`: `tofu` (loopback trust on first use) or `invite` (tokens only).
    fn start(original: bool, enroll: &str) -> Option<EnforceHub> {
        if !common::require_tool("python3") {
            return None;
        }
        let tmp = tempfile::tempdir().expect("hub dir");
        if !original {
            let hub = Hub::start_with(|a| {
                a.auth = "enforce".into();
                a.enroll = enroll.into();
                a.bootstrap_token = Some(BOOT.into());
            });
            return Some(EnforceHub {
                port: hub.port,
                _ours: Some(hub),
                _theirs: None,
                _tmp: tmp,
            });
        }
        let pkg = common::original_package()?;
        let port = free_port();
        let log = std::fs::File::create(tmp.path().join("hub.log")).expect("log");
        let mut cmd = Command::new("node");
        cmd.arg(pkg.join("hub.mjs"))
            .env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("RELAY_DATA_DIR", tmp.path())
            .env("HOME", tmp.path())
            .env("RELAY_AUTH", "enforce")
            .env(
                "RELAY_ENROLL",
                if enroll == "tofu" { "tofu" } else { "off" },
            )
            .env("RELAY_BOOTSTRAP_TOKEN", BOOT)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let child = GroupChild::spawn(cmd);
        wait_until("the original hub", Duration::from_secs(90), || {
            hub_request(port, "GET", "/health", None).is_ok_and(|(s, _)| s == 200)
        });
        Some(EnforceHub {
            port,
            _ours: None,
            _theirs: Some(child),
            _tmp: tmp,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// `trantor <args>` with the bus directory `bus` against `url`.
fn trantor(bus: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::bin());
    cmd.args(args)
        .env("AGENT_BUS_DIR", bus)
        .env("HOME", bus)
        .env("RELAY_URL", url)
        .env("RELAY_PROJECT", PROJECT)
        .env_remove("RELAY_DATA_DIR")
        .env_remove("RELAY_SESSION")
        .env_remove("RELAY_AGENT")
        .env_remove("RELAY_INVITE")
        .env_remove("RELAY_BOOTSTRAP_TOKEN")
        .env_remove("RELAY_OWNER_IDENTITY")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run trantor")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The operator: `orch:p`, enrolled with the bootstrap token by `trantor identity enroll`, so
/// it holds owner of `*`. Returns its bus directory.
fn operator(hub: &EnforceHub, dir: &Path) -> PathBuf {
    let bus = dir.join("ops");
    std::fs::create_dir_all(&bus).expect("ops bus");
    let o = trantor(
        &bus,
        &hub.url(),
        &[
            "identity",
            "enroll",
            "--session",
            ORCH,
            "--bootstrap-token",
            BOOT,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("enrolled"),
        "{}",
        text(&o)
    );
    bus
}

/// A client signed with `name`'s key from `bus`.
fn signed(url: &str, bus: &Path, name: &str) -> HubClient {
    let key = keys::load(bus, name).expect("key").expect("key exists");
    HubClient::new(url).with_signer(Signer::Durable(Arc::new(key)))
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Messages in `session`'s inbox (peeked), read with `client`.
fn inbox(client: &HubClient, session: &str) -> Vec<Value> {
    block(client.get::<Value>(
        "/inbox",
        &[
            ("session", session.to_string()),
            ("since", "0".to_string()),
            ("peek", "1".to_string()),
        ],
    ))
    .ok()
    .and_then(|v| v["messages"].as_array().cloned())
    .unwrap_or_default()
}

/// One runner seat with the fake agent CLI, persona `persona`, in its own directories.
struct Seat {
    tmp: tempfile::TempDir,
    bus: PathBuf,
    persona: String,
    child: Option<GroupChild>,
}

impl Seat {
    fn new(persona: &str, bus: Option<&Path>) -> Seat {
        let tmp = tempfile::tempdir().expect("seat");
        common::init_git_repo(&tmp.path().join("repo"));
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::os::unix::fs::symlink(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/fake-agent.sh"),
            bin.join("claude"),
        )
        .expect("fake agent");
        std::fs::create_dir_all(tmp.path().join("home")).expect("home");
        Seat {
            bus: bus
                .map(Path::to_path_buf)
                .unwrap_or_else(|| tmp.path().join("bus")),
            tmp,
            persona: persona.into(),
            child: None,
        }
    }

    fn session(&self) -> String {
        format!("{}:{PROJECT}", self.persona)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("runner.log")).unwrap_or_default()
    }

    fn start(&mut self, url: &str, env: &[(&str, &str)]) {
        let log = std::fs::File::create(self.tmp.path().join("runner.log")).expect("log");
        let path = format!(
            "{}:{}",
            self.tmp.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(common::bin());
        cmd.arg("runner")
            .arg("claude")
            .arg(self.tmp.path().join("repo"))
            .env("PATH", path)
            .env("HOME", self.tmp.path().join("home"))
            .env("AGENT_BUS_DIR", &self.bus)
            .env("CREW_PERSONA", &self.persona)
            .env_remove("RELAY_DATA_DIR")
            .env_remove("CREW_AGENT")
            .env_remove("CREW_SWAP_AGENT")
            .env_remove("RUNNER_SESSION")
            .env_remove("RELAY_INVITE")
            .env_remove("RELAY_BOOTSTRAP_TOKEN")
            .env_remove("RELAY_OWNER_IDENTITY")
            .env("RELAY_URL", url)
            .env("RELAY_PROJECT", PROJECT)
            .env("RELAY_HOST_ID", "orch")
            .env("FAKE_AGENT_LOG", self.tmp.path().join("fake.jsonl"))
            .env("TRANTOR_POLL_HOLD_S", "3")
            .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
            .env("TRANTOR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.child = Some(GroupChild::spawn(cmd));
    }

    fn wait_on_bus(&self) {
        wait_until(
            &format!("{} to wait on the bus", self.session()),
            LONG,
            || self.log().contains("waiting on the bus as"),
        );
    }

    /// Wait for the runner to exit; its log.
    fn wait_exit(&mut self) -> String {
        let child = self.child.as_mut().expect("started");
        wait_until("the runner to exit", LONG, || !child.alive());
        self.log()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill_group();
        }
    }
}

/// Orders `seat` to work with a direct message from the operator and waits for its receipt.
fn direct_message_gets_a_receipt(url: &str, ops: &Path, seat: &Seat, marker: &str) {
    let o = trantor(
        ops,
        url,
        &[
            "send",
            "--session",
            ORCH,
            &seat.session(),
            &format!("Please implement {marker}"),
        ],
        &[],
    );
    assert!(o.status.success(), "signed trantor send: {}", text(&o));
    let orch = signed(url, ops, ORCH);
    wait_until(
        &format!("the receipt from {}", seat.session()),
        LONG,
        || {
            inbox(&orch, ORCH).iter().any(|m| {
                m["from"] == seat.session().as_str()
                    && m["text"].as_str().is_some_and(|t| t.contains("done on"))
            })
        },
    );
}

trantor_testkit::on_both_hubs!(our_seat_and_mcp_enroll_by_tofu_on_an_enforce_hub);

/// TOFU on a loopback bind: the seat and the MCP server enroll themselves and work; unsigned
/// callers get 401.
fn our_seat_and_mcp_enroll_by_tofu_on_an_enforce_hub(original: bool) {
    let Some(hub) = EnforceHub::start(original, "tofu") else {
        return;
    };
    let url = hub.url();
    let dir = tempfile::tempdir().expect("tmp");
    let ops = operator(&hub, dir.path());
    let (st, v) = hub_request(hub.port, "GET", "/peers", None).expect("unsigned");
    assert_eq!(st, 401, "unsigned /peers: {v}");

    let mut seat = Seat::new("claude", None);
    seat.start(&url, &[]);
    seat.wait_on_bus();
    direct_message_gets_a_receipt(&url, &ops, &seat, "ZEBRA-1");
    assert!(
        keys::enrolled_marker(&seat.bus, &seat.session()).is_file(),
        "the seat records its enrollment"
    );

    // The signed target is the query exactly as encoded on the wire: awkward characters verify.
    let orch = signed(&url, &ops, ORCH);
    for odd in ["we ird+&=é:p", "a/b?c#d:p", "100%:p"] {
        let r = block(orch.get::<Value>("/peer", &[("session", odd.to_string())]));
        if let Err(e) = &r {
            assert_ne!(e.status(), Some(401), "signed /peer?session={odd}: {e}");
        }
    }
    let r = block(orch.post::<_, Value>(
        "/send",
        &json!({"from": ORCH, "to": "claude:p", "text": "ünïcode ✓ \"quoted\" \n line", "wake": false}),
    ));
    assert!(r.is_ok(), "signed /send with a unicode body: {r:?}");

    // Our MCP server: its durable key enrolls by TOFU, its instance key signs the calls.
    let mcp_bus = dir.path().join("mcp");
    std::fs::create_dir_all(&mcp_bus).expect("mcp bus");
    block(mcp_round_trip(&url, &mcp_bus, "mcp:p", &ops));
}

async fn mcp_round_trip(url: &str, bus: &Path, session: &str, ops: &Path) {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let (url_s, bus_s, session_s) = (url.to_string(), bus.to_path_buf(), session.to_string());
    let cmd = tokio::process::Command::new(common::bin()).configure(move |c| {
        c.arg("mcp")
            .env("RELAY_URL", &url_s)
            .env("RELAY_SESSION", &session_s)
            .env("AGENT_BUS_DIR", &bus_s)
            .env("HOME", &bus_s)
            .env_remove("RELAY_PROJECT")
            .env_remove("RELAY_AGENT")
            .env_remove("TRANTOR_SEAT")
            .env_remove("RELAY_INVITE")
            .env_remove("RELAY_OWNER_IDENTITY")
            .env("TRANTOR_LOG", "warn");
    });
    let client =
        ().serve(TokioChildProcess::new(cmd).expect("spawn trantor mcp"))
            .await
            .expect("MCP handshake");
    // The enrollment runs beside the handshake: retry the send until the key is known.
    let deadline = tokio::time::Instant::now() + LONG;
    let sent = loop {
        let args = json!({"to": ORCH, "text": "MCP-SIGNED-HELLO"});
        let r = client
            .call_tool(
                CallToolRequestParams::new("relay_send")
                    .with_arguments(args.as_object().cloned().unwrap_or_default()),
            )
            .await
            .expect("relay_send");
        let t: String = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        if r.is_error != Some(true) {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relay_send kept failing: {t}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(sent.starts_with("sent #"), "{sent}");
    let r = client
        .call_tool(CallToolRequestParams::new("relay_inbox"))
        .await
        .expect("relay_inbox");
    assert_ne!(r.is_error, Some(true), "its own inbox is readable: {r:?}");
    let _ = client.cancel().await;
    // The message is attributed to the MCP server's durable identity.
    let orch = signed(url, ops, ORCH);
    let got = tokio::task::spawn_blocking(move || inbox(&orch, ORCH))
        .await
        .expect("inbox");
    assert!(
        got.iter()
            .any(|m| m["from"] == session && m["text"] == "MCP-SIGNED-HELLO"),
        "{got:?}"
    );
    // A durable key file was created in the original's format, mode 0600.
    let path = keys::key_path(bus, session);
    let mode = std::fs::metadata(&path).expect("key").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

trantor_testkit::on_both_hubs!(our_seats_enroll_by_invite_on_an_enforce_hub);

/// Invites only (no TOFU): an invite from `trantor invite`, and one the seat mints with the
/// operator's owner key; a seat with neither is refused with a clear error.
fn our_seats_enroll_by_invite_on_an_enforce_hub(original: bool) {
    let Some(hub) = EnforceHub::start(original, "invite") else {
        return;
    };
    let url = hub.url();
    let dir = tempfile::tempdir().expect("tmp");
    let ops = operator(&hub, dir.path());

    let mut refused = Seat::new("nobody", None);
    refused.start(&url, &[]);
    let log = refused.wait_exit();
    assert!(
        log.contains("refused to enroll nobody:p") && log.contains("trantor invite"),
        "{log}"
    );

    let o = trantor(
        &ops,
        &url,
        &[
            "invite",
            "--project",
            PROJECT,
            "--role",
            "write",
            "--ttl",
            "300s",
            "--as",
            ORCH,
        ],
        &[],
    );
    assert!(o.status.success(), "trantor invite: {}", text(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(token.len(), 48, "{}", text(&o));
    let mut invited = Seat::new("invited", None);
    invited.start(&url, &[("RELAY_INVITE", &token)]);
    invited.wait_on_bus();
    direct_message_gets_a_receipt(&url, &ops, &invited, "ZEBRA-2");

    // The same token again: already spent.
    let mut again = Seat::new("again", None);
    again.start(&url, &[("RELAY_INVITE", &token)]);
    let log = again.wait_exit();
    assert!(log.contains("refused to enroll again:p"), "{log}");

    // On the operator's machine: the seat mints its own invite with the owner key.
    let mut owned = Seat::new("owned", Some(&ops));
    owned.start(&url, &[("RELAY_OWNER_IDENTITY", ORCH)]);
    owned.wait_on_bus();
    direct_message_gets_a_receipt(&url, &ops, &owned, "ZEBRA-3");
}

/// `trantor identity list` and `revoke` on our hub: a revoked seat's key gets 401 afterwards.
#[test]
fn identity_list_and_revoke_on_our_hub() {
    let Some(hub) = EnforceHub::start(false, "tofu") else {
        return;
    };
    let url = hub.url();
    let dir = tempfile::tempdir().expect("tmp");
    let ops = operator(&hub, dir.path());
    let seat_bus = dir.path().join("seat");
    std::fs::create_dir_all(&seat_bus).expect("bus");
    let o = trantor(
        &seat_bus,
        &url,
        &[
            "identity",
            "enroll",
            "--session",
            "claude:p",
            "--kind",
            "agent",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = trantor(
        &seat_bus,
        &url,
        &["send", "--session", "claude:p", ORCH, "before the revoke"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));

    let o = trantor(
        &ops,
        &url,
        &["identity", "list", "--as", ORCH, "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<&str> = v["identities"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&ORCH) && names.contains(&"claude:p"), "{v}");

    let o = trantor(
        &ops,
        &url,
        &["identity", "revoke", "claude:p", "--as", ORCH],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("revoked claude:p"),
        "{}",
        text(&o)
    );
    let o = trantor(
        &seat_bus,
        &url,
        &["send", "--session", "claude:p", ORCH, "after the revoke"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("401"), "{err}");
    assert!(err.contains("trantor identity enroll"), "{err}");

    // Listing needs the owner role: the revoked seat's key cannot.
    let o = trantor(
        &seat_bus,
        &url,
        &["identity", "list", "--session", "claude:p"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// A key file other users can read is refused by the runner, the MCP server and the CLI, with
/// the file and the fix named; the file is left alone.
#[test]
fn a_key_file_with_loose_permissions_is_refused_everywhere() {
    let dir = tempfile::tempdir().expect("tmp");
    let bus = dir.path().join("bus");
    let key = keys::load_or_create(&bus, "claude:p", "agent").expect("key");
    let path = keys::key_path(&bus, "claude:p");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let url = format!("http://127.0.0.1:{}", free_port());
    let expect_refusal = |what: &str, out: &str| {
        assert!(
            out.contains(&path.display().to_string()) && out.contains("chmod 600"),
            "{what}: {out}"
        );
    };

    let o = trantor(
        &bus,
        &url,
        &["send", "--session", "claude:p", ORCH, "hi"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    expect_refusal("trantor send", &String::from_utf8_lossy(&o.stderr));

    let o = trantor(&bus, &url, &["mcp"], &[("RELAY_SESSION", "claude:p")]);
    assert!(!o.status.success(), "{}", text(&o));
    expect_refusal("trantor mcp", &String::from_utf8_lossy(&o.stderr));

    if common::require_tool("python3") {
        let mut seat = Seat::new("claude", Some(&bus));
        seat.start(&url, &[]);
        expect_refusal("trantor runner", &seat.wait_exit());
    }
    // Nothing replaced the refused key.
    let again = std::fs::read_to_string(&path).expect("key file");
    assert!(again.contains(&key.pubkey()));
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
}

/// `trantor hook <event>` as `session` with bus directory `bus`; its JSON answer.
fn hook(url: &str, bus: &Path, session: &str, event: &str, instance: &str) -> Value {
    use std::io::Write;
    let mut input = json!({
        "session_id": instance, "cwd": bus, "hook_event_name": event,
        "transcript_path": bus.join("transcript.jsonl"), "permission_mode": "default",
    });
    match event {
        "SessionStart" => input["source"] = json!("startup"),
        "UserPromptSubmit" => input["prompt"] = json!("what did the crew say?"),
        _ => {}
    }
    let mut child = Command::new(common::bin())
        .args(["hook", event])
        .env("HOME", bus)
        .env("AGENT_BUS_DIR", bus)
        .env("RELAY_URL", url)
        .env("RELAY_SESSION", session)
        .env("TRANTOR_HOOK_INTERVAL_MS", "0")
        .env("TRANTOR_HOOK_TIMEOUT_MS", "20000")
        .env_remove("RELAY_PROJECT")
        .env_remove("RELAY_AGENT")
        .env_remove("RELAY_INVITE")
        .env_remove("RELAY_OWNER_IDENTITY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hook");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.to_string().as_bytes())
        .expect("hook input");
    drop(stdin);
    let o = child.wait_with_output().expect("hook output");
    assert!(o.status.success(), "hook {event}: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("hook {event}: {e}: {}", text(&o)))
}

trantor_testkit::on_both_hubs!(hooks_sign_with_an_instance_key_on_an_enforce_hub);

/// The hooks of a person's Claude session enroll by TOFU and sign with an instance key for the
/// harness session: a direct message reaches the session through its own (owner-only) inbox.
fn hooks_sign_with_an_instance_key_on_an_enforce_hub(original: bool) {
    let Some(hub) = EnforceHub::start(original, "tofu") else {
        return;
    };
    let url = hub.url();
    let dir = tempfile::tempdir().expect("tmp");
    let ops = operator(&hub, dir.path());
    let me = dir.path().join("me");
    std::fs::create_dir_all(&me).expect("me");
    hook(&url, &me, "me:p", "SessionStart", "harness-1");
    assert!(keys::enrolled_marker(&me, "me:p").is_file());
    assert!(keys::instance_key_path(&me, "me:p", "harness-1").is_file());
    let o = trantor(
        &ops,
        &url,
        &[
            "send",
            "--session",
            ORCH,
            "me:p",
            "HOOK-SIGNED-DM please look",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v = hook(&url, &me, "me:p", "UserPromptSubmit", "harness-1");
    let ctx = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or("");
    assert!(ctx.contains("HOOK-SIGNED-DM"), "{v}");
}

/// A hub serving HTTPS in enforce mode: a seat, the CLI and the operator reach it at
/// `https://` through reqwest's rustls support, trusting the hub's self-signed certificate from
/// `RELAY_CA_CERT`; without it the client says what is missing.
#[test]
fn our_seat_joins_an_https_enforce_hub() {
    if !common::require_tools(&["openssl", "python3"]) {
        return;
    }
    let certs = tempfile::tempdir().expect("certs");
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args([
            "-subj",
            "/CN=trantor-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(o.status.success(), "{}", text(&o));
    let hub = Hub::start_with(|a| {
        a.auth = "enforce".into();
        a.bootstrap_token = Some(BOOT.into());
        a.tls_cert = Some(cert.clone());
        a.tls_key = Some(key.clone());
    });
    let url = format!("https://127.0.0.1:{}", hub.port);
    let ca = cert.to_string_lossy().to_string();
    let tls = [("RELAY_CA_CERT", ca.as_str())];
    let dir = tempfile::tempdir().expect("tmp");
    let ops = dir.path().join("ops");
    std::fs::create_dir_all(&ops).expect("ops");

    // Without the CA file: a clear refusal, nothing sent in clear text.
    let o = trantor(
        &ops,
        &url,
        &[
            "identity",
            "enroll",
            "--session",
            ORCH,
            "--bootstrap-token",
            BOOT,
        ],
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("RELAY_CA_CERT"),
        "{}",
        text(&o)
    );

    let o = trantor(
        &ops,
        &url,
        &[
            "identity",
            "enroll",
            "--session",
            ORCH,
            "--bootstrap-token",
            BOOT,
        ],
        &tls,
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut seat = Seat::new("claude", None);
    seat.start(&url, &tls);
    seat.wait_on_bus();
    let o = trantor(
        &ops,
        &url,
        &[
            "send",
            "--session",
            ORCH,
            "claude:p",
            "Please implement TLS-7",
        ],
        &tls,
    );
    assert!(o.status.success(), "{}", text(&o));
    wait_until("the receipt over HTTPS", LONG, || {
        let o = trantor(
            &ops,
            &url,
            &["inbox", "--session", ORCH, "--since", "0", "--json"],
            &tls,
        );
        String::from_utf8_lossy(&o.stdout).contains("done on claude:p")
    });
}
