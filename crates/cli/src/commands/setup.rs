//! `trantor setup`: the hub as an always-on user service, then config, connect, the Claude Code
//! plugin and doctor — the one command a new install runs.
//!
//! Where the hub runs, in order of preference: a systemd user unit on Linux
//! (`~/.config/systemd/user/trantor-hub.service`, enabled and started with `systemctl --user`), a
//! launchd agent on macOS (`~/Library/LaunchAgents/dev.trantor.hub.plist`), and where neither can
//! run — a container, where `systemctl --user is-system-running` fails — a supervised background
//! hub: `trantor setup-supervise` restarts `trantor hub` when it exits, its pid in
//! `<bus>/hub-supervisor.pid`. What setup wrote is listed in `<bus>/setup.json`, which `setup
//! --remove` reads to take exactly that out again. Running setup twice changes nothing the second
//! time.

use super::connect::{ConnectArgs, our_command};
use super::plugin::PluginArgs;
use super::{Common, find_on_path, usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use trantor_proto::HubClient;
use trantor_proto::backoff::Backoff;

pub(crate) const SETUP_HELP: &str = concat!(
    "\
Steps, each said as it is done:
  1. hub      a systemd user unit on Linux (~/.config/systemd/user/trantor-hub.service), a launchd
              agent on macOS (~/Library/LaunchAgents/dev.trantor.hub.plist); where neither can
              run (a container: `systemctl --user is-system-running` fails) a supervised
              background hub (pid file <bus dir>/hub-supervisor.pid, log <bus dir>/logs/hub.log)
              that does not survive a reboot — run `trantor setup` again after one
  2. config   `url` in <bus dir>/config.json names the hub (kept when it is already set)
  3. connect  `trantor connect`: trantor mcp in every agent CLI found here
  4. plugin   `trantor plugin install` when Claude Code (`claude`) is installed
  5. doctor   `trantor doctor`

Idempotent: a second run changes nothing. What it wrote is listed in <bus dir>/setup.json;
`trantor setup --remove` stops the hub and takes out exactly that. `--dry-run` prints the unit it
would write and changes nothing.

Examples:
  trantor setup
  trantor setup --dry-run
  trantor setup --port 4500 --service background
  trantor setup --remove

",
    exit_codes!()
);

/// Where the hub runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// systemd --user where it runs, launchd on macOS, else background.
    Auto,
    /// A systemd user unit.
    Systemd,
    /// A launchd agent (macOS).
    Launchd,
    /// A supervised background process with a pid file.
    Background,
}

/// `trantor setup` options.
#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Print what would be done (and the unit it would write); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop the hub service and take out what setup wrote.
    #[arg(long, conflicts_with = "dry_run")]
    pub remove: bool,
    /// How the hub runs.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "TRANTOR_SETUP_SERVICE"
    )]
    pub service: Service,
    /// The hub's port on 127.0.0.1.
    #[arg(long, default_value_t = 4477, env = "RELAY_PORT")]
    pub port: u16,
    /// Skip `trantor connect` and the plugin.
    #[arg(long)]
    pub no_connect: bool,
    /// The Claude Code CLI for the plugin [default: `claude` on PATH].
    #[arg(long, value_name = "PATH", env = "TRANTOR_CLAUDE")]
    pub claude: Option<PathBuf>,
}

/// `trantor setup-supervise`: keep `trantor hub` running (internal, started by setup).
#[derive(Debug, clap::Args)]
pub struct SuperviseArgs {
    /// Where the supervisor's pid is kept (removed when it stops).
    #[arg(long, value_name = "FILE")]
    pub pid_file: PathBuf,
}

/// What setup wrote, for `--remove` (`<bus>/setup.json`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    service: Option<Service>,
    unit: Option<PathBuf>,
    pid_file: Option<PathBuf>,
    /// The `url` setup wrote into config.json (removed only while it still says this).
    config_url: Option<String>,
    connect: bool,
    plugin: bool,
}

const UNIT_NAME: &str = "trantor-hub.service";
const LAUNCHD_LABEL: &str = "dev.trantor.hub";

fn bus() -> PathBuf {
    trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv)
}

fn home() -> PathBuf {
    trantor_proto::identity::home(&trantor_proto::identity::ProcessEnv)
}

fn manifest_path() -> PathBuf {
    bus().join("setup.json")
}

fn pid_file() -> PathBuf {
    bus().join("hub-supervisor.pid")
}

fn hub_log() -> PathBuf {
    bus().join("logs").join("hub.log")
}

fn systemd_unit_path() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home().join(".config"))
        .join("systemd/user")
        .join(UNIT_NAME)
}

