//! `GET /openapi.json`: an OpenAPI 3.1 document generated from the router's own route table
//! ([`crate::routes::table`]), so the description cannot drift from what is served. Request
//! bodies and replies are the JSON schemas of the very `trantor_proto` types the handlers decode
//! and return (schemars), limits included, so the document and the wire cannot drift either.

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

/// Produces the schema of one wire type (a `$ref` into `components/schemas`).
pub type Shape = fn(&mut SchemaGenerator) -> Schema;

/// The [`Shape`] of `T`.
pub fn shape<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// How a route answers methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET only.
    Get,
    /// POST only.
    Post,
    /// GET and POST.
    Any,
}

/// The JSON type of a parameter or body field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A number.
    Num,
    /// A boolean.
    Bool,
    /// An array.
    Arr,
    /// An object.
    Obj,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Str => "string",
            Ty::Int => "integer",
            Ty::Num => "number",
            Ty::Bool => "boolean",
            Ty::Arr => "array",
            Ty::Obj => "object",
        }
    }
}

/// A query parameter or body field.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Name on the wire.
    pub name: &'static str,
    /// JSON type.
    pub ty: Ty,
    /// Required.
    pub required: bool,
    /// What it means.
    pub desc: &'static str,
    /// Longest accepted value (characters for strings, items for arrays), as the hub enforces.
    pub max: Option<usize>,
    /// Smallest accepted value (integers and numbers), as the hub enforces.
    pub min: Option<i64>,
    /// A pattern every accepted value matches (ECMA regex), as the hub enforces.
    pub pattern: Option<&'static str>,
}

/// Shorthand for a [`Field`].
pub const fn f(name: &'static str, ty: Ty, required: bool, desc: &'static str) -> Field {
    Field {
        name,
        ty,
        required,
        desc,
        max: None,
        min: None,
        pattern: None,
    }
}

impl Field {
    /// The same field with the limit the hub enforces on it.
    pub const fn max(mut self, n: usize) -> Field {
        self.max = Some(n);
        self
    }

    /// The same field with the smallest value the hub accepts.
    pub const fn min(mut self, n: i64) -> Field {
        self.min = Some(n);
        self
    }

    /// The same field with a pattern its values match.
    pub const fn pattern(mut self, p: &'static str) -> Field {
        self.pattern = Some(p);
        self
    }

    /// Refuse a decoded query value this field's documentation does not allow — its type,
    /// length, minimum and pattern, as the document states them — with the hub's 400, so a
    /// route that ignores a parameter on some path (`/delivery?id=` ignores `limit`) still
    /// refuses what the document calls malformed.
    pub fn check(&self, value: &str) -> crate::error::ApiResult<()> {
        let bad = |what: String| Err(crate::error::ApiError::bad_request(what));
        match self.ty {
            Ty::Str => {
                if let Some(max) = self.max {
                    crate::error::check_len(self.name, value, max)?;
                }
                match self.pattern {
                    Some(p) if !matches_pattern(p, value) => {
                        bad(format!("{} must match {p}", self.name))
                    }
                    _ => Ok(()),
                }
            }
            // As `Params::int` reads it: empty is absent, anything else must be an integer.
            Ty::Int if value.is_empty() => Ok(()),
            Ty::Int => match (crate::extract::parse_int(value), self.min) {
                (None, _) => bad(format!("{} must be an integer", self.name)),
                (Some(v), Some(min)) if v < min => {
                    bad(format!("{} must be at least {min}", self.name))
                }
                _ => Ok(()),
            },
            // As `/poll` reads `wait`: trimmed, empty is absent, else a finite number.
            Ty::Num if value.trim().is_empty() => Ok(()),
            Ty::Num => match (value.trim().parse::<f64>(), self.min) {
                (Ok(v), _) if !v.is_finite() => bad(format!("{} must be a number", self.name)),
                (Err(_), _) => bad(format!("{} must be a number", self.name)),
                (Ok(v), Some(min)) if v < min as f64 => {
                    bad(format!("{} must be at least {min}", self.name))
                }
                _ => Ok(()),
            },
            // As `Params::flag` reads it.
            Ty::Bool => match value.to_ascii_lowercase().as_str() {
                "0" | "false" | "no" | "off" | "1" | "true" | "yes" | "on" => Ok(()),
                _ => bad(format!(
                    "{} must be a boolean: 1 or 0 (true/false)",
                    self.name
                )),
            },
            Ty::Arr | Ty::Obj => Ok(()),
        }
    }

