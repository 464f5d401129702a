//! What an idempotent operation adds to its API description (feature `openapi`): the key's
//! header parameter, the `400`/`409`/`422`/`503` problem answers with `Retry-After`, the
//! `Idempotent-Replayed` header of successes, and an `x-idempotency` member with the contract,
//! the TTL, the key and the scope (`docs/design/openapi.md`).
//!
//! The rule: everything here works on OpenAPI 3 objects as JSON (`serde_json::Value`), so that
//! one implementation serves every OpenAPI crate; an adapter converts its crate's types to JSON
//! and back ([`Idempotency`] and [`IdempotencyWith`] for utoipa, feature `utoipa`;
//! [`aide`](mod@aide), feature `aide`). What a user declared is kept: idem adds what is missing
//! and never removes.
//!
//! Every `#[idempotent]` axum or actix-web handler registers its [`HandlerDoc`] at link time
//! ([`handlers`]), so that nothing the attribute says is written again for the description.
//! The tower layer and the actix-web middleware describe themselves ([`LayerDoc`], from their
//! `doc()`), and the routes they cover are named by their paths ([`describe_paths`]).

use core::time::Duration;

use serde_json::{Map, Value, json};

use crate::engine::Contract;
use crate::key::MAX_CLIENT_KEY_CHARS;

#[cfg(feature = "aide")]
#[cfg_attr(docsrs, doc(cfg(feature = "aide")))]
pub mod aide;
mod layer;
#[cfg(feature = "utoipa")]
mod utoipa;

pub use self::layer::{LayerDoc, describe_paths};
#[cfg(feature = "utoipa")]
pub use self::utoipa::{Idempotency, IdempotencyWith};

/// The name of the problem documents' schema in `components.schemas`.
pub const PROBLEM_SCHEMA: &str = "IdempotencyProblem";

/// An idempotent handler as its API description needs it: what `#[idempotent]` says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerDoc {
    /// The function's name: the `operationId` utoipa gives its operation by default.
    pub function: &'static str,
    /// The function's module (`module_path!()`): tells two functions of one name apart.
    pub module: &'static str,
    /// The operation named with `operation = ".."`, if any.
    pub operation: Option<&'static str>,
    /// The replay contract.
    pub contract: Contract,
    /// How long a key is remembered.
    pub ttl: Duration,
    /// How long, from the claim, the key is remembered past the TTL (`remember`), if at all:
    /// a retry then is `410 key-expired`.
    pub remember: Option<Duration>,
    /// Where the key comes from.
    pub key: KeyDoc,
    /// The scope parts as written in the attribute (`caller.tenant_id`, `header("X-Tenant")`);
    /// empty for `scope = global`, `["default"]` for the handle's default scope.
    pub scope: &'static [&'static str],
}

inventory::collect!(HandlerDoc);

/// The descriptions every `#[idempotent]` axum and actix-web handler of the program registered,
/// in no particular order.
pub fn handlers() -> Vec<&'static HandlerDoc> {
    inventory::iter::<HandlerDoc>.into_iter().collect()
}

/// [`describe_document`] with the registered [`handlers`]; a name two handlers share is
/// logged (a warning) and left undescribed.
pub fn describe_registered(document: &mut Value) {
    warn_ambiguous(describe_document(document, &handlers()));
}

/// Logs (a warning) each operation left undescribed because two handlers of its name differ.
fn warn_ambiguous(names: Vec<String>) {
    for name in names {
        tracing::warn!(
            target: "idem",
            operation_id = %name,
            "two #[idempotent] handlers are named `{name}` and differ: their operation is not \
             described; give one an `operation_id` in its OpenAPI attribute or an \
             `operation = \"..\"`, or describe one API's handlers (`Idempotency::within`)"
        );
    }
}

/// Where an operation's client key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDoc {
    /// A request header (`Idempotency-Key` by default).
    Header(&'static str),
    /// A value of the request itself (`key = msg.id`): no parameter to describe.
    Value,
}

