//! The builtins registry is one closed-set source of truth: the committed catalog
//! (`impl/builtins/catalog.json`) is regenerated from it and must match byte for byte, every
//! contract example validates against its schema, ref snippets fit their budget, and the
//! registry tables agree with each other.
//!
//! Regenerate the catalog with: `WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_builtins::`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::PathBuf;

use workrail::builtins::catalog::{catalog_json, catalog_value};
use workrail::builtins::contracts::CONTRACTS;
use workrail::builtins::features::FeatureId;
use workrail::builtins::refs::{REF_PREFIX, REF_SNIPPET_MAX_BYTES, REF_STEP_MAX_BYTES, REFS};
use workrail::builtins::templates::TEMPLATES;
use workrail::compiler::error::CompileErrorCode;
use workrail::engine::contract::validator;
use workrail_spec::jcs::sha256;

fn catalog_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("builtins/catalog.json")
}

fn blessing() -> bool {
    std::env::var_os("WORKRAIL_BLESS").is_some_and(|v| v == "1")
}

/// lock: L-GEN-BUILTINS-CATALOG, L-GEN-VERIFIER, L-GEN-DETERMINISTIC, L-GEN-SINGLE-SOURCE
#[test]
fn the_committed_catalog_matches_the_registry() {
    let generated = catalog_json();
    assert_eq!(
        generated,
        catalog_json(),
        "catalog generation is not deterministic"
    );
    let path = catalog_path();
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    if blessing() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &generated).unwrap();
        return;
    }
    let diff = similar::TextDiff::from_lines(committed.as_str(), generated.as_str())
        .unified_diff()
        .context_radius(2)
        .header("committed", "generated")
        .to_string();
    let shown: String = diff.lines().take(80).collect::<Vec<_>>().join("\n");
    panic!(
        "{} is stale:\n{shown}\n\nregenerate with: WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_builtins::",
        path.display()
    );
}

