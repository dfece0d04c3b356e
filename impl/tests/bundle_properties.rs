//! Property: export -> import is lossless for random sessions driven through the real protocol
//! (start, advance with and without artifacts and loop decisions, blocked attempts,
//! rehydrate-forks, checkpoints), both into a fresh data directory and into the same one (id
//! collision -> new session).
//!
//! Guards against: projections (preferred tip, run status inputs, current outputs, unresolved
//! gaps) or session summaries that differ after import; re-exports that are not the same bundle
//! modulo the session id, `bundleId` and `exportedAt`; export bytes that are not the canonical
//! form of the whole bundle; imported sessions whose re-minted tokens
//! do not continue; a colliding import that touches the original session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use bundle_support::*;
use proptest::prelude::*;
use workrail::bundle::{ImportOptions, NoProgress};
use workrail::store::memfs::MemFs;

use protocol_support::ack;

fn strip_for_remap(mut value: serde_json::Value) -> serde_json::Value {
    let object = value.as_object_mut().unwrap();
    object.remove("integrity");
    for record in object["session"]["manifest"].as_array_mut().unwrap() {
        if record["kind"] == "segment_closed" {
            let record = record.as_object_mut().unwrap();
            record.remove("sha256");
            record.remove("bytes");
        }
    }
    value
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-BUNDLE-RESUMABLE, L-BUNDLE-IMPORT-AS-NEW, L-BUNDLE-NO-TOKENS
    #[test]
    fn export_then_import_preserves_projections_and_round_trips(
        workflow in workflow(),
        ops in prop::collection::vec(op(), 0..14),
        neighbours in 0usize..3,
    ) {
        let fs = MemFs::new();
        let wr = open_seeded(&fs, 31);
        // Other sessions in the same store must not leak into the bundle.
        for _ in 0..neighbours {
            build_session(&wr, "project.demo", &[Op::Advance { artifact: true, decide: None }]);
        }
        let built = build_session(&wr, workflow, &ops);
        let source_projection = projection(&wr, &built.session);
        let source_summary = wr.session_summary(&built.session).unwrap();
        let source_events = events(&wr, &built.session);
        let exported = export(&wr, &built.session);
        prop_assert!(exported.warnings.is_empty(), "{:?}", exported.warnings);
        for token in &built.tokens {
            prop_assert!(!exported.text.contains(token.as_str()));
        }
        prop_assert_eq!(&exported.bundle.body.session.events, &source_events);
        // The text written part by part is the canonical form of the whole bundle (the
        // Value-based serialization is the reference).
        let reference = workrail_spec::jcs::to_canonical_string(
            &exported.bundle.to_value().unwrap(),
        )
        .unwrap();
        prop_assert_eq!(&exported.text, &reference);

        // Into a fresh data directory: same id, same projections, identical re-export.
        let fresh_fs = MemFs::new();
        let fresh = open_seeded(&fresh_fs, 32);
        let into_fresh = fresh
            .import_bundle(&exported.text, &ImportOptions::default(), &NoProgress)
            .unwrap();
        prop_assert!(!into_fresh.remapped);
        prop_assert_eq!(&into_fresh.session_id, &built.session);
        prop_assert_eq!(projection(&fresh, &into_fresh.session_id), source_projection.clone());
        prop_assert_eq!(fresh.session_summary(&into_fresh.session_id).unwrap(), source_summary.clone());
        let again = export(&fresh, &into_fresh.session_id);
        prop_assert_eq!(
            comparable(&again.text, &into_fresh.session_id, &into_fresh.session_id),
            comparable(&exported.text, &built.session, &built.session)
        );

        // Into the same data directory: a new id, the same projections, the original untouched.
        let into_same = wr
            .import_bundle(&exported.text, &ImportOptions::default(), &NoProgress)
            .unwrap();
        prop_assert!(into_same.remapped);
        prop_assert_ne!(&into_same.session_id, &built.session);
        prop_assert_eq!(&events(&wr, &built.session), &source_events);
        prop_assert_eq!(projection(&wr, &into_same.session_id), source_projection.clone());
        prop_assert_eq!(wr.session_summary(&into_same.session_id).unwrap(), source_summary);
        let remapped_export = export(&wr, &into_same.session_id);
        prop_assert_eq!(
            comparable(&remapped_export.text, &into_same.session_id, &built.session),
            strip_for_remap(comparable(&exported.text, &built.session, &built.session))
        );

        // Re-minted tokens: one rehydrate response per run, at its preferred tip, that continues.
        prop_assert_eq!(into_fresh.runs.len(), source_projection.runs.len());
        for (a, b) in into_fresh.runs.iter().zip(&into_same.runs) {
            let view = &source_projection.runs[&a.run_id];
            prop_assert_eq!(Some(&a.preferred_tip), view.preferred_tip.as_ref());
            prop_assert_eq!(&a.preferred_tip, &b.preferred_tip);
            let (ra, rb) = (a.resume.clone().unwrap(), b.resume.clone().unwrap());
            prop_assert_eq!(&ra.pending, &rb.pending);
            prop_assert_eq!(&ra.run, &rb.run);
            prop_assert_eq!(&ra.recap, &rb.recap);
            prop_assert_eq!(ra.is_complete, rb.is_complete);
            prop_assert_eq!(&ra.session.session_id, &into_fresh.session_id);
            prop_assert_eq!(&rb.session.session_id, &into_same.session_id);
            if ra.ack_token.is_some() {
                let next_a = fresh.continue_workflow(ack(&ra, "Next.", vec![])).unwrap();
                let next_b = wr.continue_workflow(ack(&rb, "Next.", vec![])).unwrap();
                prop_assert_eq!(next_a.pending, next_b.pending);
                prop_assert_eq!(next_a.kind, next_b.kind);
            }
        }
        // Continuing the copy never touches the original.
        prop_assert_eq!(events(&wr, &built.session), source_events);
    }
}
