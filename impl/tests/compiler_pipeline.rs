//! The compile pipeline produces the locked compiled snapshot: templates expanded in place with
//! provenance, features applied in lexical order with explicit configs, required capabilities
//! probed, refs embedded with provenance, contracts resolved and sorted, conditions and loops
//! sorted, prompts rendered in the documented format, and the hash taken over one JCS form.
//!
//! Guards against order-by-accident drift (a hash that depends on source list order), lost
//! provenance, and prompt text that silently changes shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::builtins::refs;
use workrail::compiler::{CompileContext, Compiled, compile, normalize_schema};
use workrail_spec::closed::{Capability, CapabilityRequirement, StepSource};
use workrail_spec::compiled::{CompiledWarningCode, CompiledWorkflowSnapshotV1, SequenceItem};
use workrail_spec::jcs::{sha256, to_canonical_bytes};

fn compiled(src: &Value) -> Compiled {
    compile(src, &CompileContext::load("project")).unwrap_or_else(|e| panic!("{e}"))
}

fn base(steps: Value) -> Value {
    json!({"id": "project.sample", "name": "Sample", "description": "A sample workflow.", "steps": steps})
}

fn step_ids(c: &Compiled) -> Vec<&str> {
    c.snapshot
        .body
        .steps
        .iter()
        .map(|s| s.step_id.as_str())
        .collect()
}

/// lock: L-AUTHOR-PROMPTBLOCKS-RENDER, L-AUTHOR-PROMPTBLOCKS, L-AUTHOR-AGENT-ROLE
#[test]
fn prompt_blocks_render_in_the_documented_format() {
    let mut src = base(json!([{
        "id": "triage", "title": "Triage",
        "promptBlocks": {
            "verify": ["Hypotheses are testable."],
            "outputRequired": {"notesMarkdown": "At most 10 lines.", "decision": "Go or no-go."},
            "procedure": ["Summarize the bug.", "List hypotheses:\n- one\n- two"],
            "constraints": ["Be explicit."],
            "goal": "Classify the bug."
        },
        "output": {"hints": {"divergence": "Report skips."}}
    }]));
    src["agentRole"] = json!("You are a senior engineer.");
    let c = compiled(&src);
    let expected = "## Role\nYou are a senior engineer.\n\n## Goal\nClassify the bug.\n\n## Constraints\n- Be explicit.\n\n## Procedure\n1. Summarize the bug.\n2. List hypotheses:\n   - one\n   - two\n\n## Output required\n- decision: Go or no-go.\n- notesMarkdown: At most 10 lines.\n- hint (divergence): Report skips.\n\n## Verify\n- Hypotheses are testable.";
    assert_eq!(c.snapshot.body.steps[0].prompt, expected);
}

/// lock: L-AUTHOR-AGENT-ROLE
#[test]
fn step_agent_role_overrides_the_workflow_role() {
    let mut src = base(json!([
        {"id": "a", "title": "A", "prompt": "Do A."},
        {"id": "b", "title": "B", "agentRole": "You are a security reviewer.", "prompt": "Do B."}
    ]));
    src["agentRole"] = json!("You are a senior engineer.");
    let c = compiled(&src);
    let steps = &c.snapshot.body.steps;
    assert_eq!(
        c.snapshot.body.agent_role.as_deref(),
        Some("You are a senior engineer.")
    );
    assert_eq!(
        steps[0].agent_role.as_deref(),
        Some("You are a senior engineer.")
    );
    assert_eq!(
        steps[0].prompt,
        "## Role\nYou are a senior engineer.\n\nDo A."
    );
    assert_eq!(
        steps[1].agent_role.as_deref(),
        Some("You are a security reviewer.")
    );
    assert!(
        steps[1]
            .prompt
            .starts_with("## Role\nYou are a security reviewer.\n\nDo B.")
    );
}

