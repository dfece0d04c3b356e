//! `resume_session` against the model: generated stores (several sessions, each started in a
//! generated git workspace or none, with acks carrying notes, forks, checkpoints and rehydrates,
//! some sessions then corrupted) are ranked by production (`Workrail::resume_session`) and by
//! `workrail_model::projections::resume_ranking` over the same committed events, for generated
//! queries (text from the notes vocabulary and the workflow id and name, branch prefixes, head
//! commits). Both must return the same candidates in the same order: session, run, tip node,
//! workflow, last activity, `whyMatched` and snippet; production must count exactly the
//! sessions the model leaves out as unhealthy.
//!
//! Guards against: production ranking drifting from the locks as the model encodes them (tier
//! order, branch prefix side, tie-breaks, normalization, corpus, snippet budget, healthy-only,
//! tip-only).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use workrail::store::memfs::MemFs;
use workrail::store::{StoreError, layout};
use workrail::workspace::{FixedWorkspace, GitIdentity};
use workrail_harness::fixture::{self, ArtifactSpec};
use workrail_harness::ops;
use workrail_harness::system::open_workrail;
use workrail_model::projections::{ResumeQuery, SessionCandidate, resume_ranking};
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::{SessionId, WorkflowHash};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, OutputInput, ResumeQueryInput,
    ResumeSessionInput, StartWorkflowInput,
};

const WORDS: [&str; 10] = [
    "zebracorn",
    "billing",
    "login",
    "refactor",
    "auth-tokens",
    "bug_fix",
    "deploy",
    "cache",
    "review",
    "harness",
];
/// Query words: the notes vocabulary plus the workflow id and name tokens, a variant spelling,
/// a prefix that is not a token, a word nobody uses and the truncation marker's word.
const QUERY_WORDS: [&str; 16] = [
    "zebracorn",
    "billing",
    "login",
    "refactor",
    "auth-tokens",
    "bug_fix",
    "deploy",
    "cache",
    "review",
    "harness",
    "project",
    "ZEBRACORN",
    "zebra",
    "nothing",
    "ｄｅｐｌｏｙ",
    "truncated",
];
const BRANCHES: [&str; 5] = [
    "main",
    "feature/auth",
    "feature/auth-tokens",
    "fix/billing",
    "release/1.2",
];
const SHAS: [&str; 3] = [
    "4f3c2a1b0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a",
    "0123456789abcdef0123456789abcdef01234567",
    "fedcba9876543210fedcba9876543210fedcba98",
];

#[derive(Debug, Clone)]
enum Notes {
    Words(Vec<usize>),
    /// Uppercased, with the first word in fullwidth letters (NFKC folds it back).
    Styled(Vec<usize>),
    /// One word repeated: over the snippet budget, or over the 4096-byte notes budget.
    Long(usize, usize),
}

