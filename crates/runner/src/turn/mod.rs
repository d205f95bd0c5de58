//! One agent CLI run: the executor (process group, captured and redacted output, the time box
//! and the cut), how each CLI is invoked (drivers), the liveness watchdog, and the WIP snapshot
//! a cut takes before it kills the CLI.

pub mod drivers;
mod exec;
pub(crate) mod snapshot;
pub(crate) mod usage;
pub(crate) mod watchdog;

pub(crate) use exec::{TurnEvent, TurnRun, TurnSpec, Wrap, run_turn, stop_current_turn};