/// lock: L-COMPILE-TEMPLATE-IN-PLACE, L-AUTHOR-TEMPLATES, L-COMPILE-STEP-CONTENTS
#[test]
fn template_calls_expand_in_place_with_provenance_and_implied_contract() {
    let src = base(json!([
        {"id": "first", "title": "First", "prompt": "x"},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "lazy_on_first_use"}},
        {"id": "last", "title": "Last", "prompt": "y"}
    ]));
    let c = compiled(&src);
    assert_eq!(
        step_ids(&c),
        ["first", "capability_probe_web_browsing", "last"]
    );
    let probe = &c.snapshot.body.steps[1];
    assert_eq!(probe.provenance.source, StepSource::TemplateInjected);
    assert_eq!(
        probe.provenance.origin_id.as_deref(),
        Some("wr.templates.capability_probe")
    );
    assert_eq!(
        probe.output.as_ref().unwrap().contract_ref.as_deref(),
        Some("wr.contracts.capability_observation")
    );
    assert!(!probe.require_confirmation);
    assert!(
        probe
            .prompt
            .contains("If you already tried web browsing earlier in this run"),
        "{}",
        probe.prompt
    );
    assert!(
        probe.prompt.contains("Set `capability` to `web_browsing`"),
        "{}",
        probe.prompt
    );
    let contracts: Vec<&str> = c
        .snapshot
        .body
        .contracts
        .iter()
        .map(|c| c.contract_ref.as_str())
        .collect();
    assert_eq!(contracts, ["wr.contracts.capability_observation"]);
    assert_eq!(
        c.snapshot.body.steps[0].provenance.source,
        StepSource::Authored
    );
    assert_eq!(c.snapshot.body.steps[0].provenance.origin_id, None);
}

/// lock: L-CAP-PROBE-INJECTED, L-COMPILE-TEMPLATE-ANCHOR-ORDER, L-CAP-REQUIREMENTS
#[test]
fn required_capabilities_get_an_early_probe_and_a_warning() {
    let mut src = base(json!([{"id": "a", "title": "A", "prompt": "x"}]));
    src["capabilities"] = json!({"web_browsing": "required", "delegation": "required"});
    let c = compiled(&src);
    // Injected at the start, ordered by (templateId, capability) as the stable injection index.
    assert_eq!(
        step_ids(&c),
        [
            "capability_probe_delegation",
            "capability_probe_web_browsing",
            "a"
        ]
    );
    let warnings: Vec<_> = c
        .snapshot
        .body
        .compiled_warnings
        .iter()
        .map(|w| (w.code, w.pointer.as_deref()))
        .collect();
    assert_eq!(
        warnings,
        [
            (
                CompiledWarningCode::CapabilityProbeInjected,
                Some("/capabilities/delegation")
            ),
            (
                CompiledWarningCode::CapabilityProbeInjected,
                Some("/capabilities/web_browsing")
            ),
        ]
    );
    assert!(
        c.snapshot.body.steps[1]
            .prompt
            .contains("Fetch one small public page")
    );
    assert_eq!(
        c.snapshot.body.capabilities.get(&Capability::WebBrowsing),
        Some(&CapabilityRequirement::Required)
    );
}

/// lock: L-CAP-PROBE-INJECTED
#[test]
fn an_authored_probe_replaces_the_injected_one() {
    let mut src = base(json!([
        {"id": "a", "title": "A", "prompt": "x"},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "early_if_required"}}
    ]));
    src["capabilities"] = json!({"web_browsing": "required"});
    let c = compiled(&src);
    assert_eq!(step_ids(&c), ["a", "capability_probe_web_browsing"]);
    assert!(c.snapshot.body.compiled_warnings.is_empty());
}

