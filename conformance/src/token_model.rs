//! How a server's tokens travel and whether they can be decoded (the surface's `tokenModel` and
//! `tokenFormat`): the locks' state + ack pair, or one token plus an intent; tokens in the
//! locks' `<kind>.v1.<payload>.<signature>` format, or opaque strings.

use serde::Deserialize;
use serde_json::Value;

/// How a server's tokens travel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum TokenModel {
    /// The locks' model: `stateToken` to rehydrate, `stateToken` + `ackToken` to advance.
    #[default]
    StateAndAck,
    /// One token and an intent: a `continue_workflow` request with an `ackToken` becomes
    /// `{<field>: ackToken, <intentField>: <advance>}`, one without it
    /// `{<field>: stateToken, <intentField>: <rehydrate>}`; the response's `<field>` is read as
    /// the `stateToken` and, while the run is not complete, the `ackToken`.
    #[serde(rename_all = "camelCase")]
    SingleToken {
        #[serde(default = "default_single_field")]
        field: String,
        #[serde(default = "default_intent_field")]
        intent_field: String,
        #[serde(default = "default_advance")]
        advance: String,
        #[serde(default = "default_rehydrate")]
        rehydrate: String,
        /// `checkpoint_workflow` takes the response's `checkpointToken` alone (it carries the
        /// node): the canonical `stateToken` is not sent, and a check that `stateToken` is
        /// required does not apply.
        #[serde(default)]
        checkpoint_alone: bool,
    },
}

fn default_single_field() -> String {
    "continueToken".into()
}

fn default_intent_field() -> String {
    "intent".into()
}

fn default_advance() -> String {
    "advance".into()
}

fn default_rehydrate() -> String {
    "rehydrate".into()
}

impl TokenModel {
    /// Rewrites canonical `continue_workflow` arguments into this model (a request with no
    /// token at all stays as it is).
    pub fn request_to_server(&self, args: &mut Value) {
        let (
            Self::SingleToken {
                field,
                intent_field,
                advance,
                rehydrate,
                ..
            },
            Value::Object(map),
        ) = (self, args)
        else {
            return;
        };
        let ack = map.remove("ackToken");
        let state = map.remove("stateToken");
        let (token, intent) = match (ack, state) {
            (Some(ack), _) => (ack, advance),
            (None, Some(state)) => (state, rehydrate),
            (None, None) => return,
        };
        map.insert(field.clone(), token);
        map.insert(intent_field.clone(), Value::String(intent.clone()));
    }

    /// Rewrites canonical `checkpoint_workflow` arguments into this model.
    pub fn checkpoint_to_server(&self, args: &mut Value) {
        if let (
            Self::SingleToken {
                checkpoint_alone: true,
                ..
            },
            Value::Object(map),
        ) = (self, args)
        {
            map.remove("stateToken");
        }
    }

    /// Whether `checkpoint_workflow` takes its checkpoint token alone.
    pub fn checkpoint_alone(&self) -> bool {
        matches!(
            self,
            Self::SingleToken {
                checkpoint_alone: true,
                ..
            }
        )
    }

    /// Reads a structured result's token in the canonical model.
    pub fn response_to_canonical(&self, structured: &mut Value) {
        let (Self::SingleToken { field, .. }, Value::Object(map)) = (self, structured) else {
            return;
        };
        let Some(token) = map.remove(field) else {
            return;
        };
        let complete = map.get("isComplete").and_then(Value::as_bool) == Some(true);
        if !complete {
            map.insert("ackToken".into(), token.clone());
        }
        map.insert("stateToken".into(), token);
    }
}

/// Whether a server's tokens can be decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TokenFormat {
    /// `<st|ack|chk>.v1.<base64url(JCS payload)>.<signature>`, as the locks fix.
    #[default]
    WorkrailV1,
    /// Opaque strings: the token-format locks are not applicable, `$tamperSignature` changes
    /// one character, steps that decode a token are skipped.
    Opaque,
}

/// Why the token-format locks are not judged for a server with opaque tokens.
pub const OPAQUE_TOKENS_REASON: &str = "the surface declares opaque tokens (tokenFormat: opaque): their format and payload are not checked";
