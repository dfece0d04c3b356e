//! What the memory tests share: a counting global allocator, the probe that measures what a
//! value holds, and the nested-loop workflow of `nested_support`.

#![allow(dead_code)]

use std::alloc::System;

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};

#[path = "../nested_support/mod.rs"]
mod nested_support;
pub use nested_support::*;

#[global_allocator]
pub static HEAP: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Far more than any value here holds; never touched, so never resident.
pub const PROBE: usize = 1 << 30;

/// The heap `value` holds. The counting allocator reports only a peak since its reset, so:
/// reset, free the value (the count falls by what it held), then allocate [`PROBE`] bytes; the
/// new peak is `PROBE` less what was freed.
pub fn retained<T>(value: T) -> usize {
    HEAP.reset_peak_memory();
    drop(value);
    let probe = vec![0u8; PROBE];
    std::hint::black_box(&probe);
    let held = PROBE - HEAP.get_peak_memory();
    drop(probe);
    held
}