    fn schema(&self) -> Value {
        let mut s = json!({ "type": self.ty.name() });
        match (self.ty, self.max) {
            (Ty::Str, Some(n)) => s["maxLength"] = json!(n),
            (Ty::Arr, Some(n)) => s["maxItems"] = json!(n),
            _ => {}
        }
        if self.ty == Ty::Int {
            // Query integers are decoded as i64; an empty value reads as absent.
            s["format"] = json!("int64");
            s["minimum"] = json!(self.min.unwrap_or(i64::MIN));
            s["maximum"] = json!(i64::MAX);
            if !self.required {
                return json!({ "anyOf": [s, { "type": "string", "maxLength": 0 }] });
            }
        }
        if self.ty == Ty::Num {
            if let Some(min) = self.min {
                s["minimum"] = json!(min);
            }
            // An empty value reads as absent.
            if !self.required {
                return json!({ "anyOf": [s, { "type": "string", "maxLength": 0 }] });
            }
        }
        // A required text must be non-blank: the hub refuses "" and "  " with a 400.
        if self.required && self.ty == Ty::Str {
            s["minLength"] = json!(1);
            s["pattern"] = json!(trantor_proto::limits::NON_BLANK_PATTERN);
        }
        if let Some(p) = self.pattern {
            s["pattern"] = json!(p);
        }
        s
    }
}

/// Whether `value` matches the documented pattern `p` (a search, as JSON Schema means it).
/// Query patterns are written in the syntax ECMAScript and Rust's `regex` share; one that does
/// not compile here refuses nothing (the tests compile every documented one).
fn matches_pattern(p: &'static str, value: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static CACHE: LazyLock<Mutex<HashMap<&'static str, Option<regex::Regex>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut cache = match CACHE.lock() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    match cache.entry(p).or_insert_with(|| regex::Regex::new(p).ok()) {
        Some(re) => re.is_match(value),
        None => true,
    }
}

/// The documentation half of a route-table entry.
#[derive(Debug, Clone, Copy)]
pub struct RouteDoc {
    /// Methods.
    pub verb: Verb,
    /// Path (axum syntax, no parameters are used).
    pub path: &'static str,
    /// One-line summary.
    pub summary: &'static str,
    /// Query parameters.
    pub query: &'static [Field],
    /// The JSON body's type (POST).
    pub body: Option<Shape>,
    /// The success reply's type (None: a free-form JSON object, or text for `/metrics`).
    pub reply: Option<Shape>,
}

fn operation(doc: &RouteDoc, method: &str, g: &mut SchemaGenerator) -> Value {
    let params: Vec<Value> = doc
        .query
        .iter()
        .map(|q| {
            json!({
                "name": q.name,
                "in": "query",
                "required": q.required,
                "description": q.desc,
                "schema": q.schema(),
            })
        })
        .collect();
    let ok = if doc.path == "/metrics" {
        json!({
            "description": "Prometheus text exposition",
            "content": { "text/plain": { "schema": { "type": "string" } } }
        })
    } else if let Some(media) = crate::ui::media_type(doc.path) {
        json!({
            "description": "Dashboard asset",
            "content": { media: { "schema": { "type": "string" } } }
        })
    } else {
        let schema = match doc.reply {
            Some(reply) => reply(g).to_value(),
            None => json!({ "type": "object" }),
        };
        json!({
            "description": "Success (JSON)",
            "content": { "application/json": { "schema": schema } }
        })
    };
    let mut op = json!({
        "summary": doc.summary,
        "operationId": format!("{method}{}", doc.path.replace(['/', '-', '.'], "_")),
        "responses": {
            "200": ok,
            "4XX": {
                "description": "Client error: {\"error\": \"...\"} plus fields such as limit, kinds, id",
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
            }
        }
    });
    if !params.is_empty() {
        op["parameters"] = Value::Array(params);
    }
    if let (true, Some(body)) = (method == "post", doc.body) {
        // The body type's own schema, plus `_op` (handled by the idempotency layer before the
        // route, for every POST). An empty body is read as `{}`: it is optional exactly when
        // the type has no required field and no combined constraint (`allOf`, `anyOf`).
        let schema = body(g).to_value();
        let mut resolved = resolve(&schema, g);
        mark_required(&mut resolved);
        let required = resolved
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
            || ["allOf", "anyOf", "oneOf"]
                .iter()
                .any(|k| resolved.get(*k).is_some());
        let op_key = json!({
            "type": "object",
            "properties": { "_op": {
                "type": ["string", "number", "null"],
                "maxLength": trantor_proto::limits::OP_ID,
                "description": "idempotency key (≤80 chars; longer is a 400): a replay on the same route returns the first reply"
            } }
        });
        op["requestBody"] = json!({
            "required": required,
            "content": { "application/json": { "schema": { "allOf": [schema, op_key] } } }
        });
    }
    op
}

