//! The model's tests in one binary (one optimized link instead of one per file); each file is a
//! module of it, named as the file is. The model checkers (storecheck, pgcheck) stand alone: they
//! are run by name, with deep runs behind an environment variable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../capabilities.rs"]
mod capabilities;
#[path = "../capability_observations.rs"]
mod capability_observations;
#[path = "../common/mod.rs"]
mod common;
#[path = "../interpreter.rs"]
mod interpreter;
#[path = "../lanes.rs"]
mod lanes;
#[path = "../language.rs"]
mod language;
#[path = "../model_ops.rs"]
mod model_ops;
#[path = "../projections.rs"]
mod projections;
#[path = "../properties.rs"]
mod properties;
#[path = "../reports.rs"]
mod reports;
#[path = "../vectors.rs"]
mod vectors;
