//! The typed HTTP client for the hub, used by the runner, the MCP server and the CLI.
//!
//! An `https://` hub is reached over reqwest's rustls support (roots from [`crate::tls`]). Every call has
//! a timeout; a long-poll's timeout is its hold plus a margin, so a dead hub never
//! wedges a caller. A client given a [`Signer`] signs every request (`trantor-v1`,
//! docs/protocol.md §2): the URL is built here and the path and query are signed exactly as they
//! go on the wire, and a body is serialised once and those same bytes are hashed and sent.

use crate::auth::{InstanceKey, SignedHeaders};
use crate::keys::Keypair;
use crate::types::*;
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The key a client signs with: a seat's durable key, or an instance key the durable key
/// endorsed (the MCP server and hooks).
#[derive(Clone)]
pub enum Signer {
    /// The durable key of the session (the runner).
    Durable(Arc<Keypair>),
    /// An endorsed instance key; the hub attributes its requests to the durable identity.
    Instance(Arc<InstanceKey>),
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signer::Durable(k) => write!(f, "Signer::Durable({})", k.pubkey()),
            Signer::Instance(k) => write!(
                f,
                "Signer::Instance({} for {})",
                k.instance_id, k.durable_pubkey
            ),
        }
    }
}

impl Signer {
    /// The signature headers for one request.
    pub fn sign(&self, method: &str, path_and_query: &str, body: &[u8]) -> SignedHeaders {
        match self {
            Signer::Durable(k) => k.sign_request(method, path_and_query, body),
            Signer::Instance(k) => k.sign_request(method, path_and_query, body),
        }
    }

    /// The public key of the identity the hub will see (the durable one for an instance key).
    pub fn identity_pubkey(&self) -> String {
        match self {
            Signer::Durable(k) => k.pubkey(),
            Signer::Instance(k) => k.durable_pubkey.clone(),
        }
    }
}

