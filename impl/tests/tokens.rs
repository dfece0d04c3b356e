//! Tokens are signed, scoped, versioned references (locks §1.2): the HMAC covers exactly the
//! canonical payload bytes, verification tries `current` then `previous`, and every tampered,
//! truncated, swapped or foreign token is refused with its locked code and a recovery path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hmac::{KeyInit, Mac};
use workrail::store::{Keyring, SigningKey};
use workrail::tokens::{SignatureFailure, TokenCodec, TokenError};
use workrail_spec::closed::TokenKind;
use workrail_spec::error::{ErrorCode, Retry};
use workrail_spec::ids::*;
use workrail_spec::token::{AttemptPayload, StatePayload, TokenParts, TokenPayload};

fn key(n: u8) -> SigningKey {
    SigningKey {
        key_id: format!("k_{n}"),
        secret: [n; 32],
    }
}

fn state() -> TokenPayload {
    TokenPayload::State(StatePayload {
        session_id: SessionId::from_entropy(&[1; 10]),
        run_id: RunId::from_entropy(&[2; 10]),
        node_id: NodeId::from_entropy(&[3; 10]),
        workflow_hash: WorkflowHash::from_digest(Sha256Digest::from_bytes(&[4; 32])),
    })
}

fn ack() -> TokenPayload {
    TokenPayload::Ack(AttemptPayload {
        session_id: SessionId::from_entropy(&[1; 10]),
        run_id: RunId::from_entropy(&[2; 10]),
        node_id: NodeId::from_entropy(&[3; 10]),
        attempt_id: AttemptId::from_entropy(&[5; 10]),
    })
}

/// lock: L-TOKEN-HMAC, L-TOKEN-FORMAT
#[test]
fn the_signature_is_hmac_sha256_of_the_canonical_payload_bytes() {
    let codec = TokenCodec::new(Keyring {
        current: key(7),
        previous: None,
    });
    let token = codec.mint(&state());
    assert!(token.starts_with("st.v1."));
    let parts = TokenParts::parse(&token).unwrap();
    assert_eq!(parts.payload_bytes, state().canonical_bytes());
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&[7; 32]).unwrap();
    mac.update(&state().canonical_bytes());
    assert_eq!(
        parts.signature.as_slice(),
        mac.finalize().into_bytes().as_slice()
    );
    assert_eq!(codec.verify(&token, TokenKind::State).unwrap(), state());
    assert!(codec.mint(&ack()).starts_with("ack.v1."));
}

/// lock: L-TOKEN-KEYRING-VERIFY, L-TOKEN-ROTATION
#[test]
fn verification_tries_current_then_previous_and_forgets_older_keys() {
    let old = TokenCodec::new(Keyring {
        current: key(1),
        previous: None,
    });
    let token = old.mint(&state());
    let rotated = TokenCodec::new(Keyring {
        current: key(2),
        previous: Some(key(1)),
    });
    assert_eq!(rotated.verify(&token, TokenKind::State).unwrap(), state());
    let twice = TokenCodec::new(Keyring {
        current: key(3),
        previous: Some(key(2)),
    });
    assert_eq!(
        twice.verify(&token, TokenKind::State),
        Err(TokenError::BadSignature(SignatureFailure::Unverified))
    );
}