impl HandlerDoc {
    /// The `x-idempotency` member of this handler's operation.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::Contract;
    /// use idem_runtime::openapi::{HandlerDoc, KeyDoc};
    ///
    /// let doc = HandlerDoc {
    ///     function: "create_payment",
    ///     module: "payments::api",
    ///     operation: None,
    ///     contract: Contract::ExactReplay,
    ///     ttl: Duration::from_secs(7 * 86_400),
    ///     remember: None,
    ///     key: KeyDoc::Header("Idempotency-Key"),
    ///     scope: &["caller.tenant_id"],
    /// };
    /// assert_eq!(
    ///     doc.extension(),
    ///     serde_json::json!({
    ///         "contract": "exact_replay",
    ///         "ttl": "P7D",
    ///         "ttl_seconds": 604800,
    ///         "key": { "in": "header", "name": "Idempotency-Key" },
    ///         "scope": ["caller.tenant_id"],
    ///     }),
    /// );
    /// ```
    pub fn extension(&self) -> Value {
        self.facts().extension()
    }

    /// Whether `other` describes its operation as this one does: everything but where the
    /// function is.
    fn says_the_same(&self, other: &HandlerDoc) -> bool {
        (self.contract, self.ttl, self.remember, self.key, self.scope)
            == (
                other.contract,
                other.ttl,
                other.remember,
                other.key,
                other.scope,
            )
    }

    /// Adds this handler's idempotency to `operation`, an OpenAPI 3 Operation object: the key's
    /// header parameter (unless one of that name is declared), the problem answers, the replay
    /// header on every `2xx` answer declared, `x-idempotency` and Fern's `x-fern-idempotent`.
    /// The answers refer to [`PROBLEM_SCHEMA`]: add [`problem_schema`] to the document's
    /// components ([`describe_document`] does).
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use idem_runtime::engine::Contract;
    /// # use idem_runtime::openapi::{HandlerDoc, KeyDoc};
    /// # let doc = HandlerDoc { function: "create_payment", module: "api", operation: None,
    /// #     contract: Contract::ExactReplay, ttl: Duration::from_secs(86_400), remember: None,
    /// #     key: KeyDoc::Header("Idempotency-Key"), scope: &[] };
    /// let mut operation = serde_json::json!({
    ///     "responses": { "201": { "description": "Created" } }
    /// });
    /// doc.describe(&mut operation);
    /// assert_eq!(operation["parameters"][0]["name"], "Idempotency-Key");
    /// assert_eq!(operation["parameters"][0]["required"], true);
    /// assert!(operation["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    /// assert!(operation["responses"]["409"]["headers"]["Retry-After"].is_object());
    /// assert_eq!(operation["x-fern-idempotent"], true);
    /// ```
    pub fn describe(&self, operation: &mut Value) {
        self.facts().describe(operation);
    }

    /// What the handler itself says of `operation`: the key's header parameter (unless one of
    /// that name is declared), `x-idempotency` and `x-fern-idempotent`. The answers, which the
    /// operation may declare later, are [`describe_marked`]'s.
    pub(crate) fn mark(&self, operation: &mut Value) {
        self.facts().mark(operation);
    }

    fn facts(&self) -> Facts<'_> {
        Facts {
            contract: self.contract,
            ttl: self.ttl,
            remember: self.remember,
            header: match self.key {
                KeyDoc::Header(name) => Some(name),
                KeyDoc::Value => None,
            },
            scope: self.scope.to_vec(),
        }
    }
}

/// What an operation's description says, whoever makes it idempotent: a handler
/// ([`HandlerDoc`]) or a middleware ([`LayerDoc`]).
struct Facts<'a> {
    contract: Contract,
    ttl: Duration,
    remember: Option<Duration>,
    /// The key's header; `None` for a key taken from a value of the request.
    header: Option<&'a str>,
    scope: Vec<&'a str>,
}

impl Facts<'_> {
    /// The `x-idempotency` member.
    fn extension(&self) -> Value {
        let key = match self.header {
            Some(name) => json!({ "in": "header", "name": name }),
            None => json!({ "in": "request" }),
        };
        let mut extension = json!({
            "contract": self.contract.as_str(),
            "ttl": iso_duration(self.ttl),
            "ttl_seconds": self.ttl.as_secs(),
            "key": key,
            "scope": self.scope,
        });
        if let (Some(remember), Some(x)) = (self.remember, extension.as_object_mut()) {
            x.insert("remember".into(), iso_duration(remember).into());
            x.insert("remember_seconds".into(), remember.as_secs().into());
        }
        extension
    }

    /// Adds the parts of an idempotent operation to `operation` ([`HandlerDoc::describe`]):
    /// its marks and its answers.
    fn describe(&self, operation: &mut Value) {
        self.mark(operation);
        if let Some(op) = operation.as_object_mut() {
            describe_answers(op);
        }
    }

    /// The marks of an idempotent operation ([`HandlerDoc::mark`]).
    fn mark(&self, operation: &mut Value) {
        let Some(op) = operation.as_object_mut() else {
            return;
        };
        if let Some(name) = self.header {
            let parameters = array(op, "parameters");
            let declared = parameters.iter().any(|p| {
                p["in"] == "header"
                    && p["name"]
                        .as_str()
                        .is_some_and(|n| n.eq_ignore_ascii_case(name))
            });
            if !declared {
                parameters.push(key_parameter(name, self.ttl));
            }
        }
        op.insert("x-idempotency".into(), self.extension());
        op.insert("x-fern-idempotent".into(), Value::Bool(true));
    }
}

