//! JSON edits to a real export bundle, imported into a fresh (or the same) data directory:
//! never a panic or INTERNAL_ERROR; a refused import writes nothing; an accepted one is a healthy
//! session whose re-minted tokens rehydrate (locks §1.3).
#![no_main]

use libfuzzer_sys::fuzz_target;
use workrail_harness::fuzzing::BundleInput;

fuzz_target!(|input: BundleInput| workrail_harness::fuzzing::bundle_import(&input));
