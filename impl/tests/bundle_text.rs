//! The bundle text: read strictly, written canonically.
//!
//! Import reads a bundle without building a JSON tree (a strict scan, then a typed parse straight
//! from the text) and export writes it part by part. Guards against what that could lose:
//! duplicate keys accepted where the typed parse alone would keep the last one silently (map-typed
//! fields, embedded free JSON: artifacts, context, snapshots); a version check that slips behind
//! shape checks; export bytes that drift from the canonical (RFC 8785) form of the whole bundle,
//! the form the Value-based serialization gives.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use bundle_support::*;
use serde_json::{Value, json};
use workrail::bundle::ExportedBundle;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::layout;
use workrail::store::memfs::MemFs;
use workrail_spec::bundle::ExportBundleV1;
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::SessionId;
use workrail_spec::jcs::{parse_strict, to_canonical_string};

use protocol_support::ack;

/// A session with every kind of content a bundle carries: artifacts (generic and loop
/// control), a checkpoint, a fork, and a context with nested, escaped and non-ASCII JSON.
fn rich_session(wr: &Workrail) -> Built {
    let built = build_session(
        wr,
        "project.demo",
        &[
            Op::Advance {
                artifact: true,
                decide: None,
            },
            Op::Advance {
                artifact: false,
                decide: None,
            },
            Op::Advance {
                artifact: true,
                decide: Some(true),
            },
            Op::Checkpoint,
            Op::Fork { back: 2 },
        ],
    );
    let mut input = ack(
        built.last(),
        "Notes with \"quotes\", a tab\t, é and 😀.",
        vec![json!({"kind": "test.note", "text": "\u{7f}\u{1f}", "n": 1.5e-7, "big": 1e21})],
    );
    input.context = Some(
        json!({
            "ticket": {"id": 7, "tags": ["a", "b"], "é": "x", "😀": null, "\u{10000}": true},
            "z": [0.1, -0, 1e30, 333_333_333.333_333_3]
        })
        .as_object()
        .unwrap()
        .clone(),
    );
    wr.continue_workflow(input).unwrap();
    built
}

/// The export's text must be the canonical form of the whole bundle as the Value-based
/// serialization gives it (the reference), and must parse back to the same bundle by the
/// text parser and by the reference parser (strict Value tree, then typed).
fn assert_canonical(exported: &ExportedBundle) {
    let reference = to_canonical_string(&exported.bundle.to_value().unwrap()).unwrap();
    assert_eq!(
        exported.text, reference,
        "export bytes differ from the reference"
    );
    let parsed = ExportBundleV1::from_json_str(&exported.text).unwrap();
    assert_eq!(parsed, exported.bundle);
    let by_tree = ExportBundleV1::from_value(parse_strict(&exported.text).unwrap()).unwrap();
    assert_eq!(by_tree, exported.bundle);
}

/// lock: L-BUNDLE-INTEGRITY-JCS
#[test]
fn export_bytes_are_the_canonical_form_of_the_whole_bundle() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 21);
    let rich = rich_session(&wr);
    let exported = export(&wr, &rich.session);
    assert!(!exported.bundle.body.artifacts.is_empty());
    assert!(exported.text.contains("\"context\""));
    assert_canonical(&exported);
    for workflow in ["wr.coding_task", "wr.bug_investigation", "project.demo"] {
        let built = build_session(
            &wr,
            workflow,
            &[
                Op::Advance {
                    artifact: true,
                    decide: Some(false),
                },
                Op::Checkpoint,
                Op::Rehydrate,
                Op::Advance {
                    artifact: false,
                    decide: None,
                },
            ],
        );
        assert_canonical(&export(&wr, &built.session));
    }
    // A copy imported under a new id, and a salvage export.
    let other = MemFs::new();
    let target = open_seeded(&other, 22);
    let first = import(&target, &exported.text).unwrap();
    let again = import(&target, &exported.text).unwrap();
    assert!(again.remapped);
    assert_canonical(&export(&target, &first.session_id));
    assert_canonical(&export(&target, &again.session_id));
    corrupt_last_segment(&fs, &rich.session);
    let salvage = export(&open_seeded(&fs, 21), &rich.session);
    assert!(salvage.is_salvage());
    assert_canonical(&salvage);
}

fn corrupt_last_segment(fs: &MemFs, session: &SessionId) {
    let dir = layout::events_dir(session);
    let last = fs
        .list_dir(&dir)
        .unwrap()
        .into_iter()
        .rfind(|n| !n.starts_with('.'))
        .unwrap();
    fs.corrupt(&dir.join(last), |bytes| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    });
}

/// `text` with the first member of the object opening at byte `open` written twice.
fn duplicate_first_member(text: &str, open: usize) -> String {
    assert_eq!(&text[open..=open], "{", "not an object at {open}");
    let rest = &text[open + 1..];
    let mut keys = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    keys.next()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}: {}", &rest[..40]));
    let colon = keys.byte_offset();
    assert_eq!(&rest[colon..=colon], ":");
    let mut values = serde_json::Deserializer::from_str(&rest[colon + 1..]).into_iter::<Value>();
    values.next().unwrap().unwrap();
    let member = &rest[..colon + 1 + values.byte_offset()];
    format!("{}{member},{rest}", &text[..=open])
}

/// The byte offset of the first `{` after the first occurrence of `anchor`.
fn object_after(text: &str, anchor: &str) -> usize {
    let at = text
        .find(anchor)
        .unwrap_or_else(|| panic!("{anchor} not in the bundle"));
    at + text[at..].find('{').unwrap()
}

