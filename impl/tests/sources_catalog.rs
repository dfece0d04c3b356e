//! Workflow sources and discovery: `wr.*` only from the bundled source (never shadowed), legacy
//! ids runnable with deterministic rename suggestions, discovery rows in the locked order,
//! bundled aliases, invalid documents reported as data, and pinned drift detection.
//!
//! Guards against a user file overriding a bundled workflow, suggestions that depend on load
//! order or time, and drift that goes unnoticed (or silently changes a pinned run).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::compiler::error::CompileErrorCode;
use workrail::sources::bundled::{ALIASES, BUNDLED, BundledSource};
use workrail::sources::catalog::ProblemKind;
use workrail::sources::memory::MemorySource;
use workrail::sources::{
    Catalog, DriftStatus, SourceWarning, WorkflowSource, check_drift, drift_warning,
};
use workrail_spec::closed::{WorkflowKind, WorkflowSourceKind as Kind};
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::{IdStatus, WorkflowId};
use workrail_spec::jcs::sha256;

fn doc(id: &str, name: &str) -> String {
    json!({"id": id, "name": name, "description": format!("{name} workflow."), "steps": [{"id": "a", "title": "A", "prompt": "Do A."}]}).to_string()
}

fn load(sources: &[&dyn WorkflowSource]) -> Catalog {
    Catalog::load(sources)
}

fn wid(s: &str) -> WorkflowId {
    WorkflowId::parse(s).unwrap()
}

/// lock: L-NS-WR-RESERVED, L-NS-DISCOVERY-FIELDS
#[test]
fn bundled_workflows_all_load_in_the_reserved_namespace() {
    let catalog = load(&[&BundledSource]);
    assert!(catalog.problems().is_empty(), "{:?}", catalog.problems());
    assert_eq!(catalog.workflows().len(), BUNDLED.len());
    for row in catalog.summaries() {
        assert!(row.workflow_id.is_reserved(), "{}", row.workflow_id);
        assert_eq!(row.source_kind, Kind::Bundled);
        assert_eq!(row.id_status, IdStatus::Namespaced);
        assert_eq!(row.kind, WorkflowKind::Workflow);
        assert_eq!(row.suggested_id, None);
        assert!(!row.description.is_empty());
    }
    for (alias, canonical) in ALIASES {
        assert!(
            catalog.get(canonical).is_some(),
            "alias {alias} points at a missing workflow"
        );
    }
}

/// lock: L-NS-WR-RESERVED, L-NS-NO-SHADOWING
#[test]
fn a_user_file_cannot_define_or_shadow_a_wr_workflow() {
    let user =
        MemorySource::new(Kind::User).with("user/evil.json", &doc("wr.bug_investigation", "Evil"));
    let catalog = load(&[&BundledSource, &user]);
    let winner = catalog.get("wr.bug_investigation").unwrap();
    assert_eq!(winner.source_kind, Kind::Bundled);
    assert_eq!(
        winner.compiled.snapshot.body.name.as_deref(),
        Some("Bug investigation")
    );
    let problem = &catalog.problems()[0];
    assert_eq!(problem.source_ref, "user/evil.json");
    assert_eq!(problem.workflow_id.as_deref(), Some("wr.bug_investigation"));
    let ProblemKind::Invalid(errors) = &problem.kind else {
        panic!("{problem:?}")
    };
    let e = errors
        .find(CompileErrorCode::ReservedNamespace, "/id")
        .unwrap();
    assert!(
        e.suggestion.contains("user.bug_investigation"),
        "{}",
        e.suggestion
    );
    let envelope = problem.to_envelope();
    assert_eq!(envelope.code, ErrorCode::WorkflowInvalid);
    assert!(
        envelope.message.contains("user/evil.json"),
        "{}",
        envelope.message
    );
}

/// lock: L-NS-RENAME-SUGGESTION, L-NS-LEGACY-RUNNABLE
#[test]
fn legacy_ids_get_source_based_suggestions() {
    let user = MemorySource::new(Kind::User).with("user/a.json", &doc("Bug-Fix", "Fix"));
    let project = MemorySource::new(Kind::Project).with(
        "project/workflows/b.json",
        &doc("release-checklist", "Release"),
    );
    let remote = MemorySource::new(Kind::Remote).with("remote/c.json", &doc("triage", "Triage"));
    let catalog = load(&[&project, &user, &remote]);
    let suggested = |id: &str| catalog.get(id).unwrap().suggested_id.clone();
    assert_eq!(suggested("Bug-Fix"), Some(wid("user.bug_fix")));
    assert_eq!(
        suggested("release-checklist"),
        Some(wid("project.release_checklist"))
    );
    assert_eq!(suggested("triage"), Some(wid("repo.triage")));
    // Legacy workflows stay runnable: they compiled.
    assert!(
        catalog
            .get("Bug-Fix")
            .unwrap()
            .compiled
            .snapshot
            .body
            .compiled_warnings
            .iter()
            .any(|w| w.code.as_str() == "legacy_workflow_id")
    );
}

