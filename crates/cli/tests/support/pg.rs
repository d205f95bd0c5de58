//! A PostgreSQL database per test for the integration tests that run hubs on PostgreSQL:
//! created on the server at `TRANTOR_TEST_PG` (default `postgres://postgres@127.0.0.1:5432`),
//! dropped with every connection to it when the test ends. Included with `#[path]` next to
//! `mod common;`.
#![allow(dead_code)]

use crate::common::{Hub, skip_or_fail};
use std::sync::atomic::{AtomicU32, Ordering};

/// The server URL without a database.
pub fn server() -> String {
    std::env::var("TRANTOR_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
        .trim_end_matches('/')
        .to_string()
}

/// A database for one test, dropped (with every connection to it) when this is dropped.
pub struct Db {
    /// Database name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl Db {
    /// A fresh database, or `None` after a SKIP (or a failure under CI) when no server answers.
    pub fn create() -> Option<Db> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "trantor_test_hubs_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        match admin(&format!("CREATE DATABASE {name}")) {
            Ok(()) => Some(Db {
                url: format!("{}/{name}", server()),
                name,
            }),
            Err(e) => {
                skip_or_fail(&format!("needs PostgreSQL at {} ({e})", server()));
                None
            }
        }
    }

    /// A hub process on this database.
    pub fn hub(&self, dir: &tempfile::TempDir, extra: &[(&str, &str)]) -> Hub {
        let mut env = vec![("RELAY_DATABASE_URL", self.url.as_str())];
        env.extend_from_slice(extra);
        Hub::start_in(dir.path(), crate::common::free_port(), &env)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Run SQL on the server's `postgres` database.
pub fn admin(sql: &str) -> Result<(), String> {
    let mut c = postgres::Client::connect(&format!("{}/postgres", server()), postgres::NoTls)
        .map_err(|e| e.to_string())?;
    c.batch_execute(sql).map_err(|e| e.to_string())
}
