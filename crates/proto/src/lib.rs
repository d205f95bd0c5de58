//! Wire types of the trantor hub protocol, shared limits, secret detection, terminal-safe text
//! and the typed client.
//!
//! Every JSON shape that crosses the wire between the hub, the runner, the MCP server and the CLI
//! is defined once, here. Field names follow the original JavaScript hub (camelCase) so its own
//! runner and MCP server work against ours unchanged.

pub mod advise;
pub mod auth;
pub mod backoff;
pub mod budget;
pub mod claims;
pub mod client;
pub mod cost;
pub mod credentials;
pub mod date;
pub mod delivery;
pub mod enroll;
pub mod focus;
pub mod fsx;
pub mod git;
pub mod handoff;
pub mod identity;
pub mod keys;
pub mod lanes;
pub mod limits;
pub mod net;
pub mod proposals;
pub mod secrets;
pub mod status;
pub mod text;
pub mod tls;
pub mod types;

pub use client::{ClientError, HubClient, Signer};
pub use cost::{CostGroup, CostReply, CostSummary, TokenUsage, TurnReport, TurnReportReply};
pub use delivery::{
    DeliveryEntry, DeliveryFenceReply, DeliveryFenceRequest, DeliveryMark, DeliveryMarkReply,
    DeliveryOpen, DeliveryOpenItem, DeliveryRecord, DeliveryState, MarkState,
};
pub use types::*;

/// Milliseconds since the Unix epoch, the unit of every timestamp on the wire.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The project part of a session name: the text after its last colon (empty if none).
pub fn session_project(session: &str) -> &str {
    session.rsplit_once(':').map(|(_, p)| p).unwrap_or("")
}

/// The version of this build, as `trantor --version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