/// lock: L-TOKEN-ERRORS, L-ERR-SELF-CORRECTING
#[test]
fn mangled_tokens_get_their_locked_code_and_a_recovery_path() {
    let codec = TokenCodec::new(Keyring {
        current: key(9),
        previous: None,
    });
    let token = codec.mint(&state());
    let code = |raw: &str, kind| {
        codec
            .verify(raw, kind)
            .unwrap_err()
            .to_envelope("stateToken")
            .code
    };
    // One changed character in the payload or the signature.
    let mut chars: Vec<char> = token.chars().collect();
    let i = token.find('.').unwrap() + 5;
    chars[i + 3] = if chars[i + 3] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.iter().collect();
    assert!(matches!(
        code(&tampered, TokenKind::State),
        ErrorCode::TokenBadSignature | ErrorCode::TokenInvalidFormat
    ));
    let mut sig_tampered = token.clone();
    let last = sig_tampered.pop().unwrap();
    sig_tampered.push(if last == 'A' { 'Q' } else { 'A' });
    assert_eq!(
        code(&sig_tampered, TokenKind::State),
        ErrorCode::TokenBadSignature
    );
    // Truncation, a dropped character, a foreign version, a swapped kind.
    assert_eq!(
        code(&token[..token.len() - 10], TokenKind::State),
        ErrorCode::TokenInvalidFormat
    );
    assert_eq!(
        code(&token.replacen("st.v1.", "st.v2.", 1), TokenKind::State),
        ErrorCode::TokenUnsupportedVersion
    );
    assert_eq!(
        code(&codec.mint(&ack()), TokenKind::State),
        ErrorCode::TokenInvalidFormat
    );
    assert_eq!(code("", TokenKind::State), ErrorCode::TokenInvalidFormat);
    // Another data directory's key.
    let foreign = TokenCodec::new(Keyring {
        current: key(10),
        previous: None,
    })
    .mint(&state());
    let envelope = codec
        .verify(&foreign, TokenKind::State)
        .unwrap_err()
        .to_envelope("stateToken");
    assert_eq!(envelope.code, ErrorCode::TokenBadSignature);
    assert!(envelope.message.contains("stateToken"));
    assert!(
        envelope
            .suggestion
            .contains("continue_workflow with only the last stateToken")
    );
    let swapped = codec
        .verify(&codec.mint(&ack()), TokenKind::State)
        .unwrap_err()
        .to_envelope("stateToken");
    assert!(
        swapped.message.contains("ack") && swapped.suggestion.contains("`st.`"),
        "{swapped:?}"
    );
}

/// Decisions D46 and D47: wrapping and punctuation that can never be part of a token are
/// removed at the boundary; the signature still covers every payload byte.
/// lock: L-TOKEN-FORMAT
#[test]
fn harmless_wrapping_is_tolerated() {
    let codec = TokenCodec::new(Keyring {
        current: key(4),
        previous: None,
    });
    let token = codec.mint(&state());
    let (a, b) = token.split_at(40);
    let standard = token
        .split('.')
        .enumerate()
        .map(|(i, p)| {
            let p = p.replace('-', "+").replace('_', "/");
            if i >= 2 && p.len() % 4 != 0 {
                format!("{p}{}", "=".repeat(4 - p.len() % 4))
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    let url_encoded: String = token
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32)
            }
        })
        .collect();
    for wrapped in [
        format!("  {token}\n"),
        format!("`{token}`"),
        format!("\"{token}\""),
        format!("'{token}'"),
        format!("\u{201C}{token}\u{201D}"),
        format!("{a}\n{b}"),
        format!("{a}\r\n  {b}"),
        format!("{a}\u{200B}{b}"),
        // D46: Markdown code fences, with or without an info string; a field label.
        format!("```{token}```"),
        format!("```\n{token}\n```"),
        format!("```text\n{a}\n{b}\n```\n"),
        // A line break right after the token's first character is not a fence info string.
        format!("```{}\n{}```", &token[..1], &token[1..]),
        format!("```\n{}\n {}\n```", &token[..1], &token[1..]),
        format!("stateToken: {token}"),
        format!("\"stateToken\": \"{token}\""),
        format!("<{token}>"),
        format!("({token})"),
        // D47: trailing punctuation, the standard base64 alphabet, URL-encoding.
        format!("{token}."),
        format!("{token},"),
        format!("`{token}`;"),
        standard,
        url_encoded,
        format!("%22{token}%22"),
    ] {
        assert_eq!(
            codec.verify(&wrapped, TokenKind::State).unwrap(),
            state(),
            "{wrapped:?}"
        );
    }
}

