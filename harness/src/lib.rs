//! `workrail-harness`: drives `workrail-model` and the production `workrail` crate with the same
//! generated command sequences and compares every observable result.

#![forbid(unsafe_code)]