/// The answers of an idempotent operation: the replay header on every `2xx` answer declared,
/// and the problem answers, added to what `op` declares.
fn describe_answers(op: &mut Map<String, Value>) {
    let responses = object(op, "responses");
    for (_, response) in responses
        .iter_mut()
        .filter(|(code, _)| code.starts_with('2'))
    {
        if let Some(response) = response.as_object_mut() {
            object(response, "headers")
                .entry("Idempotent-Replayed")
                .or_insert_with(replayed_header);
        }
    }
    // An operation that remembers keys past their TTL also answers `410 key-expired`.
    let remembers = op
        .get("x-idempotency")
        .is_some_and(|x| x.get("remember").is_some());
    let expired = remembers.then_some((410, KEY_EXPIRED));
    let responses = object(op, "responses");
    for (status, description) in PROBLEMS.into_iter().chain(expired) {
        let response = responses
            .entry(status.to_string())
            .or_insert_with(|| json!({ "description": description }));
        let Some(response) = response.as_object_mut() else {
            continue;
        };
        object(response, "content")
            .entry("application/problem+json")
            .or_insert_with(|| {
                json!({ "schema": { "$ref": format!("#/components/schemas/{PROBLEM_SCHEMA}") } })
            });
        if matches!(status, 409 | 503) {
            object(response, "headers")
                .entry("Retry-After")
                .or_insert_with(retry_after_header);
        }
    }
}

/// Completes the operations of `document` that a handler marked ([`HandlerDoc::mark`], an
/// `x-idempotency` member) with their answers, and adds [`problem_schema`] to the components
/// when there is one.
#[cfg_attr(not(feature = "aide"), allow(dead_code))]
pub(crate) fn describe_marked(document: &mut Value) {
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let mut described = false;
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for (method, operation) in item.iter_mut() {
            let Some(op) = operation.as_object_mut() else {
                continue;
            };
            if METHODS.contains(&method.as_str()) && op.contains_key("x-idempotency") {
                describe_answers(op);
                described = true;
            }
        }
    }
    if described {
        add_problem_schema(document);
    }
}

/// The answer of an operation that remembers keys past their TTL (`remember`).
const KEY_EXPIRED: &str = "The key's operation ran, and its stored response expired with the TTL; \
     the key is remembered (`x-idempotency.remember`), so the operation does not run again: \
     look the result up by `biz_no`; a new operation needs a new key";

/// The answers idem gives for an idempotency condition, each a problem document.
const PROBLEMS: [(u16, &str); 4] = [
    (
        400,
        "The idempotency key is missing or malformed, or the request has no canonical form: \
         nothing ran; fix the request and send it again with the same key",
    ),
    (
        409,
        "A request with this key is still running: retry after `Retry-After` seconds with the \
         same key and the same request",
    ),
    (
        422,
        "The key was used with another request: a changed request is another operation and \
         needs a new key",
    ),
    (
        503,
        "The idempotency store is unavailable, or the attempt ran out of time: retry after \
         `Retry-After` seconds with the same key and the same request",
    ),
];