fn launchd_plist_path() -> PathBuf {
    home()
        .join("Library/LaunchAgents")
        .join(format!("{LAUNCHD_LABEL}.plist"))
}

/// The systemd user unit that runs `exe hub` on `port`.
pub(crate) fn systemd_unit(exe: &str, port: u16, data_dir: &Path) -> String {
    format!(
        "# Written by `trantor setup`; `trantor setup --remove` takes it out.\n\
         [Unit]\n\
         Description=trantor hub (message bus and board for agent crews)\n\
         After=network.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={} hub\n\
         Environment=RELAY_HOST=127.0.0.1\n\
         Environment=RELAY_PORT={port}\n\
         Environment=\"RELAY_DATA_DIR={}\"\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        unit_word(exe),
        data_dir.display()
    )
}

/// `s` as one word of a unit's command line (quoted when it holds a space or a quote).
fn unit_word(s: &str) -> String {
    if s.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'')
    {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s.to_string()
    }
}

/// The launchd agent that runs `exe hub` on `port`.
pub(crate) fn launchd_plist(exe: &str, port: u16, data_dir: &Path, log: &Path) -> String {
    let x = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `trantor setup`; `trantor setup --remove` takes it out. -->
<plist version="1.0">
<dict>
  <key>Label</key><string>{LAUNCHD_LABEL}</string>
  <key>ProgramArguments</key><array><string>{}</string><string>hub</string></array>
  <key>EnvironmentVariables</key><dict>
    <key>RELAY_HOST</key><string>127.0.0.1</string>
    <key>RELAY_PORT</key><string>{port}</string>
    <key>RELAY_DATA_DIR</key><string>{}</string>
  </dict>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>StandardOutPath</key><string>{}</string>
  <key>StandardErrorPath</key><string>{}</string>
</dict>
</plist>
"#,
        x(exe),
        x(&data_dir.display().to_string()),
        x(&log.display().to_string()),
        x(&log.display().to_string()),
    )
}

/// Run `program args`; whether it succeeded and what it printed.
fn run(program: &str, args: &[&str]) -> (bool, String) {
    match std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
            .trim()
            .to_string(),
        ),
        Err(e) => (false, e.to_string()),
    }
}

/// Whether a systemd user manager answers here (`running` or `degraded`); else why not.
fn systemd_user_runs() -> Result<(), String> {
    if find_on_path("systemctl").is_none() {
        return Err("no systemctl on PATH".into());
    }
    let (_, out) = run("systemctl", &["--user", "is-system-running"]);
    let state = out.lines().last().unwrap_or("").trim().to_string();
    if state == "running" || state == "degraded" {
        Ok(())
    } else {
        Err(format!(
            "`systemctl --user is-system-running` says {}",
            if state.is_empty() { "nothing" } else { &state }
        ))
    }
}

/// The service to use for `asked` on this machine, and why when it fell back.
fn resolve(asked: Service) -> (Service, Option<String>) {
    match asked {
        Service::Auto if cfg!(target_os = "macos") => (Service::Launchd, None),
        Service::Auto => match systemd_user_runs() {
            Ok(()) => (Service::Systemd, None),
            Err(why) => (Service::Background, Some(why)),
        },
        s => (s, None),
    }
}

fn say_step(what: &str, state: &str, detail: &str) {
    say!("{what:<9} {state:<13} {detail}");
}

/// `url` in config.json: set it to `url` when absent; the url setup wrote, if it wrote one.
fn ensure_config_url(url: &str, dry_run: bool) -> anyhow::Result<(Option<String>, String)> {
    let path = bus().join("config.json");
    let mut cfg = super::hub_pins::read(&path)?;
    match cfg.get("url").and_then(Value::as_str) {
        Some(u) if u == url => Ok((None, format!("{} already names {url}", path.display()))),
        Some(u) => Ok((
            None,
            format!(
                "{} names {u}; kept (`trantor hub set` or RELAY_URL changes it)",
                path.display()
            ),
        )),
        None => {
            if !dry_run {
                cfg.insert("url".into(), Value::String(url.to_string()));
                super::hub_pins::write(&path, &cfg)?;
            }
            Ok((
                Some(url.to_string()),
                format!("{}: url = {url}", path.display()),
            ))
        }
    }
}

/// The live supervisor's pid from the pid file, if it is running.
fn supervisor_pid() -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    super::seats::process_alive(pid, "setup-supervise").then_some(pid)
}

