//! The Console's control plane (locks §6): the data behind the Config and Workflows pages and
//! the `workrail config` / `workrail workflows` commands, which call the same functions.
//!
//! - [`applied`]: the config in effect in a server ([`AppliedConfigV1`]) and the desired config
//!   (what a restart would apply now), both computed by one function;
//! - [`servers`]: the record each `workrail mcp` writes at start (`servers/<serverId>.json`) and
//!   holds a lock for (`servers/<serverId>.lock`), and the readers that tell live from dead;
//! - [`config`]: desired versus applied for every live server with the restart triggers, and the
//!   edits of `config/features.json` and `config/preferences.json`;
//! - [`workflows`]: workflows with their sources, source text, compiled and pinned snapshots,
//!   pinned drift, and saving or copying sources (never compiled snapshots);
//! - [`client_keys`]: the keys clients of `workrail serve --http` present (stored hashed).
//!
//! The command-line front end (`crate::cli`) and the Console (`crate::console`) both stand on
//! this module; it imports neither.
//!
//! Every read here writes nothing (decision D69): no lock file, no data directory, no cache.
//! Errors are the unified envelope.

pub mod applied;
pub mod authoring;
pub mod client_keys;
pub mod config;
pub mod servers;
pub mod workflows;

pub use workrail_spec::config::{
    AppliedConfigV1, ConfigComparison, LaunchEnvironment, RestartTrigger, RuntimeSafeChange,
    ServerRecordV1, compare,
};

pub use self::applied::{applied_config, desired_config};
pub use self::config::{
    ConfigOverview, ServerConfigView, SettingChange, config_overview, set_feature, set_preference,
    set_setting,
};
pub use self::servers::{Liveness, ServerEntry, ServerRegistration, list_servers};
pub use self::workflows::{
    PinnedView, SavedSource, WorkflowDetail, WorkflowList, WorkflowRow, copy_to_editable,
    list_workflows, pinned_for_run, save_source, show_workflow,
};