/// The problem documents' schema: RFC 9457's members and idem's extension members.
///
/// ```
/// let schema = idem_runtime::openapi::problem_schema();
/// assert_eq!(schema["properties"]["status"]["type"], "integer");
/// assert!(schema["properties"]["retry_after"].is_object());
/// ```
pub fn problem_schema() -> Value {
    json!({
        "type": "object",
        "description": "A problem document (RFC 9457) of an idempotency condition.",
        "required": ["type", "title", "status"],
        "properties": {
            "type": { "type": "string", "format": "uri-reference", "description": "The problem type: `key-reused`, `in-progress`, `missing-key`, ... under the service's problem base." },
            "title": { "type": "string" },
            "status": { "type": "integer", "format": "int32" },
            "detail": { "type": "string", "description": "What happened and what to do." },
            "instance": { "type": "string", "format": "uri-reference" },
            "retry_after": { "type": "integer", "format": "int64", "minimum": 0, "description": "Seconds to wait before retrying with the same key (409, 503); also the `Retry-After` header." },
            "idempotency_key": { "type": "string", "description": "The key of the request." },
            "path": { "type": "string", "description": "The JSON path of a value that has no canonical form (400)." },
            "biz_no": { "type": "string", "description": "The business number the operation stored (410 key-expired)." },
            "operation_id": { "type": "string", "description": "The operation's stable id (410 key-expired)." },
            "response_status": { "type": "integer", "format": "int32", "description": "The status of the stored response that expired (410 key-expired)." },
            "completed_at": { "type": "string", "format": "date-time", "description": "When the response was stored (410 key-expired)." },
            "expired_at": { "type": "string", "format": "date-time", "description": "When the stored response expired, the end of the TTL (410 key-expired)." },
            "remember_until": { "type": "string", "format": "date-time", "description": "Until when the key is remembered; after it the key is new (410 key-expired)." },
            "key_expires_at": { "type": "string", "format": "date-time", "description": "Until when the key stays bound to its first request, once that request's answer is stored; after it the key is new (422 key-reused)." },
            "waited": { "type": "number", "minimum": 0, "description": "Seconds this request waited for the attempt in flight before the answer, on an endpoint that waits (409 in-progress)." },
        },
    })
}

/// Describes every operation of `document` (an OpenAPI 3 document as JSON) that one of
/// `handlers` serves, matched by `operationId`: a handler's function name (utoipa's default),
/// or its named operation. Adds [`problem_schema`] to the components when an operation was described.
/// Returns the names that two handlers share with different descriptions (left undescribed:
/// give one an `operationId`); handlers that differ only in their module describe alike.
///
/// ```
/// # use core::time::Duration;
/// # use idem_runtime::engine::Contract;
/// use idem_runtime::openapi::{HandlerDoc, KeyDoc, describe_document};
/// # let create = HandlerDoc { function: "create_payment", module: "api", operation: None,
/// #     contract: Contract::ExactReplay, ttl: Duration::from_secs(86_400), remember: None,
/// #     key: KeyDoc::Header("Idempotency-Key"), scope: &[] };
/// let mut document = serde_json::json!({
///     "openapi": "3.1.0",
///     "paths": {
///         "/payments": { "post": { "operationId": "create_payment", "responses": {} } },
///         "/health": { "get": { "operationId": "health", "responses": {} } },
///     },
/// });
/// assert!(describe_document(&mut document, &[&create]).is_empty());
/// assert!(document["paths"]["/payments"]["post"]["x-idempotency"].is_object());
/// assert!(document["paths"]["/health"]["get"].get("x-idempotency").is_none());
/// assert!(document["components"]["schemas"]["IdempotencyProblem"].is_object());
/// ```
pub fn describe_document(document: &mut Value, handlers: &[&HandlerDoc]) -> Vec<String> {
    let mut ambiguous = Vec::new();
    let mut described = false;
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return ambiguous;
    };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for (method, operation) in item.iter_mut() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            let Some(id) = operation.get("operationId").and_then(Value::as_str) else {
                continue;
            };
            let mut found = handlers
                .iter()
                .filter(|h| h.function == id || h.operation == Some(id));
            let Some(handler) = found.next() else {
                continue;
            };
            // Two handlers of one name that say the same (one API on two frameworks, linked
            // into one program) describe the operation alike: no ambiguity.
            if found.all(|other| other.says_the_same(handler)) {
                handler.describe(operation);
                described = true;
            } else {
                ambiguous.push(id.to_owned());
            }
        }
    }
    if described {
        add_problem_schema(document);
    }
    ambiguous
}

/// Adds [`problem_schema`] to the components of `document` (an object), unless declared.
fn add_problem_schema(document: &mut Value) {
    let Some(document) = document.as_object_mut() else {
        return;
    };
    object(object(document, "components"), "schemas")
        .entry(PROBLEM_SCHEMA)
        .or_insert_with(problem_schema);
}

