//! An arbitrary command sequence, then a crash at every mutating I/O point of its last command:
//! the restarted process finds the model's old truth, its new truth, or exactly the locked
//! fail-fast state (redb's fuzz_redb.rs habit, against workrail-model).
#![no_main]

use libfuzzer_sys::fuzz_target;
use workrail_harness::fuzzing::CrashInput;

fuzz_target!(|input: CrashInput| workrail_harness::fuzzing::crash_sequence(&input));