/// Wire types keep `#[serde(default)]` on the fields the hub requires (so a missing one gets the
/// hub's own 400 rather than serde's); they carry `x-required` instead, which becomes JSON
/// Schema's `required` here (and drops the meaningless `default`).
fn mark_required(schema: &mut Value) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let mut names = Vec::new();
    for (name, prop) in props.iter_mut() {
        if let Some(p) = prop.as_object_mut()
            && p.remove("x-required").is_some()
        {
            p.remove("default");
            names.push(Value::String(name.clone()));
        }
    }
    if names.is_empty() {
        return;
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.extend(names);
    } else {
        schema["required"] = Value::Array(names);
    }
}

/// The schema a `$ref` into `components/schemas` points at (or `schema` itself).
fn resolve(schema: &Value, g: &SchemaGenerator) -> Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .rsplit('/')
            .next()
            .and_then(|name| g.definitions().get(name))
            .cloned()
            .unwrap_or(Value::Null),
        None => schema.clone(),
    }
}

/// The white space `str::trim` removes (Unicode `White_Space`), as the body of a class.
const WHITE_SPACE: &str =
    r"\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";

/// A pattern spelled so ECMAScript (what JSON Schema means), Python (what schemathesis and
/// hypothesis run) and the hub agree on it: `\s` and `\S` become the explicit white-space class
/// (the engines' sets differ: Python's includes `\x1C`–`\x1F`, ECMAScript's `\uFEFF`), and `$`
/// becomes `$(?!\n)` (Python's `$` also matches before a final newline; ECMAScript's does not).
pub fn portable_pattern(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 16);
    let mut chars = p.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('s') if in_class => out.push_str(WHITE_SPACE),
                Some('s') => {
                    out.push('[');
                    out.push_str(WHITE_SPACE);
                    out.push(']');
                }
                Some('S') if !in_class => {
                    out.push_str("[^");
                    out.push_str(WHITE_SPACE);
                    out.push(']');
                }
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A `]` (or `^]`) right after the opening bracket is a literal.
                let rest = chars.as_str();
                for lit in ["^]", "]", "^"] {
                    if let Some(tail) = rest.strip_prefix(lit) {
                        out.push_str(lit);
                        chars = tail.chars();
                        break;
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '$' if !in_class => out.push_str(r"$(?!\n)"),
            _ => out.push(c),
        }
    }
    out
}

/// Rewrite every `pattern` of a schema tree with [`portable_pattern`].
fn portable_patterns(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                match x {
                    Value::String(p) if k == "pattern" => *p = portable_pattern(p),
                    _ => portable_patterns(x),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(portable_patterns),
        _ => {}
    }
}

/// The range of the Rust integer type schemars names by `format`, as serde decodes it.
fn format_range(format: &str) -> Option<(i128, i128)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "int64" | "int" => (i64::MIN.into(), i64::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX.into()),
        _ => return None,
    })
}

