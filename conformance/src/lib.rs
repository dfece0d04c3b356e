//! `workrail-conformance`: judges any WorkRail v2 server through its MCP stdio surface and any
//! implementation's pure rules through the offline vectors in `fixtures/vectors/`. It depends on
//! `workrail-spec` only, never on the production crate.

#![forbid(unsafe_code)]
