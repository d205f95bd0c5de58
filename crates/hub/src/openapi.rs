//! `GET /openapi.json`: an OpenAPI 3.1 document generated from the router's own route table
//! ([`crate::routes::table`]), so the description cannot drift from what is served.

use serde_json::{Map, Value, json};

/// How a route answers methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET only.
    Get,
    /// POST only.
    Post,
    /// Any method (documented as GET and POST).
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
}

/// Shorthand for a [`Field`].
pub const fn f(name: &'static str, ty: Ty, required: bool, desc: &'static str) -> Field {
    Field {
        name,
        ty,
        required,
        desc,
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
    /// JSON body fields (POST).
    pub body: &'static [Field],
}

fn operation(doc: &RouteDoc, method: &str) -> Value {
    let params: Vec<Value> = doc
        .query
        .iter()
        .map(|q| {
            json!({
                "name": q.name,
                "in": "query",
                "required": q.required,
                "description": q.desc,
                "schema": { "type": q.ty.name() },
            })
        })
        .collect();
    let mut op = json!({
        "summary": doc.summary,
        "operationId": format!("{method}{}", doc.path.replace(['/', '-', '.'], "_")),
        "responses": {
            "200": {
                "description": "Success (JSON)",
                "content": { "application/json": { "schema": { "type": "object" } } }
            },
            "4XX": {
                "description": "Client error: {\"error\": \"...\"} plus fields such as limit, kinds, id",
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
            }
        }
    });
    if !params.is_empty() {
        op["parameters"] = Value::Array(params);
    }
    if method == "post" && !doc.body.is_empty() {
        let mut props = Map::new();
        let mut required = Vec::new();
        for b in doc.body {
            props.insert(
                b.name.to_string(),
                json!({ "type": b.ty.name(), "description": b.desc }),
            );
            if b.required {
                required.push(b.name);
            }
        }
        props.insert(
            "_op".into(),
            json!({ "type": "string", "description": "idempotency key (≤80 chars): a replay returns the first reply" }),
        );
        op["requestBody"] = json!({
            "required": true,
            "content": { "application/json": { "schema": {
                "type": "object", "properties": props, "required": required
            } } }
        });
    }
    op
}

/// Build the OpenAPI 3.1 document for the given route table.
pub fn document(routes: &[RouteDoc]) -> Value {
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
            entry[*m] = operation(r, m);
        }
    }
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
        "components": { "schemas": { "Error": {
            "type": "object",
            "required": ["error"],
            "properties": { "error": { "type": "string" } },
        } } },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_lists_routes_params_and_bodies() {
        const Q: &[Field] = &[f("session", Ty::Str, true, "who")];
        const B: &[Field] = &[f("text", Ty::Str, true, "body")];
        let doc = document(&[
            RouteDoc {
                verb: Verb::Get,
                path: "/inbox",
                summary: "read",
                query: Q,
                body: &[],
            },
            RouteDoc {
                verb: Verb::Post,
                path: "/send",
                summary: "send",
                query: &[],
                body: B,
            },
            RouteDoc {
                verb: Verb::Any,
                path: "/health",
                summary: "h",
                query: &[],
                body: &[],
            },
        ]);
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(
            doc["paths"]["/inbox"]["get"]["parameters"][0]["name"],
            "session"
        );
        let body = &doc["paths"]["/send"]["post"]["requestBody"]["content"]["application/json"];
        assert_eq!(body["schema"]["required"][0], "text");
        assert!(doc["paths"]["/health"]["post"].is_object());
    }
}