/// Start the supervised background hub (unless one runs); its pid.
fn start_background(exe: &str, port: u16) -> Result<(u32, bool), String> {
    use std::os::unix::process::CommandExt;
    if let Some(pid) = supervisor_pid() {
        return Ok((pid, false));
    }
    let log = hub_log();
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let (out, err) = super::seats::log_handles(&log)?;
    let child = std::process::Command::new(exe)
        .arg("setup-supervise")
        .arg("--pid-file")
        .arg(pid_file())
        .env("RELAY_PORT", port.to_string())
        .env("RELAY_HOST", "127.0.0.1")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the hub supervisor: {e}"))?;
    let pid = child.id();
    trantor_proto::fsx::write_atomic(&pid_file(), format!("{pid}\n").as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", pid_file().display()))?;
    Ok((pid, true))
}

async fn answers(url: &str) -> bool {
    HubClient::new(url.to_string())
        .with_timeout(Duration::from_secs(2))
        .health()
        .await
        .is_ok()
}

async fn wait_health(url: &str, within: Duration) -> bool {
    let hub = HubClient::new(url.to_string()).with_timeout(Duration::from_secs(2));
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if hub.health().await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<bool> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(false);
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    trantor_proto::fsx::write_atomic(path, text.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

fn load_manifest() -> Manifest {
    std::fs::read_to_string(manifest_path())
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn claude_present(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(p) => p.is_file().then(|| p.to_path_buf()),
        None => find_on_path("claude"),
    }
}

pub(crate) async fn setup(a: SetupArgs) -> anyhow::Result<ExitCode> {
    if a.remove {
        return remove(a).await;
    }
    let exe = our_command(None);
    let url = format!("http://127.0.0.1:{}", a.port);
    let data_dir = bus();
    let (service, fell_back) = resolve(a.service);
    let mut m = load_manifest();
    if a.dry_run {
        say_dry_run(&exe, a.port, &data_dir, service, fell_back.as_deref());
    } else {
        let hub = HubService {
            exe: &exe,
            port: a.port,
            data_dir: &data_dir,
            url: &url,
        };
        match service {
            Service::Systemd => m.unit = Some(hub.install_systemd()?),
            Service::Launchd => m.unit = Some(hub.install_launchd()?),
            Service::Background | Service::Auto => {
                hub.start_supervised(fell_back.as_deref()).await?;
                m.pid_file = Some(pid_file());
            }
        }
        m.service = Some(service);
        if !wait_health(&url, Duration::from_secs(20)).await {
            let t = super::seats::tail(&hub_log(), 5).join("\n  ");
            anyhow::bail!("the hub at {url} did not answer /health; its log says:\n  {t}");
        }
        say_step("", "", &format!("{url}/health answers"));
    }

    let (wrote, detail) = ensure_config_url(&url, a.dry_run)?;
    say_step(
        "config",
        match (&wrote, a.dry_run) {
            (Some(_), true) => "would-write",
            (Some(_), false) => "written",
            (None, _) => "unchanged",
        },
        &detail,
    );
    if wrote.is_some() && !a.dry_run {
        m.config_url = wrote;
    }
    if !a.dry_run {
        save_manifest(&m)?;
    }

    if !a.no_connect {
        connect_clients(&a, &mut m).await?;
    }
    if a.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    say!("doctor:");
    let _ = super::doctor::doctor(super::doctor::DoctorArgs {
        common: Common {
            url: Some(url.clone()),
            ..Common::default()
        },
    })
    .await?;
    say!(
        "Set up: the hub runs at {url}. Undo all of it with `trantor setup --remove` (what it \
         wrote is listed in {}).",
        manifest_path().display()
    );
    Ok(ExitCode::SUCCESS)
}

/// What `--dry-run` would do about the hub: the unit this platform's service manager would
/// get, and how the hub would run.
fn say_dry_run(exe: &str, port: u16, data_dir: &Path, service: Service, fell_back: Option<&str>) {
    let url = format!("http://127.0.0.1:{port}");
    say!("trantor setup --dry-run: nothing is changed.");
    // The unit this platform's service manager would get, whatever runs here.
    if cfg!(target_os = "macos") {
        say!("--- {}", launchd_plist_path().display());
        say!("{}", launchd_plist(exe, port, data_dir, &hub_log()));
    } else {
        say!("--- {}", systemd_unit_path().display());
        say!("{}", systemd_unit(exe, port, data_dir));
    }
    say!("---");
    match (service, fell_back) {
        (Service::Background, Some(why)) => say_step(
            "hub",
            "would-start",
            &format!(
                "systemd --user cannot run here ({why}): a supervised background hub on {url} \
                 instead (pid file {})",
                pid_file().display()
            ),
        ),
        (Service::Background, None) => say_step(
            "hub",
            "would-start",
            &format!("a supervised background hub on {url}"),
        ),
        (s, _) => say_step(
            "hub",
            "would-write",
            &format!("the {s:?} unit above, enabled and started"),
        ),
    }
}

/// The hub setup installs: this binary, on a local port, storing under the bus folder.
struct HubService<'a> {
    exe: &'a str,
    port: u16,
    data_dir: &'a Path,
    url: &'a str,
}

impl HubService<'_> {
    /// Write, enable and start the systemd user unit; returns its path.
    fn install_systemd(&self) -> anyhow::Result<PathBuf> {
        let path = systemd_unit_path();
        let changed = write_if_changed(&path, &systemd_unit(self.exe, self.port, self.data_dir))?;
        let (ok, out) = run("systemctl", &["--user", "daemon-reload"]);
        let (ok2, out2) = run("systemctl", &["--user", "enable", "--now", UNIT_NAME]);
        if !(ok && ok2) {
            anyhow::bail!(
                "wrote {} but systemctl --user could not start it: {out} {out2} (rerun with \
                 --service background to run the hub without systemd)",
                path.display()
            );
        }
        say_step(
            "hub",
            if changed { "installed" } else { "unchanged" },
            &format!(
                "systemd user unit {} (systemctl --user status {UNIT_NAME})",
                path.display()
            ),
        );
        Ok(path)
    }

    /// Write and load the launchd agent; returns its path.
    fn install_launchd(&self) -> anyhow::Result<PathBuf> {
        let path = launchd_plist_path();
        let plist = launchd_plist(self.exe, self.port, self.data_dir, &hub_log());
        let changed = write_if_changed(&path, &plist)?;
        let p = path.display().to_string();
        if changed {
            let _ = run("launchctl", &["unload", &p]);
        }
        let (ok, out) = run("launchctl", &["load", "-w", &p]);
        if !ok && changed {
            anyhow::bail!("wrote {p} but launchctl could not load it: {out}");
        }
        say_step(
            "hub",
            if changed { "installed" } else { "unchanged" },
            &format!("launchd agent {p}"),
        );
        Ok(path)
    }

    /// Start (or keep) the supervised background hub; refused when a hub setup did not start
    /// already answers on the port. `fell_back` says why systemd was not used.
    async fn start_supervised(&self, fell_back: Option<&str>) -> anyhow::Result<()> {
        let url = self.url;
        if supervisor_pid().is_none() && answers(url).await {
            return Err(usage(format!(
                "a hub already answers at {url} that setup did not start: stop it (or pick \
                 another --port) and rerun `trantor setup`"
            )));
        }
        let (pid, started) = start_background(self.exe, self.port).map_err(anyhow::Error::msg)?;
        let why = fell_back
            .map(|w| format!("systemd --user cannot run here ({w}); "))
            .unwrap_or_default();
        say_step(
            "hub",
            if started { "started" } else { "unchanged" },
            &format!(
                "{why}a supervised background hub (pid {pid}, pid file {}, log {}); it restarts \
                 the hub if it exits, but not after a reboot: run `trantor setup` again then",
                pid_file().display(),
                hub_log().display()
            ),
        );
        Ok(())
    }
}

/// Install the Claude Code plugin (when Claude Code is here), then wire the agent CLIs with
/// `trantor connect`, noting both in the manifest.
async fn connect_clients(a: &SetupArgs, m: &mut Manifest) -> anyhow::Result<()> {
    // The plugin first: connect then leaves Claude Code to it instead of writing hooks the
    // plugin would take out again.
    match claude_present(a.claude.as_deref()) {
        Some(c) if a.dry_run => say_step(
            "plugin",
            "would-install",
            &format!("the trantor plugin into Claude Code ({})", c.display()),
        ),
        Some(c) => {
            say!("plugin:");
            let code = super::plugin::install(plugin_args(Some(c))).await?;
            m.plugin = code == ExitCode::SUCCESS;
        }
        None => say_step(
            "plugin",
            "skipped",
            "Claude Code (`claude`) is not installed here; connect wires the other CLIs",
        ),
    }
    say!("connect:");
    super::connect::connect(connect_args(a.dry_run, false)).await?;
    m.connect = true;
    if !a.dry_run {
        save_manifest(m)?;
    }
    Ok(())
}

fn save_manifest(m: &Manifest) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(m)?;
    text.push('\n');
    write_if_changed(&manifest_path(), &text)?;
    Ok(())
}