/// Why a hub call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The hub could not be reached (connection refused, reset, DNS).
    #[error("hub unreachable at {url}: {source}")]
    Unreachable {
        /// The hub base URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The call did not finish in time.
    #[error("hub call {path} timed out after {after:?}")]
    Timeout {
        /// The path called.
        path: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The hub answered with a non-2xx status.
    #[error("hub refused {path}: {status} {}", body.error)]
    Http {
        /// The path called.
        path: String,
        /// HTTP status code.
        status: u16,
        /// The error body (`error` plus extra fields).
        body: ErrorBody,
    },
    /// The request could not be built (a bad base URL or an unserialisable body).
    #[error("cannot build the request to {path}: {message}")]
    Request {
        /// The path called.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// `POST /delivery` from a runner instance that is not the session's fenced one: another
    /// runner took the seat over (docs/protocol.md "Delivery").
    #[error("superseded: session {session} is fenced by instance {current}")]
    Superseded {
        /// The session.
        session: String,
        /// The instance the hub holds current.
        current: String,
    },
    /// The reply was not the JSON shape expected.
    #[error("hub reply to {path} was not understood: {message}")]
    Decode {
        /// The path called.
        path: String,
        /// What failed to parse.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status when the hub answered, else `None`.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the hub could not be reached at all (as opposed to refusing the call).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { .. } | ClientError::Timeout { .. }
        )
    }
}

/// The error of a non-2xx reply: its JSON error body, or the first 300 characters of whatever
/// else it was.
fn refusal(path: &str, status: u16, bytes: &[u8]) -> ClientError {
    let body = serde_json::from_slice::<ErrorBody>(bytes).unwrap_or_else(|_| ErrorBody {
        error: String::from_utf8_lossy(bytes).chars().take(300).collect(),
        extra: Default::default(),
    });
    ClientError::Http {
        path: path.to_string(),
        status,
        body,
    }
}

/// A client for one hub.
#[derive(Debug, Clone)]
pub struct HubClient {
    base: String,
    /// The HTTP client, or why none could be built (an `https://` hub without usable roots in
    /// `RELAY_CA_CERT`): every call then fails with that reason, before anything is sent.
    http: Result<reqwest::Client, String>,
    timeout: Duration,
    signer: Option<Signer>,
    /// A bearer token sent as `Authorization: Bearer …` instead of a signature.
    bearer: Option<String>,
}

impl HubClient {
    /// A client for the hub at `base` (e.g. `http://127.0.0.1:4477`) with a 10 s call timeout.
    pub fn new(base: impl Into<String>) -> Self {
        let base = base.into().trim_end_matches('/').to_string();
        crate::tls::install_default_provider();
        // reqwest carries the TLS of an `https://` hub itself, over rustls on the ring provider
        // with `RELAY_CA_CERT` as the only roots (crate::tls).
        let tls = if base.starts_with("https://") {
            crate::tls::client_config()
        } else {
            crate::tls::no_roots_config()
        };
        let http = tls.and_then(|tls| {
            reqwest::Client::builder()
                .no_proxy()
                .pool_idle_timeout(Duration::from_secs(30))
                .tls_backend_preconfigured(tls)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        });
        HubClient {
            base,
            http,
            timeout: Duration::from_secs(10),
            signer: None,
            bearer: None,
        }
    }

    /// The same client sending `Authorization: Bearer <token>` on every request (a token
    /// minted with `POST /token/mint`) instead of signing.
    pub fn with_bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self.signer = None;
        self
    }

    /// The same client signing every request with `signer`.
    pub fn with_signer(mut self, signer: Signer) -> Self {
        self.signer = Some(signer);
        self
    }

    /// The same client signing with `signer` when given, unsigned otherwise.
    pub fn with_optional_signer(mut self, signer: Option<Signer>) -> Self {
        self.signer = signer;
        self
    }

    /// The key this client signs with, if any.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
    }

    /// The same client with a different per-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The hub base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Builds, signs and sends one request, and decodes the reply as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        let req = self.build(method, path, query, body)?;
        self.finish(path, timeout, req).await
    }

    /// Builds and signs one request.
    ///
    /// The query is encoded into the URL here and `path + "?" + query` of that URL is what is
    /// signed, so the signature covers exactly the request target sent.
    fn build(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        let bad = |message: String| ClientError::Request {
            path: path.to_string(),
            message,
        };
        let http = self.http.as_ref().map_err(|e| bad(e.clone()))?;
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .map_err(|e| bad(format!("{}{path}: {e}", self.base)))?;
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let mut req = http.request(method.clone(), url.clone());
        if let Some(token) = &self.bearer {
            req = req.bearer_auth(token);
        }
        if let Some(signer) = &self.signer {
            let target = match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_string(),
            };
            let bytes = body.as_deref().unwrap_or_default();
            for (name, value) in signer.sign(method.as_str(), &target, bytes).headers {
                req = req.header(name, value);
            }
        }
        if let Some(bytes) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        Ok(req)
    }

    /// Open a signed `GET path?query` whose body is read as it arrives (the SSE `/stream`):
    /// the response once its status is a success, read with `chunk()`. Only connecting is
    /// bounded by the client's timeout; the body may stay open for as long as the hub sends.
    pub async fn open_stream(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::Response, ClientError> {
        let req = self
            .build(Method::GET, path, query, None)?
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let sent = tokio::time::timeout(self.timeout, req.send()).await;
        let resp = match sent {
            Err(_) => {
                return Err(ClientError::Timeout {
                    path: path.to_string(),
                    after: self.timeout,
                });
            }
            Ok(r) => r.map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                source: e,
            })?,
        };
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(refusal(path, status, &bytes));
        }
        Ok(resp)
    }

    async fn finish<T: DeserializeOwned>(
        &self,
        path: &str,
        timeout: Duration,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let fut = async {
            let resp = req.send().await.map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                source: e,
            })?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                source: e,
            })?;
            if !(200..300).contains(&status) {
                return Err(refusal(path, status, &bytes));
            }
            serde_json::from_slice::<T>(&bytes).map_err(|e| ClientError::Decode {
                path: path.to_string(),
                message: e.to_string(),
            })
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                path: path.to_string(),
                after: timeout,
            }),
        }
    }

    /// `GET path?query` decoded as `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        self.get_with_timeout(path, query, self.timeout).await
    }

    /// `GET` with an explicit timeout (long-polls).
    pub async fn get_with_timeout<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        timeout: Duration,
    ) -> Result<T, ClientError> {
        self.call(Method::GET, path, query, None, timeout).await
    }

    /// `POST path` with a JSON body, decoded as `T`.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Request {
            path: path.to_string(),
            message: format!("request body: {e}"),
        })?;
        self.call(Method::POST, path, &[], Some(bytes), self.timeout)
            .await
    }

    /// `POST path` carrying the idempotency key `op` as `_op`.
    ///
    /// The body must serialise to a JSON object. When the call times out, the outcome is
    /// looked up once with `GET /_op?id=op`: a recorded success is returned as if the reply had
    /// arrived, a recorded refusal as [`ClientError::Http`] with the stored status and body, and
    /// an unknown outcome as the original [`ClientError::Timeout`] (the write may or may not
    /// have happened; repeating it with the same `op` is safe).
    pub async fn post_with_op<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        op: &str,
    ) -> Result<T, ClientError> {
        let mut value = serde_json::to_value(body).map_err(|e| ClientError::Decode {
            path: path.to_string(),
            message: format!("request body: {e}"),
        })?;
        if let Value::Object(map) = &mut value {
            map.insert("_op".to_string(), Value::String(op.to_string()));
        }
        match self.post::<Value, T>(path, &value).await {
            Err(ClientError::Timeout { path: p, after }) => {
                let outcome: OpReply = match self.get("/_op", &[("id", op.to_string())]).await {
                    Ok(o) => o,
                    Err(_) => return Err(ClientError::Timeout { path: p, after }),
                };
                let body = outcome.body.unwrap_or(Value::Null);
                match outcome.status.as_str() {
                    "committed" => serde_json::from_value(body).map_err(|e| ClientError::Decode {
                        path: p,
                        message: e.to_string(),
                    }),
                    "rejected" => Err(ClientError::Http {
                        path: p,
                        status: outcome.code.unwrap_or(400),
                        body: serde_json::from_value(body).unwrap_or_default(),
                    }),
                    _ => Err(ClientError::Timeout { path: p, after }),
                }
            }
            other => other,
        }
    }

    /// `POST /delivery/fence`: make `instance` the session's current runner instance.
    pub async fn delivery_fence(
        &self,
        session: &str,
        instance: &str,
    ) -> Result<crate::delivery::DeliveryFenceReply, ClientError> {
        let req = crate::delivery::DeliveryFenceRequest {
            session: session.to_string(),
            instance: instance.to_string(),
        };
        self.post("/delivery/fence", &req).await
    }

    /// `POST /delivery`: append one state to a message's record. A 409 (another instance holds
    /// the session's fence) is [`ClientError::Superseded`].
    pub async fn delivery_mark(
        &self,
        mark: &crate::delivery::DeliveryMark,
    ) -> Result<crate::delivery::DeliveryMarkReply, ClientError> {
        match self.post("/delivery", mark).await {
            Err(ClientError::Http {
                status: 409, body, ..
            }) => {
                let current = body
                    .extra
                    .get("current")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                Err(ClientError::Superseded {
                    session: mark.session.clone(),
                    current,
                })
            }
            other => other,
        }
    }

    /// `GET /delivery?session=S&open=1`: the session's messages not yet consumed or failed.
    pub async fn delivery_open(
        &self,
        session: &str,
    ) -> Result<crate::delivery::DeliveryOpen, ClientError> {
        self.get(
            "/delivery",
            &[("session", session.to_string()), ("open", "1".to_string())],
        )
        .await
    }

    /// `GET /inbox` (non-blocking; `peek` leaves the delivery ledger alone).
    pub async fn inbox(
        &self,
        session: &str,
        since: i64,
        peek: bool,
    ) -> Result<InboxReply, ClientError> {
        let mut q = vec![
            ("session", session.to_string()),
            ("since", since.to_string()),
        ];
        if peek {
            q.push(("peek", "1".to_string()));
        }
        self.get("/inbox", &q).await
    }

    /// `GET /poll`: held by the hub until a message arrives or `wait` passes.
    pub async fn poll(
        &self,
        session: &str,
        since: i64,
        wait: Duration,
    ) -> Result<InboxReply, ClientError> {
        self.poll_with(session, since, wait, false).await
    }

    /// `GET /poll`, with `peek` leaving the delivery ledger alone (a seat's own tools: the
    /// ledger is its runner's).
    pub async fn poll_with(
        &self,
        session: &str,
        since: i64,
        wait: Duration,
        peek: bool,
    ) -> Result<InboxReply, ClientError> {
        let mut q = vec![
            ("session", session.to_string()),
            ("since", since.to_string()),
            ("wait", wait.as_secs().to_string()),
        ];
        if peek {
            q.push(("peek", "1".to_string()));
        }
        self.get_with_timeout("/poll", &q, wait + Duration::from_secs(30))
            .await
    }

    /// `GET /contracts?session=&project=`.
    pub async fn contracts(
        &self,
        session: &str,
        project: Option<&str>,
    ) -> Result<ContractsReply, ClientError> {
        let mut q = vec![("session", session.to_string())];
        if let Some(p) = project {
            q.push(("project", p.to_string()));
        }
        self.get("/contracts", &q).await
    }

    /// `GET /tasks?project=` (full cards).
    pub async fn tasks(&self, project: Option<&str>) -> Result<Vec<Card>, ClientError> {
        let mut q = vec![];
        if let Some(p) = project {
            q.push(("project", p.to_string()));
        }
        let reply: TasksReply = self.get("/tasks", &q).await?;
        Ok(reply.tasks)
    }
}