/// Give every integer of a schema tree the range of its Rust type where the type does not say
/// a narrower one: schemars writes `format: uint64` but no `maximum`, and a value past it is the
/// hub's 400 (schemathesis, random seed: `ledger.turns` 7.96e19 on `POST /advise`). A bound the
/// type already states is kept.
fn integer_bounds(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            let range = map
                .get("format")
                .and_then(Value::as_str)
                .and_then(format_range);
            if let (true, Some((lo, hi))) = (integer, range) {
                let wider = |k: &str, lo: bool, n: i128, map: &Map<String, Value>| match map
                    .get(k)
                    .and_then(Value::as_f64)
                {
                    None => true,
                    Some(b) if lo => b < n as f64,
                    Some(b) => b > n as f64,
                };
                if wider("minimum", true, lo, map) {
                    map.insert("minimum".into(), int_value(lo));
                }
                if wider("maximum", false, hi, map) {
                    map.insert("maximum".into(), int_value(hi));
                }
            }
            map.values_mut().for_each(integer_bounds);
        }
        Value::Array(items) => items.iter_mut().for_each(integer_bounds),
        _ => {}
    }
}

fn int_value(n: i128) -> Value {
    match (i64::try_from(n), u64::try_from(n)) {
        (Ok(i), _) => Value::from(i),
        (_, Ok(u)) => Value::from(u),
        _ => Value::Null,
    }
}