/// The methods of an OpenAPI Path Item object.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn key_parameter(name: &str, ttl: Duration) -> Value {
    json!({
        "name": name,
        "in": "header",
        "required": true,
        "description": format!(
            "Names one operation: send a new key (a UUID) for each operation, and the same key \
             with the same request on every retry of it; the first answer is replayed for {}. \
             1 to {MAX_CLIENT_KEY_CHARS} characters, as a structured-field string (`\"...\"`, \
             RFC 8941) or bare.",
            human_duration(ttl),
        ),
        "schema": { "type": "string", "minLength": 1, "maxLength": MAX_CLIENT_KEY_CHARS + 2 },
    })
}

fn replayed_header() -> Value {
    json!({
        "description": "`true` when this answer is the stored answer of an earlier request with the same key.",
        "schema": { "type": "string", "enum": ["true"] },
    })
}

fn retry_after_header() -> Value {
    json!({
        "description": "Seconds to wait before retrying with the same key.",
        "schema": { "type": "integer", "minimum": 0 },
    })
}

/// The member `key` of `object` as an object, created empty (or replacing a non-object).
fn object<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let value = object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("an object")
}

/// The member `key` of `object` as an array, created empty (or replacing a non-array).
fn array<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let value = object
        .entry(key)
        .or_insert_with(|| Value::Array(Vec::new()));
    if !value.is_array() {
        *value = Value::Array(Vec::new());
    }
    value.as_array_mut().expect("an array")
}

/// An ISO 8601 duration of whole seconds: `P7D`, `PT36H` is `P1DT12H`, `PT0S`.
fn iso_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    let mut out = String::from("P");
    if days > 0 {
        out += &format!("{days}D");
    }
    if hours + minutes + seconds > 0 || days == 0 {
        out.push('T');
        for (n, unit) in [(hours, 'H'), (minutes, 'M'), (seconds, 'S')] {
            if n > 0 {
                out += &format!("{n}{unit}");
            }
        }
        if out.ends_with('T') {
            out += "0S";
        }
    }
    out
}