/// lock: L-COMPILE-FEATURE-ORDER, L-AUTHOR-FEATURE-CONFIG, L-COMPILE-PHASES
#[test]
fn features_are_deduped_sorted_applied_in_order_with_explicit_defaults() {
    let mut src = base(
        json!([{"id": "a", "title": "A", "promptBlocks": {"goal": "g", "constraints": ["Authored first."]}}]),
    );
    src["capabilities"] = json!({"delegation": "preferred", "web_browsing": "disabled"});
    src["features"] = json!([
        "wr.features.output_contracts",
        "wr.features.mode_guidance",
        "wr.features.durable_recap_guidance",
        "wr.features.mode_guidance",
        {"id": "wr.features.capabilities"}
    ]);
    let c = compiled(&src);
    let features: Vec<(&str, &Value)> = c
        .snapshot
        .body
        .features
        .iter()
        .map(|f| (f.feature_id.as_str(), &f.config))
        .collect();
    assert_eq!(
        features,
        [
            (
                "wr.features.capabilities",
                &json!({"probeVisibility": "collapsed", "recordObservationsAs": "artifact"})
            ),
            ("wr.features.durable_recap_guidance", &json!({})),
            ("wr.features.mode_guidance", &json!({"detail": "brief"})),
            (
                "wr.features.output_contracts",
                &json!({"enforce": "block_in_blocking_modes_gap_in_never_stop"})
            ),
        ]
    );
    let blocks = c.snapshot.body.steps[0].prompt_blocks.as_ref().unwrap();
    // Authored constraints first, then the mode guidance. Capability guidance is shown with the
    // pending step at run time (decision D59), never written into step prompts.
    assert_eq!(blocks.constraints[0], "Authored first.");
    assert!(
        blocks.constraints[1].starts_with("Follow the selected autonomy mode"),
        "{}",
        blocks.constraints[1]
    );
    assert_eq!(blocks.constraints.len(), 2, "{:?}", blocks.constraints);
    assert!(blocks.output_required["notesMarkdown"].contains("fresh recap of this step only"));
}

/// lock: L-AUTHOR-PROMPTBLOCKS-RENDER
#[test]
fn features_inject_blocks_into_prompt_string_steps_without_overriding_authors() {
    let mut src = base(json!([
        {"id": "a", "title": "A", "prompt": "Do A."},
        {"id": "b", "title": "B", "promptBlocks": {"goal": "g", "outputRequired": {"notesMarkdown": "Mine."}}}
    ]));
    src["features"] = json!([{"id": "wr.features.mode_guidance", "config": {"detail": "full"}}, "wr.features.durable_recap_guidance"]);
    let c = compiled(&src);
    let a = &c.snapshot.body.steps[0];
    assert!(
        a.prompt
            .starts_with("Do A.\n\n## Constraints\n- In `guided` mode"),
        "{}",
        a.prompt
    );
    assert_eq!(a.prompt_blocks.as_ref().unwrap().constraints.len(), 3);
    assert_eq!(
        c.snapshot.body.steps[1]
            .prompt_blocks
            .as_ref()
            .unwrap()
            .output_required["notesMarkdown"],
        "Mine."
    );
}

/// lock: L-AUTHOR-REFS-EMBEDDED, L-AUTHOR-REFS-PROVENANCE, L-AUTHOR-REFS-COMPILE-TIME
#[test]
fn refs_are_embedded_with_hash_and_byte_provenance() {
    let src = base(json!([{"id": "a", "title": "A", "promptBlocks": {
        "goal": [{"kind": "text", "text": "Plan the commit protocol."}, {"kind": "ref", "refId": "wr.refs.v2_definition"}],
        "constraints": [[{"kind": "ref", "refId": "wr.refs.append_only_truth"}, {"kind": "text", "text": "No salvage scanning."}]],
        "verify": [[{"kind": "ref", "refId": "wr.refs.append_only_truth"}]]
    }}]));
    let c = compiled(&src);
    let step = &c.snapshot.body.steps[0];
    let v2 = refs::find("wr.refs.v2_definition").unwrap();
    let truth = refs::find("wr.refs.append_only_truth").unwrap();
    let blocks = step.prompt_blocks.as_ref().unwrap();
    assert_eq!(
        blocks.goal.as_deref(),
        Some(format!("Plan the commit protocol. {}", v2.text).as_str())
    );
    assert_eq!(
        blocks.constraints[0],
        format!("{} No salvage scanning.", truth.text)
    );
    let provenance: Vec<_> = step
        .injected_refs
        .iter()
        .map(|r| (r.ref_id.as_str(), r.ref_content_hash.clone(), r.bytes))
        .collect();
    assert_eq!(
        provenance,
        [
            (
                "wr.refs.append_only_truth",
                sha256(truth.text.as_bytes()),
                truth.text.len() as u64
            ),
            (
                "wr.refs.v2_definition",
                sha256(v2.text.as_bytes()),
                v2.text.len() as u64
            ),
        ]
    );
}