/// lock: L-BUNDLE-ERRORS, L-BUNDLE-IMPORT-VALIDATES
#[test]
fn duplicate_keys_at_any_depth_are_refused_as_invalid_format() {
    let source = MemFs::new();
    let wr = open_seeded(&source, 23);
    let built = rich_session(&wr);
    let good = export(&wr, &built.session).text;
    let fs = MemFs::new();
    let target = open_seeded(&fs, 24);
    let places = [
        ("the top level", 0),
        ("the producer", object_after(&good, "\"producer\":")),
        (
            "the integrity manifest",
            object_after(&good, "\"integrity\":"),
        ),
        ("an integrity entry", object_after(&good, "\"entries\":")),
        ("the session", object_after(&good, "\"session\":")),
        ("an event", object_after(&good, "\"events\":")),
        (
            "an event's data",
            good.find("\"data\":{\"").unwrap() + "\"data\":".len(),
        ),
        (
            "the context (free JSON)",
            object_after(&good, "\"context\":"),
        ),
        ("nested context", object_after(&good, "\"ticket\":")),
        ("a manifest record", object_after(&good, "\"manifest\":")),
        ("the snapshots map", object_after(&good, "\"snapshots\":")),
        ("a snapshot", object_after(&good, "\"snapshots\":{\"")),
        (
            "an engine payload",
            object_after(&good, "\"enginePayload\":"),
        ),
        (
            "the pinned workflows map",
            object_after(&good, "\"pinnedWorkflows\":"),
        ),
        (
            "a pinned workflow",
            object_after(&good, "\"pinnedWorkflows\":{\""),
        ),
        ("the artifacts map", object_after(&good, "\"artifacts\":")),
        (
            "an artifact (free JSON)",
            object_after(&good, "\"artifacts\":{\""),
        ),
    ];
    for (place, open) in places {
        let text = duplicate_first_member(&good, open);
        // The reference (a strict tree) refuses it too: the same classification as before.
        assert!(parse_strict(&text).is_err(), "{place}: not a duplicate");
        let err = assert_refused(&fs, &target, &text, ErrorCode::BundleInvalidFormat);
        assert!(
            err.message.contains("duplicate"),
            "{place}: {}",
            err.message
        );
        // Duplicate keys are refused before the version is looked at.
        let versioned = text.replacen("\"bundleSchemaVersion\":1", "\"bundleSchemaVersion\":2", 1);
        assert_ne!(versioned, text);
        let err = assert_refused(&fs, &target, &versioned, ErrorCode::BundleInvalidFormat);
        assert!(
            err.message.contains("duplicate"),
            "{place}: {}",
            err.message
        );
    }
    // A duplicate spelled with an escape is still a duplicate.
    let escaped = good.replacen("\"ticket\":{", "\"ticket\":{\"\\u0069d\":7,", 1);
    assert_refused(&fs, &target, &escaped, ErrorCode::BundleInvalidFormat);
    // The untouched bundle imports.
    import(&target, &good).unwrap();
}

/// lock: L-BUNDLE-ERRORS
#[test]
fn the_version_is_checked_before_the_shape() {
    let source = MemFs::new();
    let wr = open_seeded(&source, 25);
    let built = rich_session(&wr);
    let good: Value = serde_json::from_str(&export(&wr, &built.session).text).unwrap();
    let fs = MemFs::new();
    let target = open_seeded(&fs, 26);
    let text = |v: &Value| serde_json::to_string(v).unwrap();
    for version in [
        json!(2),
        json!(0),
        json!("1"),
        json!(1.5),
        json!(null),
        json!({"v": 1}),
    ] {
        // Wrong version plus shape errors everywhere: an unknown field, a missing field, a
        // wrong type, a damaged event and an unknown nested version.
        let mut v = good.clone();
        v["bundleSchemaVersion"] = version.clone();
        v["surprise"] = json!(true);
        v.as_object_mut().unwrap().remove("producer");
        v["exportedAt"] = json!(12);
        v["session"]["events"][0] = json!({"v": 9});
        v["integrity"]["kind"] = json!("md5_manifest_v1");
        let err = assert_refused(&fs, &target, &text(&v), ErrorCode::BundleUnsupportedVersion);
        assert!(
            err.message.contains("bundleSchemaVersion"),
            "{}",
            err.message
        );
        // The version field last in the text changes nothing.
        let mut object = v.as_object().unwrap().clone();
        object.remove("bundleSchemaVersion");
        let mut last = text(&Value::Object(object));
        last.pop();
        last.push_str(&format!(",\"bundleSchemaVersion\":{version}}}"));
        assert_refused(&fs, &target, &last, ErrorCode::BundleUnsupportedVersion);
    }
    // Without a version field the bundle is malformed, whatever else it holds.
    let mut v = good.clone();
    v.as_object_mut().unwrap().remove("bundleSchemaVersion");
    let err = assert_refused(&fs, &target, &text(&v), ErrorCode::BundleInvalidFormat);
    assert!(
        err.message.contains("bundleSchemaVersion"),
        "{}",
        err.message
    );
    // Not an object, or not JSON: malformed, named.
    for (bad, says) in [
        ("[1,2]", "an array"),
        ("\"bundle\"", "a string"),
        ("{\"bundleSchemaVersion\":2,", "EOF"),
        ("{\"bundleSchemaVersion\":1} trailing", "trailing"),
    ] {
        let err = assert_refused(&fs, &target, bad, ErrorCode::BundleInvalidFormat);
        assert!(err.message.contains(says), "{bad}: {}", err.message);
    }
    // Shape errors with the right version are malformed, and say where.
    let mut v = good.clone();
    v["session"]["surprise"] = json!(1);
    let err = assert_refused(&fs, &target, &text(&v), ErrorCode::BundleInvalidFormat);
    assert!(err.message.contains("surprise"), "{}", err.message);
}