/// `7 days`, `1 hour`, `90 seconds`: the largest unit that divides the duration.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = [(86_400, "day"), (3_600, "hour"), (60, "minute")]
        .into_iter()
        .find(|(unit, _)| s >= *unit && s.is_multiple_of(*unit))
        .map_or((s, "second"), |(u, name)| (s / u, name));
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(function: &'static str, operation: Option<&'static str>) -> HandlerDoc {
        HandlerDoc {
            function,
            module: "api",
            operation,
            contract: Contract::LatestState,
            ttl: Duration::from_secs(36 * 3_600),
            remember: None,
            key: KeyDoc::Header("Idempotency-Key"),
            scope: &["default"],
        }
    }

    #[test]
    fn durations_read_as_iso_8601_and_as_words() {
        let cases = [
            (0, "PT0S", "0 seconds"),
            (1, "PT1S", "1 second"),
            (90, "PT1M30S", "90 seconds"),
            (3_600, "PT1H", "1 hour"),
            (129_600, "P1DT12H", "36 hours"),
            (604_800, "P7D", "7 days"),
        ];
        for (secs, iso, words) in cases {
            let d = Duration::from_secs(secs);
            assert_eq!(
                (iso_duration(d).as_str(), human_duration(d).as_str()),
                (iso, words)
            );
        }
    }

    #[test]
    fn what_the_user_declared_is_kept() {
        let mut operation = json!({
            "parameters": [{ "name": "idempotency-key", "in": "header", "required": false }],
            "responses": {
                "201": { "description": "Created", "headers": { "Location": {} } },
                "409": { "description": "Mine", "content": { "application/json": {} } },
                "404": { "description": "Not found" },
            },
        });
        doc("create", None).describe(&mut operation);
        // The hand-written key parameter stays, alone.
        assert_eq!(operation["parameters"].as_array().unwrap().len(), 1);
        assert_eq!(operation["parameters"][0]["required"], false);
        let responses = &operation["responses"];
        assert_eq!(responses["409"]["description"], "Mine");
        assert!(responses["409"]["content"]["application/json"].is_object());
        assert!(responses["409"]["content"]["application/problem+json"].is_object());
        assert!(responses["201"]["headers"]["Location"].is_object());
        assert!(responses["201"]["headers"]["Idempotent-Replayed"].is_object());
        // Not a success: no replay header.
        assert!(responses["404"].get("headers").is_none());
        for status in ["400", "422", "503"] {
            assert!(responses[status]["content"]["application/problem+json"].is_object());
        }
        assert!(responses["503"]["headers"]["Retry-After"].is_object());
        assert!(responses["422"].get("headers").is_none());
        assert_eq!(operation["x-idempotency"]["ttl"], "P1DT12H");
        assert_eq!(operation["x-idempotency"]["contract"], "latest_state");
    }

    #[test]
    fn a_key_from_the_request_adds_no_parameter() {
        let mut operation = json!({ "responses": {} });
        HandlerDoc {
            key: KeyDoc::Value,
            ..doc("consume", None)
        }
        .describe(&mut operation);
        assert!(operation.get("parameters").is_none());
        assert_eq!(
            operation["x-idempotency"]["key"],
            json!({ "in": "request" })
        );
    }

    #[test]
    fn operations_match_by_name_and_two_handlers_of_one_name_by_none() {
        let mut document = json!({ "paths": {
            "/a": { "post": { "operationId": "create", "responses": {} },
                    "parameters": [] },
            "/b": { "post": { "operationId": "refunds.issue", "responses": {} } },
            "/c": { "post": { "operationId": "twice", "responses": {} } },
        }});
        // A named operation matches by that name, and by its function's name (utoipa's
        // default `operationId`) too.
        document["paths"]["/d"] = json!({ "post": { "operationId": "issue", "responses": {} } });
        let (a, b) = (doc("create", None), doc("issue", Some("refunds.issue")));
        let (c1, c2) = (
            doc("twice", None),
            HandlerDoc {
                module: "other",
                contract: Contract::ExactReplay,
                ..doc("twice", None)
            },
        );
        // The same handler in two modules (one API on two frameworks) is no ambiguity.
        document["paths"]["/e"] = json!({ "post": { "operationId": "alike", "responses": {} } });
        let (e1, e2) = (
            doc("alike", None),
            HandlerDoc {
                module: "other",
                ..doc("alike", None)
            },
        );
        let ambiguous = describe_document(&mut document, &[&a, &b, &c1, &c2, &e1, &e2]);
        assert_eq!(ambiguous, ["twice"]);
        let paths = &document["paths"];
        assert!(paths["/a"]["post"]["x-idempotency"].is_object());
        assert!(paths["/b"]["post"]["x-idempotency"].is_object());
        assert!(paths["/d"]["post"]["x-idempotency"].is_object());
        assert!(paths["/e"]["post"]["x-idempotency"].is_object());
        assert!(paths["/c"]["post"].get("x-idempotency").is_none());
        assert!(document["components"]["schemas"][PROBLEM_SCHEMA].is_object());
    }

    #[test]
    fn marked_operations_gain_their_answers_and_others_nothing() {
        let mut marked = json!({ "responses": { "201": { "description": "Created" } } });
        doc("create", None).mark(&mut marked);
        // The handler's part only: the answers may be declared after it.
        assert!(marked["x-idempotency"].is_object());
        assert!(marked["responses"].get("409").is_none());
        let mut document = json!({ "paths": {
            "/a": { "post": marked, "parameters": [] },
            "/h": { "get": { "responses": { "200": { "description": "Alive" } } } },
        }});
        describe_marked(&mut document);
        let a = &document["paths"]["/a"]["post"];
        assert!(a["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
        assert!(a["responses"]["409"]["headers"]["Retry-After"].is_object());
        assert_eq!(a["parameters"].as_array().unwrap().len(), 1);
        let h = &document["paths"]["/h"]["get"];
        assert_eq!(
            h,
            &json!({ "responses": { "200": { "description": "Alive" } } })
        );
        assert!(document["components"]["schemas"][PROBLEM_SCHEMA].is_object());

        let mut unmarked = json!({ "paths": { "/h": { "get": { "responses": {} } } } });
        let before = unmarked.clone();
        describe_marked(&mut unmarked);
        assert_eq!(unmarked, before);
    }

    #[test]
    fn a_document_without_idempotent_operations_is_unchanged() {
        let mut document = json!({ "paths": { "/h": { "get": { "operationId": "health" } } } });
        let before = document.clone();
        assert!(describe_document(&mut document, &[&doc("create", None)]).is_empty());
        assert_eq!(document, before);
    }
}