/// lock: L-NS-RENAME-COLLISION
#[test]
fn colliding_suggestions_get_a_deterministic_source_hash_suffix() {
    let project = MemorySource::new(Kind::Project)
        .with("project/workflows/1.json", &doc("project.review", "Review"))
        .with("project/workflows/2.json", &doc("review", "Legacy review"))
        .with("project/workflows/3.json", &doc("Review", "Legacy Review"));
    let catalog = load(&[&project]);
    let hash4 = |r: &str| sha256(r.as_bytes()).hex()[..4].to_owned();
    assert_eq!(
        catalog.get("review").unwrap().suggested_id,
        Some(wid(&format!(
            "project.review_{}",
            hash4("project/workflows/2.json")
        )))
    );
    assert_eq!(
        catalog.get("Review").unwrap().suggested_id,
        Some(wid(&format!(
            "project.review_{}",
            hash4("project/workflows/3.json")
        )))
    );
    // Same inputs, same suggestions (no time, no randomness).
    assert_eq!(load(&[&project]), catalog);
}

/// lock: L-NS-DISCOVERY-SORT, L-NS-DISCOVERY-FIELDS
#[test]
fn discovery_rows_sort_by_namespace_kind_then_id_with_legacy_last() {
    let project = MemorySource::new(Kind::Project)
        .with("p/1.json", &doc("zeta.beta", "Z"))
        .with("p/2.json", &doc("alpha", "Legacy"))
        .with("p/3.json", &doc("project.b", "B"))
        .with("p/4.json", &doc("project.a", "A"));
    let catalog = load(&[&project, &BundledSource]);
    let ids: Vec<String> = catalog
        .summaries()
        .iter()
        .map(|s| s.workflow_id.to_string())
        .collect();
    assert_eq!(
        ids,
        [
            "project.a",
            "project.b",
            "wr.bug_investigation",
            "wr.coding_task",
            "wr.mr_review",
            "zeta.beta",
            "alpha"
        ]
    );
    let legacy = catalog.summaries().pop().unwrap();
    assert_eq!(legacy.id_status, IdStatus::Legacy);
    assert_eq!(legacy.suggested_id, Some(wid("project.alpha")));
    assert_eq!(legacy.source_kind, Kind::Project);
}

/// lock: L-NS-BUNDLED-ALIASES, L-NS-DISCOVERY-FIELDS
#[test]
fn legacy_bundled_aliases_resolve_with_a_canonical_id_and_a_warning() {
    let catalog = load(&[&BundledSource]);
    let resolved = catalog.resolve("bug-investigation").unwrap();
    assert_eq!(resolved.workflow.workflow_id, wid("wr.bug_investigation"));
    assert_eq!(resolved.summary.workflow_id, wid("bug-investigation"));
    assert_eq!(
        resolved.summary.canonical_id,
        Some(wid("wr.bug_investigation"))
    );
    assert_eq!(resolved.summary.id_status, IdStatus::Legacy);
    assert_eq!(
        resolved.warnings,
        [SourceWarning::AliasUsed {
            alias: "bug-investigation".into(),
            canonical_id: wid("wr.bug_investigation")
        }]
    );
    let warning = resolved.warnings[0].to_warning();
    assert_eq!(warning.code, "legacy_workflow_alias");
    assert!(
        warning.message.contains("use 'wr.bug_investigation'"),
        "{}",
        warning.message
    );
    // Aliases are not discovery rows, and an exact id wins over an alias.
    assert!(catalog.summaries().iter().all(|s| s.canonical_id.is_none()));
    let user = MemorySource::new(Kind::User).with("user/b.json", &doc("bug-investigation", "Mine"));
    let catalog = load(&[&BundledSource, &user]);
    assert_eq!(
        catalog
            .resolve("bug-investigation")
            .unwrap()
            .workflow
            .source_kind,
        Kind::User
    );
}

/// lock: L-NS-LEGACY-WARNING
#[test]
fn resolving_a_legacy_id_warns_with_the_suggestion() {
    let user = MemorySource::new(Kind::User).with("user/x.json", &doc("my-flow", "Mine"));
    let catalog = load(&[&user]);
    let resolved = catalog.resolve("my-flow").unwrap();
    assert_eq!(
        resolved.warnings,
        [SourceWarning::LegacyId {
            workflow_id: wid("my-flow"),
            suggested_id: Some(wid("user.my_flow"))
        }]
    );
    assert!(
        resolved.warnings[0]
            .to_warning()
            .message
            .contains("'user.my_flow'")
    );
    assert!(catalog.resolve("nope").is_none());
}

