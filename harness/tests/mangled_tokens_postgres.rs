//! Mangled tokens on PostgreSQL (issue 19, item 4): the mutations of `mangled_tokens.rs`
//! (`workrail_harness::mangle`) in every token field of every call, against a `Workrail` on a
//! schema of its own. The clean calls run first (the ack and the checkpoint commit once), so a
//! tolerated mangled call is a replay and must answer byte-identically to the clean call, and
//! every call, tolerated or refused, must leave every table's fingerprint unchanged (row counts
//! and an md5 of each table's rows). A refusal is a `TOKEN_*` (or validation) envelope, not
//! retryable as is, naming the field and the specific problem; a single harmless edit is always
//! tolerated.
//!
//! Guards against: a mangled token that writes a row, a replay on PostgreSQL that answers from
//! anything but the recorded facts, and vague refusals.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the test
//! says why and passes, except under `CI`, where it fails. `WORKRAIL_PROPTEST_CASES` cases
//! (64 at CI counts, about a second).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use workrail::protocol::Workrail;
use workrail::store::memfs::MemFs;
use workrail_harness::fixture;
use workrail_harness::mangle::{Field, Template, Tokens, harmless, mutation_strategy, problem};
use workrail_harness::multirun::{Agent, agent_output};
use workrail_harness::ops;
use workrail_harness::postgres::{Schema, Sql, open_workrail_on, postgres_url};
use workrail_harness::system::Reply;
use workrail_spec::error::{ErrorCode, Retry};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, StartWorkflowInput,
};

fn start(wr: &Workrail, workflow: &str) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        preset: None,
        workflow_id: workflow.into(),
        context: None,
        preferences: vec![],
    })
    .unwrap()
}

/// The call `template` makes with `tokens` (the same output every time).
fn call(wr: &Workrail, template: Template, tokens: &Tokens) -> Reply {
    let output = agent_output(Some("implement"), Agent::Good, 1);
    match template {
        Template::Checkpoint => wr.checkpoint_workflow(CheckpointWorkflowInput {
            state_token: tokens.state.clone().unwrap_or_default(),
            checkpoint_token: tokens.checkpoint.clone().unwrap_or_default(),
            output,
        }),
        Template::Rehydrate => wr.continue_workflow(ContinueWorkflowInput {
            preset: None,
            state_token: tokens.state.clone(),
            ack_token: tokens.ack.clone(),
            context: None,
            output: None,
            preferences: vec![],
        }),
        Template::Advance | Template::AckAlone => wr.continue_workflow(ContinueWorkflowInput {
            preset: None,
            state_token: tokens.state.clone(),
            ack_token: tokens.ack.clone(),
            context: None,
            output: Some(output),
            preferences: vec![],
        }),
    }
}

#[test]
fn mangled_tokens_on_postgres_are_tolerated_as_replays_or_refused_without_a_write() {
    let Some(url) = postgres_url(
        "mangled_tokens_on_postgres_are_tolerated_as_replays_or_refused_without_a_write",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "mangle");
    let sql = Sql::connect(&url);
    let wr = open_workrail_on(&schema, &MemFs::new(), 42, fixture::multi_catalog()).unwrap();
    // Run A advanced past its root (its tokens name a non-root node), and run B of another
    // workflow, whose tokens are the "other run" a mutation may paste in.
    let a0 = start(&wr, fixture::WORKFLOW_ID);
    let a = wr
        .continue_workflow(ContinueWorkflowInput {
            preset: None,
            state_token: Some(a0.state_token.clone()),
            ack_token: a0.ack_token.clone(),
            context: None,
            output: Some(agent_output(Some("plan"), Agent::Good, 0)),
            preferences: vec![],
        })
        .unwrap();
    let b = start(&wr, fixture::LINEAR_ID);
    // The first clean pass commits the ack and the checkpoint; the second records what every
    // call answers from then on (a rehydrate's recap names the branches those made).
    for template in Template::ALL {
        call(&wr, template, &Tokens::of(template, &a))
            .unwrap_or_else(|e| panic!("the clean {template:?} call fails: {e:?}"));
    }
    let mut clean: HashMap<Template, String> = HashMap::new();
    for template in Template::ALL {
        let out = call(&wr, template, &Tokens::of(template, &a))
            .unwrap_or_else(|e| panic!("the clean {template:?} call fails: {e:?}"));
        clean.insert(template, serde_json::to_string(&out).unwrap());
    }
    let before = schema.fingerprint(&sql);
    for template in Template::ALL {
        let again = call(&wr, template, &Tokens::of(template, &a)).unwrap();
        assert_eq!(serde_json::to_string(&again).unwrap(), clean[&template]);
    }
    assert_eq!(schema.fingerprint(&sql), before, "a clean replay wrote");

    let mut runner = TestRunner::new(ops::config(1));
    let strategy = (
        0usize..4,
        0usize..2,
        prop::collection::vec(mutation_strategy(), 1..4),
    );
    let tolerated = std::cell::Cell::new(0u32);
    let refused = std::cell::Cell::new(0u32);
    let result = runner.run(&strategy, |(template, field, mutations)| {
        let template = Template::ALL[template];
        let fields = template.fields();
        let field: Field = fields[field % fields.len()];
        let good = Tokens::of(template, &a);
        let mut value = good.get(field).to_owned();
        for m in &mutations {
            value = m.apply(&value, &b.state_token);
        }
        let mut mangled = good.clone();
        mangled.set(field, value.clone());
        let case = format!("{template:?} {} {mutations:?} -> {value:?}", field.name());
        let reply = call(&wr, template, &mangled);
        if schema.fingerprint(&sql) != before {
            return Err(TestCaseError::fail(format!("{case}: wrote to the schema")));
        }
        match reply {
            Ok(out) => {
                let text = serde_json::to_string(&out).unwrap();
                if text != clean[&template] {
                    return Err(TestCaseError::fail(format!(
                        "{case}: accepted, but answered differently from the clean call"
                    )));
                }
                tolerated.set(tolerated.get() + 1);
            }
            Err(e) => {
                let precise = (e.code.to_string().starts_with("TOKEN_")
                    || e.code == ErrorCode::ValidationError)
                    && e.retry == Retry::NotRetryable
                    && e.message.contains(&format!("`{}`", field.name()))
                    && !problem(&e).is_empty();
                if !precise {
                    return Err(TestCaseError::fail(format!(
                        "{case}: not a precise refusal: {e:?}"
                    )));
                }
                if mutations.len() == 1 && harmless(mutations[0]) {
                    return Err(TestCaseError::fail(format!(
                        "{case}: a harmless edit was refused: {e:?}"
                    )));
                }
                refused.set(refused.get() + 1);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (tolerated, refused) = (tolerated.get(), refused.get());
    assert!(
        tolerated > 0 && refused > 0,
        "tolerated {tolerated}, refused {refused}: the mutations missed a verdict"
    );
}
