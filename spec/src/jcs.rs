//! RFC 8785 JSON Canonicalization Scheme and `sha256:<hex>` digests (locks §11).
//!
//! One canonical form serves every hash in WorkRail: `workflowHash`, snapshot refs, bundle
//! integrity entries, context budgets and token payloads. A value is first turned into a
//! `serde_json::Value` and then written here: object keys sorted by UTF-16 code units, strings
//! with the RFC's minimal escaping, safe integers as digits. Every other number is written by
//! `serde_jcs` (the ECMAScript number form), which is also the reference the writer is tested
//! against (`writer_equals_serde_jcs` in `tests/properties.rs`); the golden vectors in `fixtures/vectors/jcs.json`
//! pin the behaviour.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::ids::Sha256Digest;

/// A typed value WorkRail hashes: a durable artifact whose content address or integrity entry
/// is `sha256(JCS(value))` (locks §17 "Canonical core modules": hashing accepts only typed
/// canonical artifacts, never ad-hoc strings). [`jcs_digest`] and [`Canonical::of`] take nothing
/// else, so a digest is never taken of text put together by hand:
///
/// lock: L-JCS-TYPED-INPUT
/// ```compile_fail,E0277
/// fn digest_of_text() {
///     let _ = workrail_spec::jcs::jcs_digest("{\"kind\":\"made up\"}");
/// }
/// ```
///
/// while a typed artifact, an agent's artifact object included, hashes:
///
/// ```
/// let artifact = serde_json::json!({"kind": "wr.loop_control", "decision": "stop"});
/// let object = artifact.as_object().unwrap();
/// let canonical = workrail_spec::jcs::Canonical::of(object).unwrap();
/// assert_eq!(&workrail_spec::jcs::jcs_digest(object).unwrap().0, canonical.digest());
/// ```
pub trait CanonicalArtifact: Serialize {}

impl<T: CanonicalArtifact> CanonicalArtifact for [T] {}
impl<T: CanonicalArtifact> CanonicalArtifact for Vec<T> {}
/// An agent's artifact: always a JSON object (a bare string or number is never an artifact).
impl CanonicalArtifact for serde_json::Map<String, serde_json::Value> {}

/// The RFC 8785 bytes of one typed artifact and their digest. Only [`Canonical::of`] makes one,
/// so a content address taken from it (`SnapshotRef`, `WorkflowHash`, an artifact's digest) is
/// the digest of a typed value. Cloning shares the bytes.
pub struct Canonical<T: ?Sized> {
    bytes: std::sync::Arc<[u8]>,
    digest: Sha256Digest,
    of: std::marker::PhantomData<fn(&T)>,
}

impl<T: CanonicalArtifact + ?Sized> Canonical<T> {
    /// Canonicalizes `value` and hashes the result once.
    pub fn of(value: &T) -> Result<Self, JcsError> {
        let bytes = to_canonical_bytes(value)?;
        let digest = sha256(&bytes);
        Ok(Self {
            bytes: bytes.into(),
            digest,
            of: std::marker::PhantomData,
        })
    }
}

