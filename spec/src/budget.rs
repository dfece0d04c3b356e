//! UTF-8 byte budgets and the canonical truncation marker.
//!
//! Every text budget is measured in UTF-8 bytes (`str::len`), never in characters or UTF-16 code
//! units (locks §1 "Text budgets are UTF-8 bytes"). Truncation keeps the beginning of the text,
//! never splits a code point, and reserves room for the marker so the result never exceeds its
//! budget (locks §1 "Canonical truncation marker").

use std::borrow::Cow;

/// The canonical truncation marker, appended exactly when text was truncated.
pub const TRUNCATION_MARKER: &str = "\n\n[TRUNCATED]";

/// Max bytes of a `Blocker.message` (locks §1 "BlockerReport" budgets). Exceeding it fails fast.
pub const BLOCKER_MESSAGE_MAX_BYTES: usize = 512;
/// Max bytes of a `Blocker.suggestedFix` (locks §1 "BlockerReport" budgets). Fails fast.
pub const BLOCKER_SUGGESTED_FIX_MAX_BYTES: usize = 1024;
/// Max blockers in one report (locks §1 "BlockerReport" budgets). Fails fast.
pub const MAX_BLOCKERS: usize = 10;

/// Max bytes of `notesMarkdown` in one output; longer notes are truncated with the marker
/// (locks §1 "node_output_appended" budgets).
pub const NOTES_MARKDOWN_MAX_BYTES: usize = 4096;

/// Max entries in one `decision_trace_appended` (locks §1 "decision_trace_appended" budgets).
pub const TRACE_MAX_ENTRIES: usize = 25;
/// Max bytes of one trace entry summary; longer ones are truncated with the marker.
pub const TRACE_SUMMARY_MAX_BYTES: usize = 512;
/// Max total bytes of one trace event, measured as the JCS bytes of its `data` object.
pub const TRACE_MAX_TOTAL_BYTES: usize = 8192;
/// Max refs on one trace entry.
pub const TRACE_MAX_REFS_PER_ENTRY: usize = 10;

/// Max characters of an observation `short_string` value (locks §1 "observation_recorded").
/// The lock says "length"; values are ASCII-checked nowhere, so WorkRail-rs measures UTF-8 bytes,
/// the stricter reading.
pub const OBSERVATION_SHORT_STRING_MAX_BYTES: usize = 80;

/// Max bytes of the request `context`, measured as UTF-8 bytes of its RFC 8785 (JCS) form
/// (locks §16.3.1 "Byte budget"). Exceeding it is a `VALIDATION_ERROR`, never a truncation.
pub const CONTEXT_MAX_BYTES: usize = 256 * 1024;

/// Max length of a dedupeKey (locks §1 "DedupeKey pattern").
pub const DEDUPE_KEY_MAX_LEN: usize = 256;

/// Max resume candidates returned (locks §2.3 "Response budget").
pub const RESUME_MAX_CANDIDATES: usize = 5;
/// Max snippet bytes per resume candidate, truncated with the marker (locks §2.3).
pub const RESUME_SNIPPET_MAX_BYTES: usize = 1024;

/// Max bytes of a gap or divergence `summary`. The locks say "bounded text" without a number;
/// WorkRail-rs picks the blocker `suggestedFix` budget so a summary can carry a full fix hint.
pub const SUMMARY_MAX_BYTES: usize = 1024;

/// Max bytes of a `wr.loop_control` artifact `summary` ("bounded text", authoring §loop_control);
/// the same budget as a blocker message.
pub const LOOP_CONTROL_SUMMARY_MAX_BYTES: usize = 512;

/// Max artifacts one acknowledgement or checkpoint may carry (decision D55): a step's contract
/// asks for a handful; the bound keeps one plan far inside the segment limits.
pub const OUTPUT_MAX_ARTIFACTS: usize = 64;

/// Max total bytes of one call's artifacts, measured as UTF-8 bytes of their RFC 8785 JCS form
/// (decision D55): large results belong in files, referenced from an artifact.
pub const OUTPUT_ARTIFACTS_MAX_BYTES: usize = 512 * 1024;

/// Max bytes of the function definitions rendered into one `pending.prompt` (locks §5 "Function
/// definitions in rewind/resumption context": "truncate by bytes"; the locks give no number, so
/// WorkRail-rs uses the recap's budget). Over it, definitions are cut with the canonical marker
/// and an omission note.
pub const FUNCTION_DEFINITIONS_MAX_BYTES: usize = 4096;

