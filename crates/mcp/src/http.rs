//! The hub's `/mcp`: the same `relay_*` tools as `trantor mcp`, served over MCP's Streamable
//! HTTP transport (rmcp's server) for agents that connect to a URL instead of starting a binary.
//!
//! `trantor hub` mounts [`router`] beside its routes (docs/protocol.md §10.7). Every
//! MCP session gets one [`HttpRelay`]; each tool call names the bus session it speaks as with the
//! `X-Relay-Session` header (and optionally `X-Relay-Project`), and is run by a [`Relay`] for that
//! session which calls the hub's own HTTP routes, exactly as the stdio server does. Host and
//! Origin are checked by the hub's front layer before a request reaches this service.

use crate::server::Relay;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool,
};
#[allow(deprecated)]
use rmcp::model::{SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use trantor_proto::identity::Identity;

/// The header that names the bus session a tool call speaks as.
pub const HDR_SESSION: &str = "x-relay-session";
/// The header that names the project (default: the part of the session after its last `:`).
pub const HDR_PROJECT: &str = "x-relay-project";

/// Bus sessions one MCP session may speak as before the oldest cached one is dropped (each holds
/// an inbox cursor and an HTTP client).
const MAX_SESSIONS_PER_CLIENT: usize = 16;

/// How the `/mcp` service is set up.
#[derive(Clone)]
pub struct HttpOptions {
    /// The hub's own base URL: tool calls go back to its routes.
    pub hub_url: String,
    /// Whether a header may name the calling session: true when the hub's auth mode is `off`
    /// or `warn` (an unsigned request names its sender in its body there anyway). In `enforce`
    /// mode only a bearer token names the caller.
    pub header_identity: bool,
    /// Resolves an `Authorization: Bearer` token to the session, project and role it is bound
    /// to (the hub's own token store).
    pub tokens: Option<trantor_proto::auth::TokenResolver>,
    /// The hub's in-process event feed, for resource subscriptions.
    pub events: Option<tokio::sync::broadcast::Sender<Arc<trantor_proto::Event>>>,
    /// Most MCP sessions at once; an `initialize` beyond it is a 503 (idle sessions end after
    /// five minutes).
    pub max_sessions: usize,
}

/// The default of [`HttpOptions::max_sessions`] (about 60 KB each while idle).
pub const DEFAULT_MAX_SESSIONS: usize = 2000;

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("hub_url", &self.hub_url)
            .field("header_identity", &self.header_identity)
            .field("tokens", &self.tokens.is_some())
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

/// The MCP server of one Streamable HTTP session.
#[derive(Clone)]
pub struct HttpRelay {
    opts: Arc<HttpOptions>,
    /// The one HTTP client of every session's calls back into the hub.
    client: trantor_proto::HubClient,
    /// Lists the tools and prompts, reads for a client that names no session, and holds this
    /// MCP session's subscriptions and logging level.
    template: Relay,
    /// One relay per bus session this client has spoken as, with its inbox cursor.
    relays: Arc<Mutex<HashMap<(String, String), Relay>>>,
}

impl HttpRelay {
    /// A server for one MCP session.
    pub fn new(opts: Arc<HttpOptions>, client: trantor_proto::HubClient) -> HttpRelay {
        let template = Relay::with_client(identity(&opts.hub_url, "", ""), client.clone())
            .with_seat(false)
            .with_feed(opts.events.clone());
        HttpRelay {
            opts,
            client,
            template,
            relays: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The relay speaking as the session the request names, or the text telling the caller
    /// how to name one.
    async fn relay_for(&self, ctx: &RequestContext<RoleServer>) -> Result<Relay, String> {
        let parts = ctx.extensions.get::<axum::http::request::Parts>();
        let header = |name: &str| {
            parts
                .and_then(|p| p.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let bearer = header("authorization").and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            let token = token.trim();
            (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
        });
        if let (Some(token), Some(resolve)) = (bearer, self.opts.tokens.as_ref()) {
            let Some(rec) = resolve(token.clone()).await else {
                return Err(
                    "the bearer token is unknown, expired or revoked: ask the hub's \
                            owner for a new one (trantor token mint --session <who>:<project>)"
                        .into(),
                );
            };
            if let Some(named) = header(HDR_SESSION).filter(|s| *s != rec.session) {
                return Err(format!(
                    "this token speaks as {}, not {named}: a token never speaks as another \
                     session (drop the X-Relay-Session header or mint a token for {named})",
                    rec.session
                ));
            }
            if let Some(named) = header(HDR_PROJECT).filter(|p| *p != rec.project) {
                return Err(format!(
                    "this token is for project {}, not {named}",
                    rec.project
                ));
            }
            let key = (format!("token:{}", rec.id), rec.project.clone());
            return Ok(self.cached(key, || {
                let mut id = identity(&self.opts.hub_url, &rec.session, &rec.project);
                id.session_via = "the bearer token".into();
                Relay::with_client(id, self.client.clone())
                    .with_seat(false)
                    .with_bearer(&token)
            }));
        }
        if !self.opts.header_identity {
            return Err(
                "this hub enforces signed identity: send the bearer token the hub's owner \
                 minted for this session (trantor token mint --session <who>:<project>) as \
                 `Authorization: Bearer <token>`, or use `trantor mcp` (stdio), which signs"
                    .into(),
            );
        }
        let Some(session) = header(HDR_SESSION) else {
            return Err(
                "name the bus session this client speaks as with the X-Relay-Session \
                        header (e.g. X-Relay-Session: claude:web) in the MCP client's \
                        configuration"
                    .into(),
            );
        };
        let project = match header(HDR_PROJECT) {
            Some(p) => p,
            None => match trantor_proto::session_project(&session) {
                "" => {
                    return Err(format!(
                        "session {session:?} names no project (<who>:<project>); send the \
                         project in the X-Relay-Project header"
                    ));
                }
                p => p.to_string(),
            },
        };
        let url = self.opts.hub_url.clone();
        Ok(self.cached((session.clone(), project.clone()), || {
            Relay::with_client(identity(&url, &session, &project), self.client.clone())
                .with_seat(false)
        }))
    }

    /// The relay cached under `key`, made with `make` the first time.
    fn cached(&self, key: (String, String), make: impl FnOnce() -> Relay) -> Relay {
        let mut relays = self
            .relays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = relays.get(&key) {
            return r.clone();
        }
        if relays.len() >= MAX_SESSIONS_PER_CLIENT
            && let Some(old) = relays.keys().next().cloned()
        {
            relays.remove(&old);
        }
        let relay = make();
        relays.insert(key, relay.clone());
        relay
    }
}

impl HttpRelay {
    /// The relay that answers a read: the named session's, else the anonymous one (reads need
    /// no identity on a hub that takes header identities).
    async fn reader(&self, ctx: &RequestContext<RoleServer>) -> Relay {
        self.relay_for(ctx)
            .await
            .unwrap_or_else(|_| self.template.clone())
    }
}

fn identity(hub_url: &str, session: &str, project: &str) -> Identity {
    Identity {
        session: session.to_string(),
        project: project.to_string(),
        hub_url: hub_url.to_string(),
        hub_via: "the hub serving /mcp".to_string(),
        session_via: "the X-Relay-Session header".to_string(),
    }
}

impl ServerHandler for HttpRelay {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(crate::server::library::capabilities())
            .with_server_info(Implementation::new("trantor", trantor_proto::VERSION))
            .with_instructions(
                "You are a session on the trantor bus (the X-Relay-Session header names which; \
                 relay_whoami shows it). relay_inbox / relay_wait read your messages, relay_send \
                 talks to other sessions (relay_peers lists them), relay_board shows the cards \
                 (mine=true for yours) and relay_task_move moves them todo -> doing -> testing \
                 -> done with a note carrying the evidence.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.template.list_tools(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.template.get_tool(name)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.reader(&context)
            .await
            .list_resources(request, context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.template
            .list_resource_templates(request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.reader(&context)
            .await
            .read_resource(request, context)
            .await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // The subscriber must be able to read the resource as itself (its token's session in
        // enforce mode); the follower then reads the hub's own feed.
        self.reader(&context)
            .await
            .resource_read(&request.uri)
            .await?;
        self.template.subscribe_uri(&request.uri, context.peer)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.template.unsubscribe(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.template.list_prompts(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.reader(&context)
            .await
            .get_prompt(request, context)
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.reader(&context).await.complete(request, context).await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.template.set_level(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is the protocol error the router gives, whoever calls.
        if self.template.get_tool(&request.name).is_none() {
            return self.template.call_tool(request, context).await;
        }
        match self.relay_for(&context).await {
            Ok(relay) => relay.call_tool(request, context).await,
            Err(text) => Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into()),
        }
    }
}

/// The `/mcp` service: Streamable HTTP with in-memory sessions, ended when `shutdown` flips
/// to true (so a client's open SSE stream never holds up the hub's shutdown).
pub fn router(opts: HttpOptions, mut shutdown: tokio::sync::watch::Receiver<bool>) -> axum::Router {
    let ct = tokio_util::sync::CancellationToken::new();
    let stop = ct.clone();
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|s| *s).await;
        stop.cancel();
    });
    let opts = Arc::new(opts);
    let gate_opts = opts.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let gate_sessions = sessions.clone();
    // The hub's front layer checks Host (with --allowed-host) and Origin for every route, this
    // one included; rmcp's own Host list would refuse the names the hub was told to accept.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(ct);
    let client = trantor_proto::HubClient::new(opts.hub_url.clone());
    let service = StreamableHttpService::new(
        move || Ok(HttpRelay::new(opts.clone(), client.clone())),
        sessions,
        config,
    );
    axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let opts = gate_opts.clone();
                let sessions = gate_sessions.clone();
                async move { gate(&opts, &sessions, req, next).await }
            },
        ))
}

/// The token of an `Authorization: Bearer …` header.
fn bearer_of(headers: &axum::http::HeaderMap) -> Option<String> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// Largest `/mcp` POST body read (the hub's own body limit is the same, and runs first).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Whether `body` is a JSON-RPC 2.0 message (or a batch of them): the JSON-RPC error code and
/// text when it is not.
fn check_jsonrpc(body: &[u8]) -> Result<(), (i32, String)> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| (-32700, format!("parse error: the body is not JSON ({e})")))?;
    let one = |m: &serde_json::Value| {
        m.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0")
            && (m.get("method").is_some_and(serde_json::Value::is_string)
                || m.get("result").is_some()
                || m.get("error").is_some())
    };
    let ok = match &v {
        serde_json::Value::Array(items) => !items.is_empty() && items.iter().all(one),
        m => one(m),
    };
    if ok {
        Ok(())
    } else {
        Err((
            -32600,
            "invalid request: not a JSON-RPC 2.0 message ({\"jsonrpc\":\"2.0\", \"method\", …})"
                .into(),
        ))
    }
}