impl Notes {
    fn text(&self) -> String {
        match self {
            Notes::Words(ws) => ws.iter().map(|w| WORDS[*w]).collect::<Vec<_>>().join(" "),
            Notes::Styled(ws) => ws
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let upper = WORDS[*w].to_uppercase();
                    if i == 0 {
                        upper
                            .chars()
                            .map(|c| match c {
                                'A'..='Z' => char::from_u32(c as u32 + 0xFEE0).unwrap_or(c),
                                other => other,
                            })
                            .collect()
                    } else {
                        upper
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
            Notes::Long(w, times) => vec![WORDS[*w]; *times].join(" "),
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Acknowledge the current step; `contract` sends the artifact its contract asks for.
    Ack {
        notes: Option<Notes>,
        contract: bool,
    },
    /// Rehydrate an earlier response (the next ack forks from there).
    Fork {
        back: usize,
    },
    Checkpoint {
        notes: Notes,
    },
    Rehydrate,
}

#[derive(Debug, Clone)]
struct SessionSpec {
    /// `(branch, head)`: `None` outside a repository; a `None` branch is a detached HEAD.
    workspace: Option<(Option<usize>, usize)>,
    steps: Vec<Step>,
    corrupt: bool,
}

#[derive(Debug, Clone)]
struct QuerySpec {
    text: Option<Vec<usize>>,
    /// A branch and how many of its bytes to send (a prefix; 0 sends an empty string).
    branch: Option<(usize, usize)>,
    sha: Option<usize>,
}

fn notes() -> impl Strategy<Value = Notes> {
    let words = prop::collection::vec(0..WORDS.len(), 1..4);
    prop_oneof![
        4 => words.clone().prop_map(Notes::Words),
        1 => words.prop_map(Notes::Styled),
        1 => (0..WORDS.len(), prop_oneof![Just(150usize), Just(600usize)])
            .prop_map(|(w, n)| Notes::Long(w, n)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop::option::weighted(0.8, notes()), prop::bool::weighted(0.8))
            .prop_map(|(notes, contract)| Step::Ack { notes, contract }),
        2 => (0usize..6).prop_map(|back| Step::Fork { back }),
        1 => notes().prop_map(|notes| Step::Checkpoint { notes }),
        1 => Just(Step::Rehydrate),
    ]
}

fn session_spec() -> impl Strategy<Value = SessionSpec> {
    (
        prop::option::weighted(
            0.75,
            (
                prop::option::weighted(0.85, 0..BRANCHES.len()),
                0..SHAS.len(),
            ),
        ),
        prop::collection::vec(step(), 0..7),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(workspace, steps, corrupt)| SessionSpec {
            workspace,
            steps,
            corrupt,
        })
}

fn query_spec() -> impl Strategy<Value = QuerySpec> {
    (
        prop::option::weighted(0.7, prop::collection::vec(0..QUERY_WORDS.len(), 0..3)),
        prop::option::weighted(0.4, (0..BRANCHES.len(), 0usize..20)),
        prop::option::weighted(0.3, 0..SHAS.len()),
    )
        .prop_map(|(text, branch, sha)| QuerySpec { text, branch, sha })
}

impl QuerySpec {
    fn model(&self) -> ResumeQuery {
        ResumeQuery {
            text: self.text.as_ref().map(|ws| {
                ws.iter()
                    .map(|w| QUERY_WORDS[*w])
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            git_branch: self.branch.map(|(b, cut)| {
                let name = BRANCHES[b];
                name[..cut.min(name.len())].to_owned()
            }),
            git_head_sha: self.sha.map(|s| SHAS[s].to_owned()),
        }
    }

    fn production(&self) -> ResumeSessionInput {
        let q = self.model();
        ResumeSessionInput {
            query: Some(ResumeQueryInput {
                text: q.text,
                git_head_sha: q.git_head_sha,
                git_branch: q.git_branch,
            }),
        }
    }
}

fn output(notes: Option<&Notes>, artifacts: Vec<ArtifactSpec>) -> Option<OutputInput> {
    if notes.is_none() && artifacts.is_empty() {
        return None;
    }
    Some(OutputInput {
        notes_markdown: notes.map(Notes::text),
        artifacts: artifacts.iter().map(|a| a.to_json()).collect(),
    })
}

fn rehydrate(state_token: &str) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        preset: None,
        state_token: Some(state_token.to_owned()),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
    }
}

/// Builds one session in a process observing its workspace; every call must succeed.
fn build(fs: &MemFs, seed: u64, index: usize, spec: &SessionSpec) -> SessionId {
    let identity = spec.workspace.map(|(branch, sha)| GitIdentity {
        repo_root: PathBuf::from(format!("/repos/{}", sha)),
        branch: branch.map(|b| BRANCHES[b].to_owned()),
        head_sha: Some(SHAS[sha].to_owned()),
    });
    let wr = open_workrail(fs, seed.wrapping_mul(1000).wrapping_add(index as u64))
        .unwrap()
        .with_workspace(Arc::new(FixedWorkspace(identity)));
    let first = wr
        .start_workflow(StartWorkflowInput {
            preset: None,
            workflow_id: fixture::WORKFLOW_ID.into(),
            context: None,
            preferences: vec![],
        })
        .unwrap();
    let session = first.session.session_id.clone();
    let mut responses: Vec<ExecutionOutput> = vec![first];
    for step in &spec.steps {
        let current = responses.last().cloned().unwrap();
        let next = match step {
            Step::Ack { notes, contract } => {
                let Some(ack) = current.ack_token.clone() else {
                    continue;
                };
                let pending = current.pending.as_ref().map(|p| p.step_id.as_str());
                let artifacts = match (pending, contract) {
                    (Some("decide"), true) => vec![ArtifactSpec::LoopStop],
                    (Some("verify"), true) => vec![ArtifactSpec::Verification],
                    _ => vec![],
                };
                wr.continue_workflow(ContinueWorkflowInput {
                    preset: None,
                    state_token: Some(current.state_token.clone()),
                    ack_token: Some(ack),
                    context: None,
                    output: output(notes.as_ref(), artifacts),
                    preferences: vec![],
                })
            }
            Step::Fork { back } => {
                let from = &responses[responses.len() - 1 - back % responses.len()];
                wr.continue_workflow(rehydrate(&from.state_token))
            }
            Step::Checkpoint { notes } => {
                let Some(token) = current.checkpoint_token.clone() else {
                    continue;
                };
                wr.checkpoint_workflow(CheckpointWorkflowInput {
                    state_token: current.state_token.clone(),
                    checkpoint_token: token,
                    output: output(Some(notes), vec![]).unwrap_or_default(),
                })
            }
            Step::Rehydrate => wr.continue_workflow(rehydrate(&current.state_token)),
        };
        responses.push(next.unwrap_or_else(|e| panic!("{step:?} failed: {e:?}")));
    }
    session
}

/// Flips a byte in the middle of the session's last committed segment.
fn corrupt(fs: &MemFs, session: &SessionId) {
    use workrail::store::fs::StoreFs;
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

fn check(seed: u64, specs: &[SessionSpec], queries: &[QuerySpec]) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    let mut built = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        built.push(build(&fs, seed, i, spec));
    }
    for (spec, session) in specs.iter().zip(&built) {
        if spec.corrupt {
            corrupt(&fs, session);
        }
    }
    // A fresh process: every session is validated from its bytes.
    let wr = open_workrail(&fs, seed.wrapping_add(7)).unwrap();
    let mut loaded: Vec<(
        SessionId,
        workrail_spec::closed::SessionHealthKind,
        Vec<SessionEvent>,
    )> = Vec::new();
    for id in wr.sessions().list_sessions().unwrap() {
        match wr.sessions().load(&id) {
            Ok(l) => loaded.push((id, l.health.kind(), l.events().all().unwrap().into_owned())),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(TestCaseError::fail(format!("{id}: {e}"))),
        }
    }
    let candidates: Vec<SessionCandidate<'_>> = loaded
        .iter()
        .map(|(id, health, events)| SessionCandidate {
            session_id: id,
            health: *health,
            events,
        })
        .collect();
    let compiled = fixture::compiled();
    let hash = compiled.workflow_hash().unwrap();
    let name = |h: &WorkflowHash| (h == &hash).then(|| compiled.body.name.clone()).flatten();
    let unhealthy = loaded
        .iter()
        .filter(|(_, h, _)| *h != workrail_spec::closed::SessionHealthKind::Healthy)
        .count() as u64;
    for query in queries {
        let expected = resume_ranking(&candidates, &name, &query.model());
        let actual = wr
            .resume_session(query.production())
            .map_err(|e| TestCaseError::fail(format!("{query:?}: {e:?}")))?;
        prop_assert_eq!(actual.skipped_unhealthy_sessions, unhealthy);
        let got: Vec<_> = actual
            .candidates
            .iter()
            .map(|c| {
                (
                    c.session_id.clone(),
                    c.run_id.clone(),
                    c.node_id.clone(),
                    Some(c.workflow_id.clone()),
                    c.last_activity_event_index,
                    c.why_matched.clone(),
                    c.snippet.clone(),
                )
            })
            .collect();
        let want: Vec<_> = expected
            .iter()
            .map(|c| {
                (
                    c.session_id.clone(),
                    c.run_id.clone(),
                    c.node_id.clone(),
                    c.workflow_id.clone(),
                    c.last_activity_event_index,
                    c.why_matched.clone(),
                    c.snippet.clone(),
                )
            })
            .collect();
        prop_assert_eq!(got, want, "query {:?}", query.model());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ops::config(2))]

    /// lock: L-RESUME-TIP-ONLY, L-RESUME-TIERS, L-RESUME-TIE-ORDER, L-RESUME-BUDGET, L-RESUME-WHY-MATCHED, L-RESUME-NORMALIZE, L-RESUME-TOKEN-MATCH, L-RESUME-CORPUS, L-RESUME-HEALTHY-ONLY
    #[test]
    fn production_ranks_like_the_model(
        seed in any::<u64>(),
        specs in prop::collection::vec(session_spec(), 0..7),
        queries in prop::collection::vec(query_spec(), 1..6),
    ) {
        check(seed, &specs, &queries)?;
    }
}

/// Eight sessions, seven in three repositories (one corrupted), one with notes over budget:
/// more candidates than the budget and every tier populated, so the comparison is known to
/// reach them.
/// lock: L-RESUME-BUDGET, L-RESUME-HEALTHY-ONLY
#[test]
fn a_crowded_store_ranks_like_the_model() {
    crowded_store().unwrap();
}

/// The comparison reaches the order within a tier: production planted to rank the least
/// recently active tip first is caught by the crowded store and by the generated stores alone.
///
/// lock: L-RESUME-TIE-ORDER
#[test]
fn a_ranking_with_the_oldest_tip_first_is_caught() {
    use workrail::projections::{PlantedProjectionBug, plant};
    plant(PlantedProjectionBug::ResumeOldestFirst, true);
    let crowded = crowded_store();
    let mut runner = proptest::test_runner::TestRunner::new(ops::config(2));
    let generated = runner.run(
        &(
            any::<u64>(),
            prop::collection::vec(session_spec(), 0..7),
            prop::collection::vec(query_spec(), 1..6),
        ),
        |(seed, specs, queries)| check(seed, &specs, &queries),
    );
    plant(PlantedProjectionBug::ResumeOldestFirst, false);
    assert!(crowded.is_err(), "the crowded store missed the planted bug");
    assert!(
        generated.is_err(),
        "the generated stores missed the planted bug"
    );
    crowded_store().unwrap();
}

fn crowded_store() -> Result<(), TestCaseError> {
    let ack = |words: &[usize]| Step::Ack {
        notes: Some(Notes::Words(words.to_vec())),
        contract: true,
    };
    let mut specs = Vec::new();
    for i in 0..7usize {
        specs.push(SessionSpec {
            workspace: (i % 3 != 2).then_some((Some(i % BRANCHES.len()), i % SHAS.len())),
            steps: vec![ack(&[i % WORDS.len(), 1]); i % 4],
            corrupt: i == 5,
        });
    }
    // Notes over the 4096-byte budget end with the truncation marker, which is not searchable.
    specs.push(SessionSpec {
        workspace: None,
        steps: vec![Step::Ack {
            notes: Some(Notes::Long(0, 600)),
            contract: true,
        }],
        corrupt: false,
    });
    let queries = [
        QuerySpec {
            text: None,
            branch: None,
            sha: None,
        },
        QuerySpec {
            text: Some(vec![1]),
            branch: Some((1, 7)),
            sha: Some(0),
        },
        QuerySpec {
            text: Some(vec![10, 9]),
            branch: None,
            sha: None,
        },
        QuerySpec {
            text: Some(vec![15]),
            branch: None,
            sha: None,
        },
        QuerySpec {
            text: Some(vec![11]),
            branch: None,
            sha: None,
        },
    ];
    check(5, &specs, &queries)
}