/// lock: L-COMPILE-CONTRACTS-SORTED, L-AUTHOR-CONTRACT-PINNED, L-HASH-EMBEDDED-TYPED
#[test]
fn contracts_are_resolved_deduped_and_sorted_with_typed_schemas() {
    let src = base(json!([
        {"id": "a", "title": "A", "prompt": "x", "output": {"contractRef": "wr.contracts.workflow_divergence"}},
        {"id": "b", "title": "B", "prompt": "y", "output": {"contractRef": "wr.contracts.verification_report"}},
        {"id": "c", "title": "C", "prompt": "z", "output": {"contractRef": "wr.contracts.workflow_divergence"}}
    ]));
    let c = compiled(&src);
    let contracts = &c.snapshot.body.contracts;
    let refs: Vec<&str> = contracts.iter().map(|c| c.contract_ref.as_str()).collect();
    assert_eq!(
        refs,
        [
            "wr.contracts.verification_report",
            "wr.contracts.workflow_divergence"
        ]
    );
    assert!(
        contracts[0].schema.is_object(),
        "schemas are typed JSON, not strings"
    );
    assert_eq!(contracts[0].artifact_kind, "wr.verification_report");
    assert_eq!(contracts[1].example["kind"], "workflow_divergence");
    assert!(
        c.snapshot.body.steps[1]
            .prompt
            .contains("Add one `wr.verification_report` artifact")
    );
}

/// lock: L-HASH-EMBEDDED-NORMALIZED
#[test]
fn order_free_schema_lists_are_normalized() {
    let mut schema = json!({"required": ["b", "a", "a"], "properties": {"x": {"enum": ["z", "y"]}}, "items": [{"required": ["d", "c"]}]});
    normalize_schema(&mut schema);
    assert_eq!(
        schema,
        json!({"required": ["a", "b"], "properties": {"x": {"enum": ["y", "z"]}}, "items": [{"required": ["c", "d"]}]})
    );
}

/// lock: L-COMPILE-CONDITIONS-SORTED, L-COMPILE-LOOPS-SORTED, L-LOOP-BODY-INDEX
#[test]
fn conditions_and_loops_are_sorted_and_bodies_keep_authored_order() {
    let mut src = base(json!([
        {"type": "loop", "loopId": "zeta", "while": {"kind": "condition_ref", "conditionId": "yes"}, "maxIterations": 2, "body": [
            {"id": "z2", "title": "Z2", "prompt": "x"},
            {"id": "z1", "title": "Z1", "prompt": "x"},
            {"type": "loop", "loopId": "alpha", "while": {"kind": "condition_ref", "conditionId": "no"}, "maxIterations": 1, "body": [{"id": "a1", "title": "A1", "prompt": "x"}]}
        ]},
        {"id": "end", "title": "End", "prompt": "x"}
    ]));
    src["conditions"] =
        json!([{"id": "yes", "kind": "always_true"}, {"id": "no", "kind": "always_false"}]);
    let c = compiled(&src);
    let body = &c.snapshot.body;
    let conditions: Vec<&str> = body
        .conditions
        .iter()
        .map(|c| c.condition_id().as_str())
        .collect();
    assert_eq!(conditions, ["no", "yes"]);
    let loops: Vec<&str> = body.loops.iter().map(|l| l.loop_id.as_str()).collect();
    assert_eq!(loops, ["alpha", "zeta"]);
    let zeta = &body.loops[1].body;
    assert_eq!(
        zeta,
        &vec![
            SequenceItem::Step {
                step_id: "z2".parse().unwrap()
            },
            SequenceItem::Step {
                step_id: "z1".parse().unwrap()
            },
            SequenceItem::Loop {
                loop_id: "alpha".parse().unwrap()
            },
        ]
    );
    assert_eq!(
        body.sequence,
        vec![
            SequenceItem::Loop {
                loop_id: "zeta".parse().unwrap()
            },
            SequenceItem::Step {
                step_id: "end".parse().unwrap()
            }
        ]
    );
    assert_eq!(step_ids(&c), ["z2", "z1", "a1", "end"]);
}