/// lock: L-NS-NO-SHADOWING
#[test]
fn the_first_source_wins_and_later_copies_are_reported() {
    let project = MemorySource::new(Kind::Project).with(
        "project/workflows/r.json",
        &doc("team.review", "Project copy"),
    );
    let user = MemorySource::new(Kind::User).with("user/r.json", &doc("team.review", "User copy"));
    let catalog = load(&[&project, &user]);
    assert_eq!(
        catalog.get("team.review").unwrap().source_kind,
        Kind::Project
    );
    let problem = &catalog.problems()[0];
    assert_eq!(
        problem.kind,
        ProblemKind::Shadowed {
            winner_ref: "project/workflows/r.json".into(),
            winner_kind: Kind::Project
        }
    );
    assert!(problem.to_envelope().suggestion.contains("Rename"));
}

/// lock: L-ERR-NO-PANIC
#[test]
fn unreadable_and_invalid_documents_are_problems_not_failures() {
    let user = MemorySource::new(Kind::User)
        .with("user/broken.json", "{ not json")
        .with_error("user/locked.json", "permission denied")
        .with("user/ok.json", &doc("user.ok", "Ok"));
    let catalog = load(&[&user]);
    assert!(catalog.get("user.ok").is_some());
    let kinds: Vec<&ProblemKind> = catalog.problems().iter().map(|p| &p.kind).collect();
    assert!(
        matches!(kinds[0], ProblemKind::Invalid(e) if e.errors()[0].code == CompileErrorCode::InvalidJson)
    );
    assert_eq!(kinds[1], &ProblemKind::Io("permission denied".into()));
    assert!(
        catalog.problems()[1]
            .to_envelope()
            .message
            .contains("permission denied")
    );
}

/// lock: L-HASH-PINNED-DRIFT, L-HASH-PINNED-PERSISTED
#[test]
fn pinned_drift_is_detected_by_recompiling_the_current_source() {
    let original = doc("project.flow", "Flow");
    let pinned = load(&[&MemorySource::new(Kind::Project).with("p/f.json", &original)]);
    let pinned_hash = pinned
        .get("project.flow")
        .unwrap()
        .compiled
        .workflow_hash
        .clone();
    let id = wid("project.flow");
    // Same content (even reformatted): in sync.
    let reformatted: Value = serde_json::from_str(&original).unwrap();
    let same = load(&[&MemorySource::new(Kind::Project).with(
        "p/f.json",
        &serde_json::to_string_pretty(&reformatted).unwrap(),
    )]);
    assert_eq!(check_drift(&same, &id, &pinned_hash), None);
    // Changed content: a structured warning with both hashes.
    let changed =
        load(
            &[&MemorySource::new(Kind::Project).with("p/f.json", &doc("project.flow", "Flow v2"))],
        );
    let drift = check_drift(&changed, &id, &pinned_hash).unwrap();
    let current = changed
        .get("project.flow")
        .unwrap()
        .compiled
        .workflow_hash
        .clone();
    assert_eq!(
        drift.status,
        DriftStatus::Changed {
            current_hash: current.clone()
        }
    );
    let warning = drift_warning(&drift);
    assert_eq!(warning.code, "pinned_workflow_drift");
    assert!(
        warning.message.contains(pinned_hash.as_str())
            && warning.message.contains(current.as_str())
    );
    let structured = serde_json::to_value(&warning).unwrap();
    assert_eq!(structured["pinnedDrift"]["status"]["kind"], "changed");
    assert_eq!(
        structured["pinnedDrift"]["status"]["currentHash"],
        current.as_str()
    );
    // Removed, or broken.
    assert_eq!(
        check_drift(&load(&[]), &id, &pinned_hash).unwrap().status,
        DriftStatus::SourceMissing
    );
    let broken =
        json!({"id": "project.flow", "name": "Flow", "description": "x", "steps": []}).to_string();
    let broken = load(&[&MemorySource::new(Kind::Project).with("p/f.json", &broken)]);
    assert_eq!(
        check_drift(&broken, &id, &pinned_hash).unwrap().status,
        DriftStatus::SourceInvalid { error_count: 1 }
    );
}

/// lock: L-HASH-EXCLUSIONS
#[test]
fn where_a_workflow_lives_does_not_change_its_hash() {
    let text = doc("team.flow", "Flow");
    let from_user = load(&[&MemorySource::new(Kind::User).with("user/a.json", &text)]);
    let from_project =
        load(&[&MemorySource::new(Kind::Project).with("project/workflows/b.json", &text)]);
    assert_eq!(
        from_user.get("team.flow").unwrap().compiled.workflow_hash,
        from_project
            .get("team.flow")
            .unwrap()
            .compiled
            .workflow_hash
    );
}
