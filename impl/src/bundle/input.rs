//! Reading a bundle to import, with a size cap: an import never reads more than the cap (so
//! `workrail import /dev/zero` ends with an error instead of running out of memory), and a
//! bundle over it is refused before anything is parsed or written.

use std::io::Read;

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

/// The environment variable that sets the cap, in bytes.
pub const MAX_BUNDLE_BYTES_ENV: &str = "WORKRAIL_BUNDLE_MAX_BYTES";

/// The default cap: 256 MiB, far above any session people export (a 2,000-step session is a
/// few MB), and low enough that parsing it fits in memory on a laptop.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 256 * 1024 * 1024;

/// The cap in effect: `WORKRAIL_BUNDLE_MAX_BYTES` when set, else the default.
pub fn max_bundle_bytes() -> Result<u64, String> {
    match std::env::var(MAX_BUNDLE_BYTES_ENV) {
        Err(_) => Ok(DEFAULT_MAX_BUNDLE_BYTES),
        Ok(value) => value
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                format!(
                    "{MAX_BUNDLE_BYTES_ENV}={value:?} is not a positive number of bytes; set it to e.g. {DEFAULT_MAX_BUNDLE_BYTES} or unset it."
                )
            }),
    }
}

/// The refusal of a bundle over the cap (`size` is what was measured: the file size, or "more
/// than the cap" for a stream).
pub fn over_cap(size: Option<u64>, cap: u64, what: &str) -> ErrorEnvelope {
    let measured = match size {
        Some(size) => format!("{size} bytes"),
        None => format!("more than {cap} bytes"),
    };
    ErrorEnvelope::new(
        ErrorCode::BundleInvalidFormat,
        format!(
            "import refused, nothing was written: {what} is {measured}, over the import cap of {cap} bytes."
        ),
        format!(
            "Check that {what} is a bundle written by `workrail export`. If it is, raise the cap for this import with {MAX_BUNDLE_BYTES_ENV}=<bytes>."
        ),
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "maxBytes": cap,
        "measuredBytes": size,
    }))
}

/// Reads a whole bundle, at most `cap` bytes. `known_size` (a regular file's length) lets an
/// oversize file be refused before it is read.
pub fn read_capped(
    reader: impl Read,
    known_size: Option<u64>,
    cap: u64,
    what: &str,
) -> Result<String, ErrorEnvelope> {
    if let Some(size) = known_size
        && size > cap
    {
        return Err(over_cap(Some(size), cap, what));
    }
    let mut bytes = Vec::with_capacity(known_size.unwrap_or(0).min(cap) as usize);
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("import refused, nothing was written: cannot read {what}: {e}"),
                "Check that the file exists and is readable, then import it again.",
                Retry::NotRetryable,
            )
        })?;
    if bytes.len() as u64 > cap {
        return Err(over_cap(None, cap, what));
    }
    String::from_utf8(bytes).map_err(|e| {
        super::bundle_failure(
            ErrorCode::BundleInvalidFormat,
            format!(
                "{what} is not UTF-8 text (invalid byte at offset {}), so it is not a bundle",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}