/// Each malformed token names its specific problem (in the message and in `details.problem`),
/// the field that held it, and the recovery path.
/// lock: L-TOKEN-ERRORS, L-ERR-SELF-CORRECTING
#[test]
fn malformed_tokens_name_their_specific_problem() {
    let codec = TokenCodec::new(Keyring {
        current: key(9),
        previous: None,
    });
    let token = codec.mint(&ack());
    let dots: Vec<usize> = token.match_indices('.').map(|(i, _)| i).collect();
    let sig = dots[2] + 1;
    let mut duplicated = token.clone();
    duplicated.insert(sig + 5, 'x');
    let cases: Vec<(&str, String, ErrorCode, &str, &str)> = vec![
        (
            "empty",
            String::new(),
            ErrorCode::TokenInvalidFormat,
            "empty",
            "empty",
        ),
        (
            "cut inside the prefix",
            token[..2].to_owned(),
            ErrorCode::TokenInvalidFormat,
            "cut_off",
            "1 of the 4",
        ),
        (
            "cut before the signature",
            token[..sig].to_owned(),
            ErrorCode::TokenInvalidFormat,
            "cut_off",
            "3 of the 4",
        ),
        (
            "cut inside the signature",
            token[..token.len() - 3].to_owned(),
            ErrorCode::TokenInvalidFormat,
            "cut_off",
            "40 characters where a signature is exactly 43",
        ),
        (
            "a character added to the signature",
            duplicated,
            ErrorCode::TokenInvalidFormat,
            "extra_text",
            "44 characters",
        ),
        (
            "two tokens",
            format!("{token} {token}"),
            ErrorCode::TokenInvalidFormat,
            "extra_text",
            "more than one token",
        ),
        (
            "prose before",
            format!("token: {token}"),
            ErrorCode::TokenInvalidFormat,
            "extra_text",
            "text was pasted before",
        ),
        (
            "upper case",
            token.to_ascii_uppercase(),
            ErrorCode::TokenInvalidFormat,
            "prefix",
            "case-sensitive",
        ),
        (
            "upper-case version",
            token.replacen("v1", "V1", 1),
            ErrorCode::TokenInvalidFormat,
            "version",
            "case-sensitive",
        ),
        (
            "shortened",
            format!("{}…{}", &token[..30], &token[token.len() - 5..]),
            ErrorCode::TokenInvalidFormat,
            "cut_off",
            "ellipsis",
        ),
        (
            "shortened with dots",
            format!("{}...", &token[..30]),
            ErrorCode::TokenInvalidFormat,
            "cut_off",
            "ellipsis",
        ),
        (
            "another version",
            token.replacen("v1", "v3", 1),
            ErrorCode::TokenUnsupportedVersion,
            "unsupported_version",
            "v3",
        ),
        (
            "a state token",
            codec.mint(&state()),
            ErrorCode::TokenInvalidFormat,
            "wrong_kind",
            "holds a state token",
        ),
    ];
    for (name, raw, code, problem, phrase) in cases {
        let envelope = codec
            .verify(&raw, TokenKind::Ack)
            .unwrap_err()
            .to_envelope("ackToken");
        assert_eq!(envelope.code, code, "{name}: {envelope:?}");
        assert_eq!(envelope.retry, Retry::NotRetryable, "{name}");
        assert_eq!(
            envelope.details.as_ref().unwrap()["problem"],
            problem,
            "{name}: {envelope:?}"
        );
        assert!(
            envelope.message.contains("`ackToken`") && envelope.message.contains(phrase),
            "{name}: {envelope:?}"
        );
        assert!(
            envelope.suggestion.contains("exactly")
                && envelope.suggestion.contains("resume_session"),
            "{name}: {envelope:?}"
        );
    }
}

