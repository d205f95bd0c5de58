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
    /// Longest accepted value (characters for strings, items for arrays), as the hub enforces.
    pub max: Option<usize>,
}

/// Shorthand for a [`Field`].
pub const fn f(name: &'static str, ty: Ty, required: bool, desc: &'static str) -> Field {
    Field {
        name,
        ty,
        required,
        desc,
        max: None,
    }
}

impl Field {
    /// The same field with the limit the hub enforces on it.
    pub const fn max(mut self, n: usize) -> Field {
        self.max = Some(n);
        self
    }

    fn schema(&self) -> Value {
        let mut s = json!({ "type": self.ty.name() });
        match (self.ty, self.max) {
            (Ty::Str, Some(n)) => s["maxLength"] = json!(n),
            (Ty::Arr, Some(n)) => s["maxItems"] = json!(n),
            _ => {}
        }
        // A required text must be non-empty: the hub refuses "" with a 400.
        if self.required && self.ty == Ty::Str {
            s["minLength"] = json!(1);
        }
        s
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
        json!({
            "description": "Success (JSON)",
            "content": { "application/json": { "schema": { "type": "object" } } }
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
    if method == "post" && !doc.body.is_empty() {
        let mut props = Map::new();
        let mut required = Vec::new();
        for b in doc.body {
            let mut schema = b.schema();
            schema["description"] = json!(b.desc);
            props.insert(b.name.to_string(), schema);
            if b.required {
                required.push(b.name);
            }
        }
        props.insert(
            "_op".into(),
            json!({
                "type": ["string", "number"],
                "maxLength": trantor_proto::limits::OP_ID,
                "description": "idempotency key (≤80 chars; longer is a 400): a replay on the same route returns the first reply"
            }),
        );
        // An empty body is read as `{}`, so the body itself is optional.
        op["requestBody"] = json!({
            "required": false,
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

    #[test]
    fn limits_and_content_types_are_documented() {
        const B: &[Field] = &[
            f("text", Ty::Str, true, "body").max(10),
            f("deps", Ty::Arr, false, "ids").max(3),
        ];
        let doc = document(&[
            RouteDoc {
                verb: Verb::Post,
                path: "/send",
                summary: "send",
                query: &[],
                body: B,
            },
            RouteDoc {
                verb: Verb::Get,
                path: "/metrics",
                summary: "m",
                query: &[],
                body: &[],
            },
        ]);
        let post = &doc["paths"]["/send"]["post"];
        assert_eq!(post["requestBody"]["required"], false);
        let props = &post["requestBody"]["content"]["application/json"]["schema"]["properties"];
        assert_eq!(props["text"]["maxLength"], 10);
        assert_eq!(props["text"]["minLength"], 1);
        assert_eq!(props["deps"]["maxItems"], 3);
        assert_eq!(props["_op"]["maxLength"], 80);
        let ok = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        assert!(ok["text/plain"].is_object(), "{ok}");
    }
}
