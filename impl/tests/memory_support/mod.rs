//! What the memory tests share: a counting global allocator (the peak heap, and beneath it how
//! many allocations and bytes), the probe that measures what a value holds, and the nested-loop
//! workflow of `nested_support`.

#![allow(dead_code)]

use std::alloc::System;

use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait};
use stats_alloc::StatsAlloc;

#[path = "../nested_support/mod.rs"]
mod nested_support;
pub use nested_support::*;

/// How many allocations were made and how many bytes they asked for, in total.
pub static COUNTS: StatsAlloc<System> = StatsAlloc::system();

#[global_allocator]
pub static HEAP: PeakMemAlloc<&StatsAlloc<System>> = PeakMemAlloc::new(&COUNTS);

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