/// lock: L-GEN-BUILTINS-CATALOG
#[test]
fn the_catalog_lists_every_builtin() {
    let catalog = catalog_value();
    let ids = |key: &str, field: &str| -> Vec<String> {
        catalog[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[field].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids("contracts", "contractRef"),
        CONTRACTS.iter().map(|c| c.contract_ref).collect::<Vec<_>>()
    );
    assert_eq!(
        ids("features", "featureId"),
        FeatureId::ALL
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        ids("refs", "refId"),
        REFS.iter().map(|r| r.ref_id).collect::<Vec<_>>()
    );
    assert_eq!(
        ids("templates", "templateId"),
        TEMPLATES.iter().map(|t| t.template_id).collect::<Vec<_>>()
    );
    assert_eq!(catalog["budgets"]["refStepMaxBytes"], REF_STEP_MAX_BYTES);
}

/// lock: L-AUTHOR-CONTRACT-PACKS, L-LOOP-CONTROL-ARTIFACT
#[test]
fn contract_packs_are_sorted_and_their_examples_validate() {
    let refs: Vec<&str> = CONTRACTS.iter().map(|c| c.contract_ref).collect();
    let mut sorted = refs.clone();
    sorted.sort_unstable();
    assert_eq!(refs, sorted);
    for required in [
        "wr.contracts.capability_observation",
        "wr.contracts.loop_control",
        "wr.contracts.verification_report",
        "wr.contracts.workflow_divergence",
    ] {
        assert!(refs.contains(&required), "missing {required}");
    }
    for pack in CONTRACTS {
        let v = validator(&pack.schema()).unwrap();
        assert!(
            v.is_valid(&pack.example()),
            "{} example does not validate",
            pack.contract_ref
        );
    }
    let loop_control = CONTRACTS
        .iter()
        .find(|c| c.contract_ref == "wr.contracts.loop_control")
        .unwrap();
    assert_eq!(loop_control.artifact_kind, "wr.loop_control");
    assert_eq!(
        loop_control.schema()["properties"]["summary"]["maxUtf8Bytes"],
        512
    );
    assert_eq!(
        loop_control.schema()["required"],
        serde_json::json!(["decision", "kind", "loopId"])
    );
}

/// lock: L-AUTHOR-REFS-BUDGETS, L-AUTHOR-REFS-CLOSED, L-BUDGET-UTF8-BYTES
#[test]
fn ref_snippets_are_namespaced_sorted_and_within_budget() {
    let mut previous = "";
    for r in REFS {
        assert!(r.ref_id.starts_with(REF_PREFIX), "{}", r.ref_id);
        assert!(r.ref_id > previous, "refs must be sorted and unique");
        previous = r.ref_id;
        assert!(
            r.text.len() <= REF_SNIPPET_MAX_BYTES,
            "{} is {} bytes",
            r.ref_id,
            r.text.len()
        );
        assert!(!r.text.contains("{{"), "{} contains templating", r.ref_id);
        assert_eq!(r.content_hash(), sha256(r.text.as_bytes()));
        assert!(
            !r.text.contains("  ") && !r.text.contains('\n'),
            "{} has layout noise",
            r.ref_id
        );
    }
}

/// lock: L-AUTHOR-FEATURE-CONFIG
#[test]
fn feature_tables_agree() {
    for feature in FeatureId::ALL {
        let names: Vec<&str> = feature.config_fields().iter().map(|f| f.name).collect();
        assert_eq!(names, feature.config_field_names(), "{}", feature.as_str());
        for field in feature.config_fields() {
            assert!(
                field.allowed.contains(&field.default),
                "{}: default not allowed",
                field.name
            );
        }
        assert_eq!(FeatureId::parse(feature.as_str()), Some(*feature));
    }
    let configurable: Vec<&str> = FeatureId::ALL
        .iter()
        .filter(|f| f.configurable())
        .map(|f| f.as_str())
        .collect();
    assert_eq!(
        configurable,
        [
            "wr.features.capabilities",
            "wr.features.mode_guidance",
            "wr.features.output_contracts"
        ]
    );
}

#[test]
fn error_code_spellings_match_serde() {
    let all = [
        CompileErrorCode::InvalidJson,
        CompileErrorCode::WrongType,
        CompileErrorCode::MissingField,
        CompileErrorCode::UnknownField,
        CompileErrorCode::InvalidValue,
        CompileErrorCode::InvalidId,
        CompileErrorCode::LegacyId,
        CompileErrorCode::ReservedNamespace,
        CompileErrorCode::DuplicateId,
        CompileErrorCode::UnknownTemplate,
        CompileErrorCode::UnknownFeature,
        CompileErrorCode::FeatureConfigNotAllowed,
        CompileErrorCode::ConflictingFeature,
        CompileErrorCode::UnknownContract,
        CompileErrorCode::InlineSchema,
        CompileErrorCode::UnknownRef,
        CompileErrorCode::RefPlacement,
        CompileErrorCode::Templating,
        CompileErrorCode::RefBudgetExceeded,
        CompileErrorCode::UnknownCondition,
        CompileErrorCode::MissingMaxIterations,
        CompileErrorCode::LoopDecisionStep,
        CompileErrorCode::Internal,
    ];
    for code in all {
        assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
    }
}

/// Agent prompts speak of the work, not of how WorkRail stores it: no bundled step prompt, and
/// no ref a prompt can embed (except the one about hashing, which is its subject), names
/// storage internals.
#[test]
fn bundled_prompts_and_refs_carry_no_storage_jargon() {
    use workrail::compiler::{CompileContext, compile_str};
    use workrail::sources::bundled::BUNDLED;
    const JARGON: &[&str] = &[
        "event log",
        "append-only",
        "content-addressed",
        "snapshot",
        "manifest",
        "segment",
        "projection",
        "dedupe",
        "durable truth",
    ];
    let check = |what: &str, text: &str| {
        let lower = text.to_lowercase();
        for word in JARGON {
            assert!(!lower.contains(word), "{what} says `{word}`:\n{text}");
        }
    };
    for (name, text) in BUNDLED {
        let compiled =
            compile_str(text, &CompileContext::bundled()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for step in &compiled.snapshot.body.steps {
            check(&format!("{name} step {}", step.step_id), &step.prompt);
        }
    }
    for snippet in REFS.iter().filter(|r| r.ref_id != "wr.refs.jcs_hashing") {
        check(snippet.ref_id, snippet.text);
        check(snippet.ref_id, snippet.summary);
    }
    for template in TEMPLATES {
        check(template.template_id, template.summary);
    }
}
