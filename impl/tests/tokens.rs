//! Tokens are signed, scoped, versioned references (locks §1.2): the HMAC covers exactly the
//! canonical payload bytes, verification tries `current` then `previous`, and every tampered,
//! truncated, swapped or foreign token is refused with its locked code and a recovery path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hmac::{KeyInit, Mac};
use workrail::store::{Keyring, SigningKey};
use workrail::tokens::{TokenCodec, TokenError};
use workrail_spec::closed::TokenKind;
use workrail_spec::error::ErrorCode;
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
        Err(TokenError::BadSignature)
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

/// lock: L-TOKEN-FORMAT
#[test]
fn harmless_wrapping_is_tolerated() {
    let codec = TokenCodec::new(Keyring {
        current: key(4),
        previous: None,
    });
    let token = codec.mint(&state());
    let (a, b) = token.split_at(40);
    for wrapped in [
        format!("  {token}\n"),
        format!("`{token}`"),
        format!("\"{token}\""),
        format!("{a}\n{b}"),
    ] {
        assert_eq!(
            codec.verify(&wrapped, TokenKind::State).unwrap(),
            state(),
            "{wrapped:?}"
        );
    }
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