fn connect_args(dry_run: bool, remove: bool) -> ConnectArgs {
    ConnectArgs {
        dry_run,
        only: Vec::new(),
        all: false,
        force: false,
        command: None,
        json: false,
        remove,
        http: false,
        token: None,
        session: None,
        url: None,
    }
}

fn plugin_args(claude: Option<PathBuf>) -> PluginArgs {
    PluginArgs {
        dir: None,
        claude,
        command: None,
        json: false,
    }
}

async fn remove(a: SetupArgs) -> anyhow::Result<ExitCode> {
    let m = load_manifest();
    let mut failed = false;
    // The hub, however setup ran it.
    let unit = systemd_unit_path();
    if unit.exists() {
        let _ = run("systemctl", &["--user", "disable", "--now", UNIT_NAME]);
        std::fs::remove_file(&unit)?;
        let _ = run("systemctl", &["--user", "daemon-reload"]);
        say_step(
            "hub",
            "removed",
            &format!("stopped and removed {}", unit.display()),
        );
    }
    let plist = launchd_plist_path();
    if plist.exists() {
        let p = plist.display().to_string();
        let _ = run("launchctl", &["unload", "-w", &p]);
        std::fs::remove_file(&plist)?;
        say_step("hub", "removed", &format!("unloaded and removed {p}"));
    }
    match supervisor_pid() {
        Some(pid) => {
            if super::seats::stop_process(pid, Duration::from_secs(10)) {
                say_step(
                    "hub",
                    "stopped",
                    &format!("the background hub (supervisor pid {pid})"),
                );
            } else {
                failed = true;
                say_step("hub", "error", &format!("pid {pid} did not stop"));
            }
            let _ = std::fs::remove_file(pid_file());
        }
        None => {
            let _ = std::fs::remove_file(pid_file());
            if m.service.is_none() && !unit.exists() {
                say_step("hub", "unchanged", "setup runs no hub here");
            }
        }
    }
    if !a.no_connect {
        if m.plugin || super::plugin::enabled(&home()) {
            say!("plugin:");
            let code = super::plugin::remove(plugin_args(a.claude.clone())).await?;
            failed |= code != ExitCode::SUCCESS;
        }
        if m.connect {
            say!("connect:");
            let code = super::connect::connect(connect_args(false, true)).await?;
            failed |= code != ExitCode::SUCCESS;
        }
    }
    if let Some(url) = &m.config_url {
        let path = bus().join("config.json");
        let mut cfg: Map<String, Value> = super::hub_pins::read(&path)?;
        if cfg.get("url").and_then(Value::as_str) == Some(url.as_str()) {
            cfg.remove("url");
            super::hub_pins::write(&path, &cfg)?;
            say_step(
                "config",
                "removed",
                &format!("url = {url} from {}", path.display()),
            );
        }
    }
    let _ = std::fs::remove_file(manifest_path());
    say!(
        "The hub's data (messages, board) stays in {}.",
        bus().display()
    );
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `trantor setup-supervise`: run `trantor hub` and start it again when it exits (back-off up
/// to 30 s, reset after a minute of uptime), until SIGTERM or SIGINT, which stop the hub too.
pub(crate) async fn supervise(a: SuperviseArgs) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let exe = std::env::current_exe()?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    trantor_proto::fsx::write_atomic(&a.pid_file, format!("{}\n", std::process::id()).as_bytes())?;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&exe)
            .arg("hub")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stop = tokio::select! {
            st = child.wait() => {
                eprintln!("trantor setup-supervise: the hub exited ({st:?}); starting it again in {}ms", backoff.current().as_millis());
                false
            }
            _ = term.recv() => true,
            _ = int.recv() => true,
        };
        if stop {
            // The hub shuts down cleanly on SIGTERM; it gets 10 s before SIGKILL.
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            let _ = std::fs::remove_file(&a.pid_file);
            return Ok(ExitCode::SUCCESS);
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff.reset();
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.current()) => {}
            _ = term.recv() => { let _ = std::fs::remove_file(&a.pid_file); return Ok(ExitCode::SUCCESS); }
            _ = int.recv() => { let _ = std::fs::remove_file(&a.pid_file); return Ok(ExitCode::SUCCESS); }
        }
        backoff.grow();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_this_binary_on_the_port() {
        let u = systemd_unit("/opt/trantor", 4500, Path::new("/home/a/.agent-bus"));
        assert!(u.contains("ExecStart=/opt/trantor hub\n"), "{u}");
        assert!(u.contains("Environment=RELAY_PORT=4500\n"), "{u}");
        assert!(u.contains("WantedBy=default.target"), "{u}");
        let p = launchd_plist("/opt/a&b/trantor", 4500, Path::new("/d"), Path::new("/l"));
        assert!(p.contains("<string>/opt/a&amp;b/trantor</string>"), "{p}");
    }
}
