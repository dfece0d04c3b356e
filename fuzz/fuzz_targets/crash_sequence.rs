//! An arbitrary command sequence, then a crash at every mutating I/O point of its last command:
//! the restarted process finds the model's old truth, its new truth, or exactly the locked
//! fail-fast state (redb's fuzz_redb.rs habit, against workrail-model).
#![no_main]

use libfuzzer_sys::fuzz_target;
use workrail_harness::fuzzing::CrashInput;

fuzz_target!(|input: CrashInput| workrail_harness::fuzzing::crash_sequence(&input));

// Every distinct crash state is a restarted process that loads sessions and rebuilds the model,
// so glibc's malloc and free took about a quarter of this target's time; mimalloc runs it about
// 1.2x faster (harness/README.md, "Fuzzing"). The product keeps the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
