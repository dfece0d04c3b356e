//! Arbitrary bytes as authoring JSON: the compiler never panics, and compiling is deterministic
//! with a stable workflowHash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| workrail_harness::fuzzing::workflow_compile(data));