/// The routes that are one request and nothing more, as a table of typed [`HubClient`] methods:
/// `post name(Body) -> Reply = "/path"` sends the body; `get name() -> Reply = "/path"` asks
/// with no query; `get name(arg: Type = "key") -> …` asks with `key=arg`; `get name(query) -> …`
/// passes the caller's query pairs.
macro_rules! routes {
    ($(
        $(#[doc = $doc:literal])*
        $verb:ident $name:ident ($($args:tt)*) -> $reply:ty = $path:literal;
    )*) => {
        impl HubClient {
            $(routes!(@one $(#[doc = $doc])* $verb $name ($($args)*) -> $reply = $path);)*
        }
    };
    (@one $(#[doc = $doc:literal])* post $name:ident ($body:ty) -> $reply:ty = $path:literal) => {
        $(#[doc = $doc])*
        pub async fn $name(&self, body: &$body) -> Result<$reply, ClientError> {
            self.post($path, body).await
        }
    };
    (@one $(#[doc = $doc:literal])* get $name:ident () -> $reply:ty = $path:literal) => {
        $(#[doc = $doc])*
        pub async fn $name(&self) -> Result<$reply, ClientError> {
            self.get($path, &[]).await
        }
    };
    (@one $(#[doc = $doc:literal])* get $name:ident (query) -> $reply:ty = $path:literal) => {
        $(#[doc = $doc])*
        pub async fn $name(&self, query: &[(&str, String)]) -> Result<$reply, ClientError> {
            self.get($path, query).await
        }
    };
    (@one $(#[doc = $doc:literal])*
        get $name:ident ($arg:ident: $ty:ty = $key:literal) -> $reply:ty = $path:literal) => {
        $(#[doc = $doc])*
        pub async fn $name(&self, $arg: $ty) -> Result<$reply, ClientError> {
            self.get($path, &[($key, $arg.to_string())]).await
        }
    };
}

routes! {
    /// `GET /health` (our hub's reply, or the original's fewer fields: [`HealthReply`]).
    get health() -> HealthReply = "/health";
    /// `POST /send`.
    post send(SendRequest) -> SendReply = "/send";
    /// `POST /register`.
    post register(RegisterRequest) -> RegisterReply = "/register";
    /// `GET /peer?session=`.
    get peer(session: &str = "session") -> PeerReply = "/peer";
    /// `GET /peers`.
    get peers() -> PeersReply = "/peers";
    /// `POST /task`.
    post task_create(TaskCreateRequest) -> TaskReply = "/task";
    /// `POST /task/update`.
    post task_update(TaskUpdateRequest) -> TaskReply = "/task/update";
    /// `POST /task/checklist-toggle`.
    post checklist_toggle(ChecklistToggleRequest) -> TaskReply = "/task/checklist-toggle";
    /// `GET /card?id=`.
    get card(id: i64 = "id") -> CardReply = "/card";
    /// `GET /events` with the given filters (`by`, `since`, `limit`, `project`, `type`, `taskId`).
    get events(query) -> EventsReply = "/events";
    /// `GET /lessons?agent=`.
    get lessons(agent: &str = "agent") -> LessonsReply = "/lessons";
    /// `POST /lesson`.
    post lesson(LessonRequest) -> LessonReply = "/lesson";
    /// `GET /projects`: every project with its crew, card counts and where it stands.
    get projects() -> crate::lanes::ProjectsReply = "/projects";
    /// `GET /policy`.
    get policy() -> PolicyReply = "/policy";
    /// `POST /turns`: record one finished turn and what it cost (docs/protocol.md §7.6).
    post report_turn(crate::cost::TurnReport) -> crate::cost::TurnReportReply = "/turns";
    /// `GET /cost` with the given query pairs (`card`, `seat`, `project`, `since`, `by`).
    get cost(query) -> crate::cost::CostReply = "/cost";
    /// `GET /delivery?id=N`: the life of one message.
    get delivery(id: i64 = "id") -> crate::delivery::DeliveryRecord = "/delivery";
    /// `POST /enroll`, signed by the key being enrolled (docs/protocol.md §2).
    post enroll(crate::auth::EnrollRequest) -> crate::auth::EnrollReply = "/enroll";
    /// `POST /invite` (owner of `*`): a one-use token granting `scopes`.
    post invite(crate::auth::InviteRequest) -> crate::auth::InviteReply = "/invite";
    /// `GET /identities` (owner of `*`).
    get identities() -> crate::auth::IdentitiesReply = "/identities";
    /// `POST /identity/revoke` (owner of `*`).
    post revoke_identity(crate::auth::RevokeRequest) -> crate::auth::RevokeReply
        = "/identity/revoke";
}
