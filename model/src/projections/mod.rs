//! Pure projections over one session's committed events (locks §2, §2.1, §2.3, §3, §4;
//! `L-PURE-PROJECTIONS`).
//!
//! Every function takes the session's events as a slice in `EventIndex` order (the only ordering
//! source, `L-EVENT-INDEX-ORDERING`) and derives its answer from them alone, plus explicit
//! arguments for what does not live in the event log (snapshot completeness, preference defaults,
//! workflow names, session health). Nothing is cached and nothing is clock- or
//! environment-dependent.
//!
//! | module | projection |
//! |---|---|
//! | [`dag`] | run DAG per run: nodes, edges, children, ancestry |
//! | [`tip`] | preferred tip per run (locks §2) |
//! | [`outputs`] | current outputs per node and channel (locks §2.1) |
//! | [`gaps`] | resolved / unresolved gaps (locks §3) |
//! | [`capabilities`] | capability status per (node, capability) and unlocking |
//! | [`preferences`] | effective preferences at a node (locks §4) |
//! | [`advances`] | recorded ack attempts per node |
//! | [`status`] | run status (locks §2.1) |
//! | [`resume`] | `resume_session` ranking (locks §2.3) |

pub mod advances;
pub mod capabilities;
pub mod context;
pub mod dag;
pub mod gaps;
pub mod outputs;
pub mod preferences;
pub mod resume;
pub mod status;
pub mod tip;

pub use advances::{AttemptRecord, advance_outcome, advance_records};
pub use capabilities::{
    CapabilityObservation, branch_capability_status, capability_status, capability_unlocked,
};
pub use context::run_context;
pub use dag::{DagEdge, DagNode, RunDag, run_ids};
pub use gaps::{
    GapRecord, gap_records, is_resolved, unresolved_gaps_at_node, unresolved_gaps_in_run,
};
pub use outputs::{IgnoredSupersede, OutputRecord, OutputsView, SupersedeProblem, node_outputs};
pub use preferences::{PreferenceDefaults, effective_preferences};
pub use resume::{
    ResumeCandidate, ResumeQuery, ResumeTier, SessionCandidate, resume_ranking, text_tokens,
};
pub use status::run_status;
pub use tip::{PreferredTip, last_activity, leaf_activities, preferred_tip};