/// A signature that does not verify: a payload that no longer decodes was certainly altered;
/// an intact payload may be altered or from another data directory, and the message says both.
/// lock: L-TOKEN-ERRORS, L-TOKEN-KEYRING-VERIFY
#[test]
fn a_bad_signature_says_whether_the_token_was_altered_or_may_be_foreign() {
    let codec = TokenCodec::new(Keyring {
        current: key(9),
        previous: None,
    });
    let token = codec.mint(&state());
    let foreign = TokenCodec::new(Keyring {
        current: key(10),
        previous: None,
    })
    .mint(&state());
    let err = codec.verify(&foreign, TokenKind::State).unwrap_err();
    assert_eq!(err, TokenError::BadSignature(SignatureFailure::Unverified));
    let envelope = err.to_envelope("stateToken");
    assert_eq!(envelope.code, ErrorCode::TokenBadSignature);
    assert!(
        envelope.message.contains("altered")
            && envelope.message.contains("another WorkRail data directory"),
        "{envelope:?}"
    );
    assert!(
        envelope.suggestion.contains("WORKRAIL_DATA_DIR"),
        "{envelope:?}"
    );
    // One payload character with its case changed: the base64 still decodes, the bytes no longer
    // form a payload, so the token was altered.
    let start = token.find('.').unwrap() + 4;
    let altered = (start..token.len())
        .find_map(|i| {
            let c = token.as_bytes()[i] as char;
            if !c.is_ascii_alphabetic() {
                return None;
            }
            let mut t = token.clone();
            t.replace_range(i..=i, &c.to_ascii_uppercase().to_string());
            match codec.verify(&t, TokenKind::State) {
                Err(TokenError::BadSignature(SignatureFailure::PayloadAltered { .. })) => Some(t),
                _ => None,
            }
        })
        .unwrap();
    let envelope = codec
        .verify(&altered, TokenKind::State)
        .unwrap_err()
        .to_envelope("stateToken");
    assert_eq!(envelope.code, ErrorCode::TokenBadSignature);
    assert_eq!(envelope.details.unwrap()["problem"], "altered");
    assert!(
        envelope.message.contains("was altered")
            && envelope.message.contains("payload part does not decode"),
        "{}",
        envelope.message
    );
}

/// Token lengths are fixed by the locked payload fields and the 16-character id bodies
/// (decision D35); the README states them, and this keeps it true.
#[test]
fn token_lengths_are_fixed_and_match_the_readme() {
    let codec = TokenCodec::new(Keyring {
        current: key(1),
        previous: None,
    });
    let digest = |s: &str| workrail_spec::jcs::sha256(s.as_bytes());
    let session = SessionId::from_entropy(&[1; 10]);
    let run = RunId::from_entropy(&[2; 10]);
    // A derived node id (non-root nodes) and a minted one have the same length.
    let node = NodeId::from_digest(&digest("node"));
    assert_eq!(
        node.as_str().len(),
        NodeId::from_entropy(&[3; 10]).as_str().len()
    );
    let attempt = AttemptId::from_digest(&digest("attempt"));
    let state = codec.mint(&TokenPayload::State(StatePayload {
        session_id: session.clone(),
        run_id: run.clone(),
        node_id: node.clone(),
        workflow_hash: WorkflowHash::from_digest(digest("workflow")),
    }));
    let attempt_payload = AttemptPayload {
        session_id: session,
        run_id: run,
        node_id: node,
        attempt_id: attempt,
    };
    let ack = codec.mint(&TokenPayload::Ack(attempt_payload.clone()));
    let checkpoint = codec.mint(&TokenPayload::Checkpoint(attempt_payload));
    assert_eq!((state.len(), ack.len(), checkpoint.len()), (353, 279, 289));
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for stated in [
        "a stateToken is 353 characters",
        "an ackToken 279",
        "checkpointToken 289",
    ] {
        assert!(readme.contains(stated), "README no longer says {stated:?}");
    }
}

/// Every single-character change anywhere in a token is refused in words an agent can act on:
/// never the decoder's internals (offsets, byte values, "decoded as", UTF-8 sequences).
///
/// lock: L-ERR-SELF-CORRECTING
#[test]
fn token_errors_never_show_parser_internals() {
    let codec = TokenCodec::new(Keyring {
        current: key(1),
        previous: None,
    });
    for payload in [state(), ack()] {
        let kind = payload.kind();
        let token = codec.mint(&payload);
        for (i, original) in token.char_indices() {
            for replacement in ['9', 'A', '_', '!', '='] {
                if replacement == original {
                    continue;
                }
                let mut mangled = token.clone();
                mangled.replace_range(i..i + 1, &replacement.to_string());
                let Err(e) = codec.verify(&mangled, kind) else {
                    continue;
                };
                let envelope = e.to_envelope("stateToken");
                let text = format!("{} {}", envelope.message, envelope.suggestion);
                for internal in [
                    "offset",
                    "0x",
                    "0b",
                    "index",
                    "decoded as",
                    "utf-8 sequence",
                    "Invalid",
                    "symbol",
                ] {
                    assert!(
                        !text.contains(internal),
                        "position {i} -> {replacement:?}: {text}"
                    );
                }
            }
        }
    }
}
