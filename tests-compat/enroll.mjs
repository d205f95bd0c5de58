#!/usr/bin/env node
// enroll.mjs PKG HUB_URL SESSION [KIND]
// Creates (or loads) the Ed25519 key for SESSION in $AGENT_BUS_DIR/keys (default $HOME/.agent-bus/keys)
// using the ORIGINAL package's lib/identity.mjs, and enrolls it on HUB_URL with a signed POST /enroll
// (trust-on-first-use; the hub allows it on a loopback bind with RELAY_ENROLL unset/"tofu").
// Needed before the ORIGINAL crew runner can work against a RELAY_AUTH=enforce hub: the runner only
// self-enrolls through an owner-minted invite and otherwise spins on 401s. Prints the hub's JSON reply.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
const [pkg, hub, name, kind = "agent"] = process.argv.slice(2);
if (!pkg || !hub || !name) { console.error("usage: enroll.mjs PKG HUB_URL SESSION [KIND]"); process.exit(1); }
const { loadOrCreate } = await import(pathToFileURL(join(pkg, "lib", "identity.mjs")).href);
const { sfetchJson } = await import(pathToFileURL(join(pkg, "lib", "signed-fetch.mjs")).href);
const id = loadOrCreate(name, kind);
const r = await sfetchJson(`${hub.replace(/\/$/, "")}/enroll`, { payload: { pubkey: id.pubkey, name, kind }, identity: id });
const text = await r.text();
console.log(text);
process.exit(r.ok ? 0 : 2);