impl<T: ?Sized> Canonical<T> {
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `sha256` of [`Canonical::bytes`].
    pub fn digest(&self) -> &Sha256Digest {
        &self.digest
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<T: ?Sized> Clone for Canonical<T> {
    fn clone(&self) -> Self {
        Self {
            bytes: std::sync::Arc::clone(&self.bytes),
            digest: self.digest.clone(),
            of: std::marker::PhantomData,
        }
    }
}

/// Equal forms are equal bytes (and so equal digests).
impl<T: ?Sized> PartialEq for Canonical<T> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<T: ?Sized> Eq for Canonical<T> {}

impl<T: ?Sized> std::fmt::Debug for Canonical<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canonical")
            .field("digest", &self.digest)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// A value could not be canonicalized (e.g. a map with non-string keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value cannot be written as RFC 8785 canonical JSON: {detail}")]
pub struct JcsError {
    pub detail: String,
}

/// The RFC 8785 canonical JSON text of `value`.
pub fn to_canonical_string<T: Serialize + ?Sized>(value: &T) -> Result<String, JcsError> {
    let bytes = to_canonical_bytes(value)?;
    // The writer emits whole UTF-8 strings and ASCII punctuation only.
    String::from_utf8(bytes).map_err(|e| JcsError {
        detail: e.to_string(),
    })
}

/// The RFC 8785 canonical UTF-8 bytes of `value`.
pub fn to_canonical_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JcsError> {
    let value = serde_json::to_value(value).map_err(|e| JcsError {
        detail: e.to_string(),
    })?;
    value_to_canonical_bytes(&value)
}

/// The RFC 8785 canonical UTF-8 bytes of a JSON value (no copy of the value is made).
pub fn value_to_canonical_bytes(value: &serde_json::Value) -> Result<Vec<u8>, JcsError> {
    let mut out = Vec::with_capacity(256);
    write_value(&mut out, value)?;
    Ok(out)
}

/// Integers up to 2^53 are written as their digits, which is what the ECMAScript number form
/// gives for them; larger magnitudes are doubles there.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

fn write_value(out: &mut Vec<u8>, value: &serde_json::Value) -> Result<(), JcsError> {
    use serde_json::Value;
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64().filter(|u| *u <= MAX_SAFE_INTEGER) {
                out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
            } else if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER) {
                out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            } else {
                serde_jcs::to_writer(&mut *out, n).map_err(|e| JcsError {
                    detail: e.to_string(),
                })?;
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // Usually already in order (a sorted map), so this is one pass of comparisons.
            entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, key);
                out.push(b':');
                write_value(out, item)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// A JSON string with RFC 8785 escaping: `"` and `\`, the short forms `\b \t \n \f \r`, other
/// control characters as `\u00xx` (lowercase hex), everything else as it is.
fn write_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut control = *b"\\u0000";
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0A => b"\\n",
            0x0C => b"\\f",
            0x0D => b"\\r",
            0x00..=0x1F => {
                control[4] = HEX[usize::from(b >> 4)];
                control[5] = HEX[usize::from(b & 0xF)];
                &control
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Writes the RFC 8785 canonical form of `value` to `out` (the same bytes as
/// [`to_canonical_bytes`], without building them in memory first at this level).
pub fn write_canonical<W: std::io::Write, T: Serialize + ?Sized>(
    out: W,
    value: &T,
) -> Result<(), JcsError> {
    serde_jcs::to_writer(out, value).map_err(|e| JcsError {
        detail: e.to_string(),
    })
}

/// Canonicalizes JSON text: parse strictly (I-JSON: no duplicate keys), then write in RFC 8785
/// form.
pub fn canonicalize_json_text(text: &str) -> Result<String, JcsError> {
    let value = parse_strict(text).map_err(|e| JcsError {
        detail: e.to_string(),
    })?;
    let bytes = value_to_canonical_bytes(&value)?;
    String::from_utf8(bytes).map_err(|e| JcsError {
        detail: e.to_string(),
    })
}

/// Parses JSON text into a value, rejecting duplicate object keys (RFC 8785 §3.1 requires
/// I-JSON input; a silently dropped duplicate would let two texts with different meanings
/// share one canonical form).
pub fn parse_strict(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    let StrictValue(value) = serde_json::from_str(text)?;
    Ok(value)
}

/// A `serde_json::Value` whose deserialization fails on duplicate keys.
pub(crate) struct StrictValue(pub(crate) serde_json::Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate object key {key:?}"
                )));
            }
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// What [`scan_strict`] found at the top level of a JSON text.
#[derive(Debug, Clone, PartialEq)]
pub enum ScannedTop {
    /// An object, with the value of the requested member if present.
    Object { member: Option<serde_json::Value> },
    /// Not an object: its JSON type as messages name it ("an array", "a string", …).
    Other(&'static str),
}

/// Checks JSON text as strictly as [`parse_strict`] (syntax, I-JSON: no duplicate object keys
/// at any depth) without building it: memory stays proportional to the keys of the objects
/// open at one time, not to the text. Returns the value of the top-level member `member` (the
/// only part that is built), so a caller can classify a version field before anything else.
pub fn scan_strict(text: &str, member: &'static str) -> Result<ScannedTop, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = serde::Deserializer::deserialize_any(&mut de, TopVisitor { member })?;
    de.end()?;
    Ok(top)
}

/// A key as read, borrowed from the text when it holds no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Reads the entries of an object, skipping (strictly) every value but `member`'s, which is
/// built; fails on a duplicate key.
fn scan_object<'de, A: serde::de::MapAccess<'de>>(
    mut map: A,
    member: Option<&'static str>,
) -> Result<Option<serde_json::Value>, A::Error> {
    let mut seen = std::collections::HashSet::new();
    let mut found = None;
    while let Some(Key(key)) = map.next_key()? {
        if member.is_some_and(|m| key == m) {
            let StrictValue(value) = map.next_value()?;
            found = Some(value);
        } else {
            map.next_value::<StrictSkip>()?;
        }
        if seen.contains(&key) {
            return Err(serde::de::Error::custom(format!(
                "duplicate object key {key:?}"
            )));
        }
        seen.insert(key);
    }
    Ok(found)
}

/// A value that is checked (syntax, no duplicate keys) and dropped as it is read.
struct StrictSkip;

impl<'de> serde::Deserialize<'de> for StrictSkip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor).map(|()| StrictSkip)
    }
}