/// A reply of `status` whose body is the JSON-RPC error `code` (id null).
fn rpc_error(status: axum::http::StatusCode, code: i32, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A 503 whose body is a JSON-RPC error: the session table is full.
fn full(max: usize) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": format!(
            "this hub already holds {max} MCP sessions (RELAY_MCP_MAX_SESSIONS); idle ones end \
             after five minutes, retry then"
        )},
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [
            (axum::http::header::RETRY_AFTER, "60".to_string()),
            (
                axum::http::header::CONTENT_TYPE,
                "application/json".to_string(),
            ),
        ],
        body.to_string(),
    )
        .into_response()
}

/// A 401 whose body is a JSON-RPC error (id null) a client can show.
fn unauthorized(error: &str, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32001, "message": message},
    });
    (
        axum::http::StatusCode::UNAUTHORIZED,
        [
            (
                axum::http::header::WWW_AUTHENTICATE,
                format!("Bearer error=\"{error}\""),
            ),
            (
                axum::http::header::CONTENT_TYPE,
                "application/json".to_string(),
            ),
        ],
        body.to_string(),
    )
        .into_response()
}

/// In front of every `/mcp` request: a bearer token that is unknown, expired or revoked is a
/// 401 (in any mode), and so is a request without one on a hub that takes no header identity
/// (`enforce`), so a client learns at `initialize` rather than at its first tool call; a new
/// session beyond [`HttpOptions::max_sessions`] is a 503.
async fn gate(
    opts: &HttpOptions,
    sessions: &LocalSessionManager,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let refusal = match (bearer_of(req.headers()), opts.tokens.as_ref()) {
        (Some(token), Some(resolve)) => resolve(token).await.is_none().then(|| {
            unauthorized(
                "invalid_token",
                "the bearer token is unknown, expired or revoked: ask the hub's owner for a \
                 new one (trantor token mint --session <who>:<project>)",
            )
        }),
        (None, _) if !opts.header_identity => Some(unauthorized(
            "invalid_request",
            "this hub enforces signed identity: send the bearer token the hub's owner \
             minted for this session (trantor token mint --session <who>:<project>) as \
             `Authorization: Bearer <token>`",
        )),
        _ => None,
    };
    if let Some(r) = refusal {
        return r;
    }
    // A POST without a session id opens one: bounded, so idle clients cannot grow the hub.
    let opens =
        req.method() == axum::http::Method::POST && !req.headers().contains_key("mcp-session-id");
    if opens && sessions.sessions.read().await.len() >= opts.max_sessions {
        return full(opts.max_sessions);
    }
    // A body that is not JSON-RPC is a 400 with the JSON-RPC error for it (-32700 not JSON,
    // -32600 not a request), not the transport's bare 415. The hub's body limit (413) ran
    // before this, so the buffer is bounded.
    let req = if req.method() == axum::http::Method::POST {
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
            return rpc_error(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                &format!("the request body is over {MAX_BODY} bytes"),
            );
        };
        if let Err((code, message)) = check_jsonrpc(&bytes) {
            return rpc_error(axum::http::StatusCode::BAD_REQUEST, code, &message);
        }
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))
    } else {
        req
    };
    next.run(req).await
}
