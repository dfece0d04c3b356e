//! The model against production over generated workflows in the WorkRail 3.x workflow language
//! (`workrail_harness::language`, decision D139): `runCondition` with every operator on steps and
//! loops, the four loop kinds, `validationCriteria`, `{{key}}` markers, the three
//! `requireConfirmation` forms (the response's `requireConfirmation` is compared with the
//! model's), skips compared with the decision trace, driven by generated
//! command sequences whose acks carry context deltas, with every observable compared after every
//! command (pending steps with their frozen bindings, blockers, gaps, the DAG).
//!
//! Guards against an engine whose reading of the language drifts from the model's: a condition
//! read from the context before the call's delta, a loop that runs one iteration too many or too
//! few, a skip that leaves a step pending, bindings that follow later context changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Map, Value};
use workrail_harness::generated::{GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};
use workrail_harness::{language, ops};
use workrail_spec::compiled::{LoopWhile, ValidationCriterion};

fn under_test(json: &str, context: Map<String, Value>) -> Arc<WorkflowUnderTest> {
    Arc::new(
        WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, json)
            .unwrap_or_else(|e| panic!("a generated workflow must compile: {e}\n{json}"))
            .with_start_context(context),
    )
}

proptest! {
    #![proptest_config(ops::config(2))]

    /// decision: D139, D154
    #[test]
    fn production_matches_the_model_on_workflows_in_the_language(
        (json, context) in language::workflow(),
        ops in ops::language_ops_strategy(24),
        seed in any::<u64>(),
    ) {
        language::check_language_case(&json, &context, &ops, seed).map_err(TestCaseError::fail)?;
    }
}

/// The generator reaches what it promises: run conditions on steps and loops, every loop kind,
/// every validation composition, steps that read context, and the three confirmation forms,
/// over a couple of hundred workflows.
#[test]
fn the_language_generator_reaches_every_construct() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut loop_kinds = [false; 5];
    let (mut step_when, mut loop_when, mut reads) = (false, false, false);
    let mut rules = [false; 8];
    // Confirmation: always, on a condition, and with a kind.
    let mut confirms = [false; 3];
    for _ in 0..200 {
        let (json, context) = language::workflow()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let w = under_test(&json, context);
        let body = &w.compiled.body;
        for l in &body.loops {
            loop_when |= l.run_condition.is_some();
            let k = match l.while_ {
                LoopWhile::ContextWhile { .. } => 0,
                LoopWhile::ContextUntil { .. } => 1,
                LoopWhile::Count { .. } => 2,
                LoopWhile::CountVar { .. } => 3,
                LoopWhile::ForEach { .. } => 4,
                LoopWhile::ConditionRef { .. } => continue,
            };
            loop_kinds[k] = true;
        }
        for s in &body.steps {
            if s.require_confirmation {
                confirms[usize::from(s.language.confirm_when.is_some())] = true;
                confirms[2] |= s
                    .language
                    .confirmation_kind
                    .is_some_and(|k| k != workrail_spec::compiled::ConfirmationKind::User);
            }
            step_when |= s.language.run_condition.is_some();
            reads |= !s.language.context_reads.is_empty();
            let mut stack: Vec<&ValidationCriterion> = s.language.validation.iter().collect();
            while let Some(c) = stack.pop() {
                let k = match c {
                    ValidationCriterion::Contains { .. } => 0,
                    ValidationCriterion::Regex { .. } => 1,
                    ValidationCriterion::Length { .. } => 2,
                    ValidationCriterion::Schema { .. } => 7,
                    ValidationCriterion::All { all } => {
                        stack.extend(all);
                        3
                    }
                    ValidationCriterion::Any { any } => {
                        stack.extend(any);
                        4
                    }
                    ValidationCriterion::Not { criterion } => {
                        stack.push(criterion);
                        5
                    }
                };
                rules[k] = true;
            }
            rules[6] |= matches!(&s.language.validation,
                Some(ValidationCriterion::All { all }) if all.iter().any(|c| matches!(c,
                    ValidationCriterion::Contains { when: Some(_), .. })));
        }
    }
    assert_eq!(loop_kinds, [true; 5], "a loop kind never occurs");
    assert!(step_when && loop_when && reads);
    assert_eq!(rules, [true; 8], "a validation rule kind never occurs");
    assert_eq!(confirms, [true; 3], "a confirmation form never occurs");
}