struct SkipVisitor;

impl<'de> serde::de::Visitor<'de> for SkipVisitor {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(E::custom("non-finite number"))
        }
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<StrictSkip>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        scan_object(map, None).map(|_| ())
    }
}

/// The top level: an object (with one member built) or anything else, named by its type.
struct TopVisitor {
    member: &'static str,
}

impl<'de> serde::de::Visitor<'de> for TopVisitor {
    type Value = ScannedTop;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<ScannedTop, E> {
        Ok(ScannedTop::Other("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<ScannedTop, E> {
        Ok(ScannedTop::Other("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<ScannedTop, E> {
        Ok(ScannedTop::Other("a number"))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ScannedTop, E> {
        SkipVisitor
            .visit_f64(v)
            .map(|()| ScannedTop::Other("a number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<ScannedTop, E> {
        Ok(ScannedTop::Other("a string"))
    }
    fn visit_unit<E>(self) -> Result<ScannedTop, E> {
        Ok(ScannedTop::Other("null"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<ScannedTop, A::Error> {
        SkipVisitor
            .visit_seq(seq)
            .map(|()| ScannedTop::Other("an array"))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ScannedTop, A::Error> {
        scan_object(map, Some(self.member)).map(|member| ScannedTop::Object { member })
    }
}

/// SHA-256 of raw bytes in the locked `sha256:<hex>` form.
pub fn sha256(bytes: &[u8]) -> Sha256Digest {
    let digest = Sha256::digest(bytes);
    let mut raw = [0u8; 32];
    raw.copy_from_slice(digest.as_slice());
    Sha256Digest::from_bytes(&raw)
}

/// The value half of an object member written by [`write_object`]: writes the member's value
/// in canonical form.
pub type MemberValue<'a> = Box<dyn Fn(&mut dyn std::io::Write) -> Result<(), JcsError> + 'a>;

/// A member whose value is `value`'s canonical form.
pub fn member<'a, T: Serialize + ?Sized>(value: &'a T) -> MemberValue<'a> {
    Box::new(move |out| write_canonical(out, value))
}

/// Writes an object member by member, in RFC 8785 key order (UTF-16 code units), each value
/// written straight to `out`. The result equals the canonical form of the object built whole
/// (members are distinct keys); only the value being written is ever buffered.
pub fn write_object(
    out: &mut dyn std::io::Write,
    mut members: Vec<(std::borrow::Cow<'_, str>, MemberValue<'_>)>,
) -> Result<(), JcsError> {
    members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    write_raw(out, b"{")?;
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            write_raw(out, b",")?;
        }
        write_canonical(&mut *out, key.as_ref())?;
        write_raw(out, b":")?;
        value(out)?;
    }
    write_raw(out, b"}")
}

/// Writes an array element by element in canonical form (the canonical form of the array).
pub fn write_array<'a, T: Serialize + 'a>(
    out: &mut dyn std::io::Write,
    items: impl IntoIterator<Item = &'a T>,
) -> Result<(), JcsError> {
    write_raw(out, b"[")?;
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            write_raw(out, b",")?;
        }
        write_canonical(&mut *out, item)?;
    }
    write_raw(out, b"]")
}

fn write_raw(out: &mut dyn std::io::Write, bytes: &[u8]) -> Result<(), JcsError> {
    out.write_all(bytes).map_err(|e| JcsError {
        detail: e.to_string(),
    })
}

/// `sha256(JCS(value))`, with the canonical byte count (used by bundle integrity entries).
/// The canonical bytes are hashed as they are written, never held whole: a digest of a large
/// value (a session's events) costs no more memory than its largest object.
pub fn jcs_digest<T: CanonicalArtifact + ?Sized>(
    value: &T,
) -> Result<(Sha256Digest, usize), JcsError> {
    let mut sink = DigestSink::default();
    write_canonical(&mut sink, value)?;
    Ok(sink.finish())
}

/// A writer that hashes and counts what is written to it.
#[derive(Default)]
pub struct DigestSink {
    hasher: Sha256,
    bytes: usize,
}

impl std::fmt::Debug for DigestSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestSink")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl DigestSink {
    /// The `sha256:<hex>` digest of everything written, and its length.
    pub fn finish(self) -> (Sha256Digest, usize) {
        let digest = self.hasher.finalize();
        let mut raw = [0u8; 32];
        raw.copy_from_slice(digest.as_slice());
        (Sha256Digest::from_bytes(&raw), self.bytes)
    }
}

impl std::io::Write for DigestSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hasher.update(buf);
        self.bytes += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input_is_the_known_digest() {
        assert_eq!(
            sha256(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        assert!(canonicalize_json_text(r#"{"a":1,"a":2}"#).is_err());
        assert!(canonicalize_json_text(r#"{"a":1,"\u0061":2}"#).is_err());
        assert!(canonicalize_json_text(r#"[{"a":1},{"a":2}]"#).is_ok());
    }

    #[test]
    fn strings_are_escaped_minimally() {
        let value = serde_json::json!({"\u{1f}\u{7f}\"\\/\u{8}\t\n\u{c}\r": "\u{0}é\u{2028}"});
        assert_eq!(
            value_to_canonical_bytes(&value).unwrap(),
            serde_jcs::to_vec(&value).unwrap()
        );
        assert_eq!(
            String::from_utf8(value_to_canonical_bytes(&value).unwrap()).unwrap(),
            "{\"\\u001f\u{7f}\\\"\\\\/\\b\\t\\n\\f\\r\":\"\\u0000é\u{2028}\"}"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+FFFD sorts after U+1F600 by code point, before it by UTF-16 (0xD83D < 0xFFFD).
        let value = serde_json::json!({"\u{fffd}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(
            String::from_utf8(value_to_canonical_bytes(&value).unwrap()).unwrap(),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{fffd}\":1}"
        );
    }

    #[test]
    fn the_strict_scan_finds_duplicates_at_any_depth_and_builds_one_member() {
        for bad in [
            r#"{"a":1,"a":1}"#,
            r#"{"a":1,"\u0061":1}"#,
            r#"{"x":[{"b":{"c":1,"c":1}}]}"#,
            r#"[{"a":1,"a":2}]"#,
            r#"{"k":{"a":1,"a":2}}"#,
            r#"{"k":1,"k":1}"#,
            r#"{"k":1"#,
            r#"{"k":1} x"#,
        ] {
            assert!(scan_strict(bad, "k").is_err(), "{bad}");
            assert!(parse_strict(bad).is_err(), "{bad}");
        }
        assert_eq!(
            scan_strict(r#"{"a":[{"b":1},{"b":2}],"k":{"v":[1]}}"#, "k").unwrap(),
            ScannedTop::Object {
                member: Some(serde_json::json!({"v": [1]}))
            }
        );
        assert_eq!(
            scan_strict(r#"{"a":1}"#, "k").unwrap(),
            ScannedTop::Object { member: None }
        );
        assert_eq!(
            scan_strict(r#"[{"k":1}]"#, "k").unwrap(),
            ScannedTop::Other("an array")
        );
        assert_eq!(scan_strict("null", "k").unwrap(), ScannedTop::Other("null"));
    }

    #[test]
    fn objects_written_member_by_member_are_canonical() {
        // UTF-16 order puts an astral key (a surrogate pair) before U+E000.
        let value = serde_json::json!({"\u{e000}": 1, "\u{10000}": [1.50, "x"], "a": {"z": 1, "b": null}, "B": true});
        let map = value.as_object().unwrap();
        let mut out = Vec::new();
        write_object(
            &mut out,
            map.iter()
                .map(|(k, v)| (std::borrow::Cow::Borrowed(k.as_str()), member(v)))
                .collect(),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            to_canonical_string(&value).unwrap()
        );
        let items = vec![value.clone(), serde_json::json!(2)];
        let mut out = Vec::new();
        write_array(&mut out, &items).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            to_canonical_string(&items).unwrap()
        );
        let objects: Vec<serde_json::Map<String, serde_json::Value>> =
            vec![value.as_object().unwrap().clone(), serde_json::Map::new()];
        let (digest, len) = jcs_digest(&objects).unwrap();
        let bytes = to_canonical_bytes(&objects).unwrap();
        assert_eq!((digest, len), (sha256(&bytes), bytes.len()));
    }

    #[test]
    fn rfc8785_number_example() {
        let out = canonicalize_json_text(
            "[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]",
        )
        .unwrap();
        assert_eq!(out, "[333333333.3333333,1e+30,4.5,0.002,1e-27]");
    }
}
