//! Arbitrary JSON arguments (with real tokens) to every tool through the MCP dispatch layer:
//! never a panic, never INTERNAL_ERROR, every error an envelope.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workrail_harness::fuzzing::McpInput;

fuzz_target!(|input: McpInput| workrail_harness::fuzzing::mcp_request(&input));
