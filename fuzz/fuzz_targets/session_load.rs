//! Edited manifest and segment files of a real session: load never panics, the health is always
//! classified, and no execution call succeeds on an unhealthy session.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workrail_harness::fuzzing::SessionLoadInput;

fuzz_target!(|input: SessionLoadInput| workrail_harness::fuzzing::session_load(&input));
