//! Arbitrary strings as tokens: parse, payload decode and HMAC verification never panic, and a
//! token that parses has exactly one spelling (locks §1.2, D12).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| workrail_harness::fuzzing::token_decode(data));