/// lock: L-NS-LEGACY-RUNNABLE, L-NS-LEGACY-WARNING
#[test]
fn legacy_ids_compile_with_a_structured_warning() {
    let mut src = base(json!([{"id": "a", "title": "A", "prompt": "x"}]));
    src["id"] = json!("Bug-Investigation");
    src["conditions"] = json!([{"id": "unused", "kind": "always_true"}]);
    let c = compiled(&src);
    let w = &c.snapshot.body.compiled_warnings;
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].code, CompiledWarningCode::LegacyWorkflowId);
    assert_eq!(w[0].pointer.as_deref(), Some("/id"));
    assert!(
        w[0].message.contains("`user.bug_investigation`"),
        "{}",
        w[0].message
    );
    assert_eq!(w[1].code, CompiledWarningCode::UnusedCondition);
    assert_eq!(w[1].pointer.as_deref(), Some("/conditions/0"));
}

/// lock: L-HASH-WORKFLOW, L-HASH-SINGLE-JCS, L-COMPILE-SNAPSHOT-CONTENTS, L-HASH-SNAPSHOT-VERSIONED
#[test]
fn the_hash_is_sha256_of_the_jcs_of_the_versioned_snapshot() {
    let mut src = base(json!([{"id": "a", "title": "A", "prompt": "x"}]));
    src["recommendations"] = json!({"recommendedAutonomy": "guided"});
    let c = compiled(&src);
    let value = c.snapshot.to_value().unwrap();
    assert_eq!(value["schemaVersion"], 1);
    assert_eq!(
        value["recommendations"],
        json!({"recommendedAutonomy": "guided"})
    );
    for key in [
        "workflowId",
        "name",
        "description",
        "capabilities",
        "features",
        "contracts",
        "steps",
        "sequence",
        "conditions",
        "loops",
        "compiledWarnings",
    ] {
        assert!(value.get(key).is_some(), "missing {key}");
    }
    assert_eq!(
        c.workflow_hash.digest(),
        &sha256(&to_canonical_bytes(&value).unwrap())
    );
    let back = CompiledWorkflowSnapshotV1::from_value(value).unwrap();
    assert_eq!(back, c.snapshot);
    assert_eq!(back.workflow_hash().unwrap(), c.workflow_hash);
}

/// lock: L-COMPILE-PURE
#[test]
fn compiling_twice_gives_the_same_snapshot() {
    let src = base(
        json!([{"id": "a", "title": "A", "promptBlocks": {"goal": [{"kind": "ref", "refId": "wr.refs.jcs_hashing"}]}}]),
    );
    assert_eq!(compiled(&src), compiled(&src));
}

/// lock: L-LOOP-CONTROL-ARTIFACT
#[test]
fn a_decision_step_is_told_its_loop_id_and_shown_a_valid_example() {
    let mut src = base(
        json!([{"type": "loop", "loopId": "review_pass", "while": {"kind": "condition_ref", "conditionId": "go"}, "maxIterations": 3, "body": [
            {"id": "work", "title": "Work", "prompt": "x"},
            {"id": "decide", "title": "Decide", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
        ]}]),
    );
    src["conditions"] = json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}]);
    src["features"] = json!(["wr.features.output_contracts"]);
    let c = compiled(&src);
    let decide = &c.snapshot.body.steps[1];
    let artifacts = &decide.prompt_blocks.as_ref().unwrap().output_required["artifacts"];
    assert!(
        artifacts.contains("Set `loopId` to `review_pass`"),
        "{artifacts}"
    );
    assert!(
        artifacts.contains("\"loopId\":\"review_pass\""),
        "{artifacts}"
    );
    assert!(
        artifacts.contains("`full_auto_never_stop` records a critical gap"),
        "{artifacts}"
    );
}

