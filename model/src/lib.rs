//! `workrail-model`: the executable reference model of the WorkRail v2 locks.
//!
//! A small, pure, in-memory model of sessions, runs and their DAGs, written from the spec for
//! clarity rather than speed. The harness drives it and the production system with the same
//! command sequences and compares every observable. It depends on `workrail-spec` only and does
//! no I/O (no filesystem, clock, randomness or environment).

#![forbid(unsafe_code)]
