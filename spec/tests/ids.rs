//! Identifiers are distinct newtypes with validating constructors, and deserialization goes
//! through the same validation, so an id of one kind can never pass for another.

use workrail_spec::ids::*;

macro_rules! check_prefixed {
    ($($ty:ident),* $(,)?) => {{
        let mut prefixes = std::collections::BTreeSet::new();
        $(
            let prefix = $ty::PREFIX;
            assert!(prefixes.insert(prefix), "prefix {prefix} is used twice");
            let good = format!("{prefix}_0123456789abcdef");
            assert_eq!($ty::parse(&good).unwrap().as_str(), good);
            // Minted and derived ids round-trip through the validating constructor.
            let minted = $ty::from_entropy(&[7; 10]);
            assert_eq!($ty::parse(minted.as_str()).unwrap(), minted);
            let derived = $ty::from_digest(&workrail_spec::jcs::sha256(b"x"));
            assert_eq!($ty::parse(derived.as_str()).unwrap(), derived);
            for bad in [
                String::new(),
                "0123456789abcdef".to_owned(),
                format!("{prefix}_"),
                format!("{prefix}_ABC"),
                format!("{prefix}_a b"),
                format!("{prefix}_a:b"),
                format!("{prefix}_{}", "a".repeat(ID_BODY_MAX_LEN + 1)),
                format!("x{prefix}_abc"),
            ] {
                assert!($ty::parse(&bad).is_err(), "{} accepted {bad:?}", stringify!($ty));
                let json = serde_json::to_string(&bad).unwrap();
                assert!(
                    serde_json::from_str::<$ty>(&json).is_err(),
                    "{} deserialized {bad:?}",
                    stringify!($ty)
                );
            }
        )*
        prefixes
    }};
}

/// lock: L-ID-NEWTYPES
#[test]
fn every_prefixed_id_validates_and_no_two_kinds_share_a_prefix() {
    let prefixes = check_prefixed!(
        SessionId,
        RunId,
        NodeId,
        EventId,
        OutputId,
        GapId,
        AttemptId,
        ChangeId,
        CapObsId,
        DivergenceId,
        TraceId,
        ContextId,
        BundleId,
    );
    assert_eq!(prefixes.len(), 13);
    // An id of one kind never parses as another kind.
    let run = RunId::from_entropy(&[1; 10]);
    assert!(SessionId::parse(run.as_str()).is_err());
    assert!(NodeId::parse(run.as_str()).is_err());
    assert!(serde_json::from_value::<SessionId>(serde_json::json!(run.as_str())).is_err());
}

/// lock: L-ID-NEWTYPES
#[test]
fn digests_and_indexes_are_validated_too() {
    let digest = workrail_spec::jcs::sha256(b"payload");
    let hash = WorkflowHash::from_digest(digest.clone());
    assert_eq!(WorkflowHash::parse(hash.as_str()).unwrap(), hash);
    for bad in [
        "sha256:",
        "sha256:ABCDEF",
        "md5:0123",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        assert!(WorkflowHash::parse(bad).is_err(), "{bad}");
        assert!(SnapshotRef::parse(bad).is_err(), "{bad}");
    }
    // EventIndex is bounded to what RFC 8785 numbers carry exactly.
    assert!(serde_json::from_str::<EventIndex>("9007199254740991").is_ok());
    assert!(serde_json::from_str::<EventIndex>("9007199254740992").is_err());
    assert!(serde_json::from_str::<EventIndex>("-1").is_err());
}

/// A blocker's `context_key.key` and `workflow_step.stepId` are delimiter-safe: `[a-z0-9_-]+`
/// is accepted, anything else (upper case, spaces, `@`, `/`, `:`, `.`, empty, non-ASCII) is
/// refused wherever the pointer is read, and the schema says the same.
///
/// lock: L-BLOCKER-POINTER-IDS
#[test]
fn blocker_pointer_ids_are_delimiter_safe() {
    use workrail_spec::blocker::BlockerPointer;
    let pointer = |kind: &str, field: &str, value: &str| {
        serde_json::from_value::<BlockerPointer>(serde_json::json!({"kind": kind, field: value}))
    };
    for (kind, field) in [("context_key", "key"), ("workflow_step", "stepId")] {
        for good in ["ticket_id", "a", "step-2", "x_y-z_9"] {
            let parsed = pointer(kind, field, good).unwrap_or_else(|e| panic!("{good}: {e}"));
            let back = serde_json::to_value(&parsed).unwrap();
            assert_eq!(back[field], good);
        }
        for bad in [
            "",
            "Ticket",
            "has space",
            "a@b",
            "a/b",
            "a:b",
            "a.b",
            "é",
            "ticket\n",
        ] {
            assert!(
                pointer(kind, field, bad).is_err(),
                "{kind}.{field} = {bad:?} must be refused"
            );
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(BlockerPointer)).unwrap();
    assert!(
        schema.to_string().contains("^[a-z0-9_-]+$"),
        "the schema names the pattern: {schema}"
    );
}