/// lock: L-AUTHOR-TOP-LEVEL, L-AUTHOR-STEP-KINDS, L-AUTHOR-OUTPUT-OBJECT, L-AUTHOR-FEATURES
#[test]
fn the_authoring_reference_example_compiles_as_written() {
    let src = json!({
      "id": "project.bug_investigation_v2",
      "name": "Bug Investigation (v2)",
      "description": "Deterministic, rewind-safe bug investigation with mode-aware ambiguity handling.",
      "agentRole": "You are a senior engineer. Be explicit about assumptions and verification. Follow workflow instructions as the user's process.",
      "capabilities": {"delegation": "preferred", "web_browsing": "preferred"},
      "features": [
        "wr.features.mode_guidance",
        {"id": "wr.features.capabilities", "config": {"probeVisibility": "collapsed", "recordObservationsAs": "artifact"}}
      ],
      "steps": [
        {"id": "triage", "title": "Triage and focus", "promptBlocks": {
          "goal": "Classify scope/risks and choose focus areas for the investigation.",
          "constraints": ["Follow the selected mode (guided vs full-auto).", "If delegation is unavailable, do sequential passes.", "Record a durable recap at the end."],
          "procedure": ["Summarize the bug in 3 bullets.", "List top 3 hypotheses.", "Choose 2–4 investigation focus areas."],
          "outputRequired": {"notesMarkdown": "≤10 lines: scope, hypotheses, focus areas, and what's next."},
          "verify": ["Hypotheses are testable and mutually distinguishable."]
        }},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "delegation", "when": "lazy_on_first_use"}},
        {"id": "investigate", "title": "Run investigation passes", "promptBlocks": {
          "goal": "Test hypotheses via evidence gathering.",
          "constraints": ["If delegation is available: run parallel passes; otherwise do sequential passes.", "If you intentionally deviate (skip a hypothesis), record a divergence marker."],
          "procedure": ["For each hypothesis: gather minimal evidence to confirm or falsify.", "Record observations durably."],
          "outputRequired": {"notesMarkdown": "Key observations + updated confidence per hypothesis."}
        }, "output": {"hints": {"divergence": "Report if you skip hypotheses or deviate from procedure."}}},
        {"id": "finalize", "title": "Finalize root cause", "promptBlocks": {
          "goal": "Provide final root cause and recommendations.",
          "procedure": ["State the most likely root cause with confidence level.", "Propose 2–3 preventative recommendations."],
          "outputRequired": {"notesMarkdown": "Root cause + recommendations."},
          "verify": ["Root cause is grounded in observed evidence."]
        }}
      ]
    });
    let c = compiled(&src);
    assert_eq!(
        step_ids(&c),
        [
            "triage",
            "capability_probe_delegation",
            "investigate",
            "finalize"
        ]
    );
    let investigate = &c.snapshot.body.steps[2];
    assert_eq!(
        investigate.output.as_ref().unwrap().hints["divergence"],
        "Report if you skip hypotheses or deviate from procedure."
    );
    assert!(
        investigate
            .prompt
            .contains("- hint (divergence): Report if you skip hypotheses")
    );
    assert!(c.snapshot.body.compiled_warnings.is_empty());
}

/// lock: L-GAP-NON-ASSUMABLE-CHOICE
#[test]
fn non_assumable_choices_compile_sorted_into_the_step_and_its_prompt() {
    let marked = compiled(&base(json!([
        {"id": "ship", "title": "Ship", "prompt": "Ship it.", "nonAssumableChoices": ["scope_boundary", "irreversible_action", "scope_boundary"]},
        {"id": "plain", "title": "Plain", "prompt": "Nothing to decide."}
    ])));
    let ship = &marked.snapshot.body.steps[0];
    let kinds: Vec<&str> = ship
        .non_assumable_choices
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(kinds, ["irreversible_action", "scope_boundary"]);
    assert!(
        ship.prompt
            .contains("(`irreversible_action`, `scope_boundary`): never assume them")
            && ship.prompt.contains("`needs_user_choice`"),
        "{}",
        ship.prompt
    );
    // A step without choices carries no field, so workflows that never mark one keep their hash.
    let plain = serde_json::to_value(&marked.snapshot.body.steps[1]).unwrap();
    assert!(plain.get("nonAssumableChoices").is_none(), "{plain}");
    assert!(!marked.snapshot.body.steps[1].prompt.contains("user_only"));
    // The marking is behaviour, so it is hashed.
    let unmarked = compiled(&base(json!([
        {"id": "ship", "title": "Ship", "prompt": "Ship it."},
        {"id": "plain", "title": "Plain", "prompt": "Nothing to decide."}
    ])));
    assert_ne!(marked.workflow_hash, unmarked.workflow_hash);
}