/// Build the OpenAPI 3.1 document for the given route table.
pub fn document(routes: &[RouteDoc]) -> Value {
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .into_generator();
    let mut paths = Map::new();
    for r in routes {
        let entry = paths
            .entry(r.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        let methods: &[&str] = match r.verb {
            Verb::Get => &["get"],
            Verb::Post => &["post"],
            Verb::Any => &["get", "post"],
        };
        for m in methods {
            entry[*m] = operation(r, m, &mut g);
        }
    }
    let mut schemas = g.take_definitions(true);
    for schema in schemas.values_mut() {
        mark_required(schema);
    }
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": { "error": { "type": "string" } },
        }),
    );
    for schema in schemas.values_mut() {
        portable_patterns(schema);
        integer_bounds(schema);
    }
    let mut paths = Value::Object(paths);
    portable_patterns(&mut paths);
    integer_bounds(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "trantor hub",
            "version": trantor_proto::VERSION,
            "description": "Message bus, presence and card board for crews of AI coding agents. \
                            Wire-compatible with the JavaScript trantor hub's core. All timestamps \
                            are Unix epoch milliseconds.",
        },
        "paths": paths,
        "components": { "schemas": schemas },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::{SendReply, SendRequest};

    fn doc() -> Value {
        const Q: &[Field] = &[
            f("session", Ty::Str, true, "who"),
            f("limit", Ty::Int, false, "n").min(0),
        ];
        document(&[
            RouteDoc {
                verb: Verb::Get,
                path: "/inbox",
                summary: "read",
                query: Q,
                body: None,
                reply: None,
            },
            RouteDoc {
                verb: Verb::Post,
                path: "/send",
                summary: "send",
                query: &[],
                body: Some(shape::<SendRequest>),
                reply: Some(shape::<SendReply>),
            },
            RouteDoc {
                verb: Verb::Get,
                path: "/metrics",
                summary: "m",
                query: &[],
                body: None,
                reply: None,
            },
        ])
    }

    #[test]
    fn bodies_and_replies_come_from_the_wire_types_with_their_limits() {
        let doc = doc();
        let body = &doc["paths"]["/send"]["post"]["requestBody"];
        assert_eq!(
            body["required"], true,
            "{body} {}",
            doc["components"]["schemas"]
        );
        let send = &doc["components"]["schemas"]["SendRequest"];
        assert_eq!(send["properties"]["from"]["maxLength"], 200, "{send}");
        assert_eq!(send["properties"]["from"]["minLength"], 1, "{send}");
        assert_eq!(send["properties"]["text"]["maxLength"], 65536, "{send}");
        assert_eq!(send["properties"]["kind"]["maxLength"], 40, "{send}");
        let required: Vec<&str> = send["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(
            required.contains(&"from") && required.contains(&"text"),
            "{send}"
        );
        let op = &body["content"]["application/json"]["schema"]["allOf"][1]["properties"]["_op"];
        assert_eq!(op["maxLength"], 80);
        let reply =
            &doc["paths"]["/send"]["post"]["responses"]["200"]["content"]["application/json"];
        assert_eq!(reply["schema"]["$ref"], "#/components/schemas/SendReply");
        assert!(doc["components"]["schemas"]["SendReply"]["properties"]["id"].is_object());
    }

    #[test]
    fn a_query_value_is_checked_against_everything_the_document_says() {
        let limit = f("limit", Ty::Int, false, "n").min(1);
        assert!(limit.check("").is_ok(), "empty is absent");
        assert!(limit.check("5").is_ok());
        for bad in ["x", "0", "-3", "1.5", " 5"] {
            assert!(limit.check(bad).is_err(), "{bad}");
        }
        let wait = f("wait", Ty::Num, false, "s").min(0);
        assert!(wait.check("0.5").is_ok() && wait.check("").is_ok());
        for bad in ["-1", "soon", "NaN", "inf"] {
            assert!(wait.check(bad).is_err(), "{bad}");
        }
        let peek = f("peek", Ty::Bool, false, "b");
        assert!(peek.check("1").is_ok() && peek.check("False").is_ok());
        assert!(peek.check("maybe").is_err() && peek.check("").is_err());
        let open = f("open", Ty::Str, false, "o").pattern("^(1|true|yes|on)$");
        assert!(open.check("yes").is_ok());
        assert!(open.check("0").is_err() && open.check("1 ").is_err());
        let s = f("s", Ty::Str, false, "s").max(3);
        assert!(s.check("abc").is_ok() && s.check("abcd").is_err());
    }

    #[test]
    fn patterns_are_spelled_for_every_engine() {
        assert_eq!(portable_pattern("^(a|b)$"), "^(a|b)$(?!\\n)");
        assert_eq!(portable_pattern(r"[$]\$"), r"[$]\$");
        let p = portable_pattern(r"^[^\s:]{1,3}\s*$");
        assert!(p.starts_with(r"^[^\t\n\x0B"), "{p}");
        assert!(p.contains(r"\u3000:]{1,3}[\t\n"), "{p}");
        assert!(p.ends_with(r"\u3000]*$(?!\n)"), "{p}");
        assert_eq!(
            portable_pattern(r"\S"),
            format!("[^{WHITE_SPACE}]"),
            "outside a class"
        );
        assert_eq!(portable_pattern(r"[]a]$"), r"[]a]$(?!\n)");
        // The document carries them so.
        let doc = doc();
        let schemas = doc["components"]["schemas"].to_string();
        assert!(!schemas.contains(r#"\\s"#), "{schemas}");
    }

    #[test]
    fn every_integer_carries_its_types_range() {
        let mut v = json!({
            "a": { "type": "integer", "format": "uint64", "minimum": 0 },
            "b": { "type": ["integer", "null"], "format": "int64" },
            "c": { "type": "integer", "format": "uint8", "minimum": 1, "maximum": 3 },
            "d": { "type": "integer", "format": "int64", "minimum": -5 },
            "e": { "type": "integer" },
            "f": { "type": "string", "format": "int64" },
        });
        integer_bounds(&mut v);
        assert_eq!(v["a"]["maximum"], json!(u64::MAX), "{v}");
        assert_eq!(v["a"]["minimum"], 0, "{v}");
        assert_eq!(v["b"]["minimum"], json!(i64::MIN), "{v}");
        assert_eq!(v["b"]["maximum"], json!(i64::MAX), "{v}");
        assert_eq!(
            (&v["c"]["minimum"], &v["c"]["maximum"]),
            (&json!(1), &json!(3))
        );
        assert_eq!(
            (&v["d"]["minimum"], &v["d"]["maximum"]),
            (&json!(-5), &json!(i64::MAX))
        );
        assert!(v["e"].get("maximum").is_none() && v["f"].get("maximum").is_none());
        // In a document: a reply's u64 and a request's.
        let doc = doc();
        let send = &doc["components"]["schemas"]["SendRequest"]["properties"]["re"];
        assert!(send.get("maximum").is_some(), "{send}");
    }

    #[test]
    fn query_limits_and_content_types_are_documented() {
        let doc = doc();
        let params = &doc["paths"]["/inbox"]["get"]["parameters"];
        assert_eq!(params[0]["schema"]["minLength"], 1);
        assert_eq!(params[1]["schema"]["anyOf"][0]["minimum"], 0);
        assert_eq!(params[1]["schema"]["anyOf"][1]["maxLength"], 0);
        let ok = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        assert!(ok["text/plain"].is_object(), "{ok}");
    }
}