/// A text after applying a byte budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated<'a> {
    pub text: Cow<'a, str>,
    /// True exactly when the text was cut and the marker appended.
    pub truncated: bool,
}

/// Why a budget cannot be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a budget of {max_bytes} bytes cannot hold the {marker_bytes}-byte truncation marker")]
pub struct BudgetTooSmall {
    pub max_bytes: usize,
    pub marker_bytes: usize,
}

/// Truncates `text` to at most `max_bytes` UTF-8 bytes, keeping its beginning and appending
/// [`TRUNCATION_MARKER`] when (and only when) it had to cut. Never splits a code point.
pub fn truncate_with_marker(text: &str, max_bytes: usize) -> Result<Truncated<'_>, BudgetTooSmall> {
    if text.len() <= max_bytes {
        return Ok(Truncated {
            text: Cow::Borrowed(text),
            truncated: false,
        });
    }
    let Some(room) = max_bytes.checked_sub(TRUNCATION_MARKER.len()) else {
        return Err(BudgetTooSmall {
            max_bytes,
            marker_bytes: TRUNCATION_MARKER.len(),
        });
    };
    let cut = floor_char_boundary(text, room);
    let mut out = String::with_capacity(cut + TRUNCATION_MARKER.len());
    out.push_str(&text[..cut]);
    out.push_str(TRUNCATION_MARKER);
    Ok(Truncated {
        text: Cow::Owned(out),
        truncated: true,
    })
}

/// The largest index `<= index` that is a char boundary of `text`.
pub fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    (0..=index)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// A text bounded to `MAX` UTF-8 bytes at construction (fail fast, no truncation).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BoundedText<const MAX: usize>(String);

/// A text exceeded its byte budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("text is {measured_bytes} UTF-8 bytes; the budget is {max_bytes} bytes")]
pub struct OverBudget {
    pub measured_bytes: usize,
    pub max_bytes: usize,
}

impl<const MAX: usize> BoundedText<MAX> {
    pub fn new(text: impl Into<String>) -> Result<Self, OverBudget> {
        let text = text.into();
        if text.len() > MAX {
            Err(OverBudget {
                measured_bytes: text.len(),
                max_bytes: MAX,
            })
        } else {
            Ok(Self(text))
        }
    }

    /// Builds the text, truncating with the canonical marker when it is over budget.
    pub fn truncating(text: &str) -> Self {
        // MAX is always larger than the marker for the budgets used in this crate.
        let t = truncate_with_marker(text, MAX).map_or_else(
            |_| text[..floor_char_boundary(text, MAX)].to_owned(),
            |t| t.text.into_owned(),
        );
        Self(t)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl<const MAX: usize> serde::Serialize for BoundedText<MAX> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de, const MAX: usize> serde::Deserialize<'de> for BoundedText<MAX> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

impl<const MAX: usize> schemars::JsonSchema for BoundedText<MAX> {
    fn schema_name() -> Cow<'static, str> {
        Cow::Owned(format!("BoundedText{MAX}"))
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // JSON Schema measures characters, not bytes: this bound is necessary, not sufficient.
        schemars::json_schema!({
            "type": "string",
            "maxLength": MAX,
            "description": format!("UTF-8 text of at most {MAX} bytes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        let t = truncate_with_marker("hello", 5).unwrap();
        assert_eq!(t.text, "hello");
        assert!(!t.truncated);
    }

    #[test]
    fn truncation_reserves_marker_bytes_and_respects_code_points() {
        // "é" is two bytes; a cut in its middle must move back.
        let text = "aé".repeat(20);
        let budget = TRUNCATION_MARKER.len() + 2;
        let t = truncate_with_marker(&text, budget).unwrap();
        assert!(t.truncated);
        assert_eq!(t.text, format!("a{TRUNCATION_MARKER}"));
        assert!(t.text.len() <= budget);
    }

    #[test]
    fn budget_smaller_than_marker_is_an_error() {
        assert!(truncate_with_marker("a long enough text", 3).is_err());
    }

    #[test]
    fn bounded_text_fails_fast() {
        assert!(BoundedText::<4>::new("abcd").is_ok());
        let err = BoundedText::<4>::new("abcdé").unwrap_err();
        assert_eq!(err.measured_bytes, 6);
    }
}