/// lock: L-CAP-REQUIREMENTS
#[test]
fn capability_requirements_are_hashed_and_stay_out_of_step_prompts() {
    let mut src = base(json!([
        {"id": "a", "title": "A", "prompt": "Do A."},
        {"id": "b", "title": "B", "prompt": "Do B."}
    ]));
    src["capabilities"] = json!({"delegation": "preferred"});
    src["features"] = json!(["wr.features.capabilities"]);
    let c = compiled(&src);
    // The guidance is shown with the pending step by the server (decision D59), from the
    // hashed requirements; no step prompt repeats it.
    for step in &c.snapshot.body.steps {
        assert!(
            !step.prompt.contains("wr.capability_observation")
                && !step.prompt.contains("Delegation"),
            "{}: {}",
            step.step_id,
            step.prompt
        );
    }
    assert!(
        c.snapshot
            .body
            .features
            .iter()
            .any(|f| f.feature_id == "wr.features.capabilities")
    );
    src["capabilities"] = json!({"delegation": "disabled"});
    let disabled = compiled(&src);
    assert_ne!(disabled.workflow_hash, c.workflow_hash);
    assert_eq!(
        serde_json::to_value(&disabled.snapshot.body.capabilities).unwrap(),
        json!({"delegation": "disabled"})
    );
}

/// Steps a workflow did not author are injected at one deterministic anchor: no feature injects
/// steps (every feature only appends to existing steps' blocks, so `feature_injected` never
/// occurs), and the steps injected for `required` capabilities open the workflow ordered by
/// `(originId, insertionIndex)`, the index being the capability's stable order, whatever the
/// order of `capabilities` keys or `features` entries in the source.
///
/// lock: L-COMPILE-FEATURE-STEP-ORDER
#[test]
fn injected_steps_sit_at_a_deterministic_anchor_in_a_stable_order() {
    let features = [
        "wr.features.capabilities",
        "wr.features.durable_recap_guidance",
        "wr.features.mode_guidance",
        "wr.features.output_contracts",
    ];
    let source = |caps: Value, features: Vec<&str>| {
        json!({
            "id": "project.anchors",
            "name": "Anchors",
            "description": "Injected steps at one anchor.",
            "capabilities": caps,
            "features": features,
            "steps": [
                {"id": "first", "title": "First", "prompt": "Do the first thing."},
                {"id": "second", "title": "Second", "prompt": "Do the second thing."}
            ]
        })
    };
    let a = compiled(&source(
        json!({"web_browsing": "required", "delegation": "required"}),
        features.to_vec(),
    ));
    let b = compiled(&source(
        json!({"delegation": "required", "web_browsing": "required"}),
        features.iter().rev().copied().collect(),
    ));
    assert_eq!(a.workflow_hash, b.workflow_hash);
    let steps = &a.snapshot.body.steps;
    assert!(
        steps
            .iter()
            .all(|s| s.provenance.source != StepSource::FeatureInjected),
        "features append to steps, never add any"
    );
    let injected: Vec<(&str, Option<&str>)> = steps
        .iter()
        .take_while(|s| s.provenance.source == StepSource::TemplateInjected)
        .map(|s| (s.step_id.as_str(), s.provenance.origin_id.as_deref()))
        .collect();
    let mut expected: Vec<Capability> = vec![Capability::WebBrowsing, Capability::Delegation];
    expected.sort();
    assert_eq!(injected.len(), expected.len());
    for ((step, origin), capability) in injected.iter().zip(&expected) {
        assert_eq!(*origin, Some("wr.templates.capability_probe"));
        assert!(
            step.contains(capability.as_str()),
            "{step} for {capability:?}"
        );
    }
    // The authored steps follow, in authored order.
    let authored: Vec<&str> = steps[injected.len()..]
        .iter()
        .map(|s| s.step_id.as_str())
        .collect();
    assert_eq!(authored, ["first", "second"]);
}
