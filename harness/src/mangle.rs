//! Tokens mangled the way agents mangle them, and the oracle every mangled call must satisfy.
//!
//! A [`World`] is a data directory with two runs (and a third run in another data directory,
//! with its own keyring). Each case takes a call built from real tokens of run A (rehydrate,
//! ack with its stateToken, ack alone, checkpoint), replaces one token field with a mangled
//! value, and runs it on a fresh copy of the data directory, with the clean call on another
//! identical copy for comparison. The oracle ([`judge`]): the call is either **tolerated**
//! (the same response and the same bytes written as the clean call) or **refused** with a
//! `TOKEN_*` / `VALIDATION_ERROR` envelope that is not retryable, names the field and the
//! specific problem, says to copy the tokens exactly from the latest response and mentions
//! `resume_session`, and the data directory is byte-identical (nothing advanced, nothing written).

use proptest::prelude::*;
use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, StartWorkflowInput,
};

use crate::fixture;
use crate::multirun::{Agent, agent_output};
use crate::system::{Fingerprint, Reply, open_workrail_with};

/// A part of a token: `<prefix>.v<version>.<payload>.<signature>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Prefix,
    Version,
    Payload,
    Signature,
}

/// Whitespace an agent or a chat client inserts (line wrapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Space,
    Newline,
    CrLf,
    Tab,
    /// U+200B, inserted by some editors and chat clients.
    ZeroWidth,
}

impl Space {
    fn text(self) -> &'static str {
        match self {
            Self::Space => " ",
            Self::Newline => "\n",
            Self::CrLf => "\r\n",
            Self::Tab => "\t",
            Self::ZeroWidth => "\u{200B}",
        }
    }
}

/// Wrapping around a whole token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wrapping {
    DoubleQuotes,
    SingleQuotes,
    TypographicQuotes,
    Backticks,
    TripleBackticks,
    /// A Markdown fence on its own lines, with an optional info string.
    Fence {
        info: bool,
    },
    AngleBrackets,
    Parentheses,
    /// `stateToken: <token>` copied from the rendered response.
    FieldLabel,
    /// Surrounding spaces and newlines.
    Padding,
    /// Another token glued after it (two tokens pasted into one field).
    SecondToken,
    /// Prose before the token.
    Prose,
}

/// A case change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    Upper,
    Lower,
    /// Only the prefix (`ST.v1.…`).
    Prefix,
    /// Only the version marker (`st.V1.…`).
    Version,
    /// One character of the payload.
    PayloadChar(u16),
}

/// One agent-style edit of a token string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Keep only the first `n` characters of the part, and nothing after it.
    TruncateIn(Part, u16),
    /// Drop the character at a position (modulo the part's length).
    Drop(Part, u16),
    /// Duplicate the character at a position.
    Duplicate(Part, u16),
    /// Replace the character at a position with another base64url character.
    Replace(Part, u16, u8),
    /// Insert whitespace at a position of the whole token.
    Insert(u16, Space),
    Wrap(Wrapping),
    Case(Case),
    /// Standard base64 instead of base64url: `-` -> `+`, `_` -> `/`, `=` padding.
    StandardBase64,
    /// Sentence punctuation after the token.
    Trailing(char),
    /// Every non-alphanumeric character percent-encoded.
    UrlEncode,
    /// Shortened with an ellipsis, keeping `n` characters of the head and 6 of the tail.
    Ellipsis(u16),
}

const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The char range of a part (the whole string when it is not a well-formed token any more).
fn part_range(chars: &[char], part: Part) -> std::ops::Range<usize> {
    let dots: Vec<usize> = (0..chars.len()).filter(|&i| chars[i] == '.').collect();
    let (Some(&d0), Some(&d1), Some(&d2)) = (dots.first(), dots.get(1), dots.get(2)) else {
        return 0..chars.len();
    };
    match part {
        Part::Prefix => 0..d0,
        Part::Version => d0 + 1..d1,
        Part::Payload => d1 + 1..d2,
        Part::Signature => d2 + 1..chars.len(),
    }
}

/// A char position inside a part.
fn at(chars: &[char], part: Part, k: u16) -> usize {
    let r = part_range(chars, part);
    r.start + usize::from(k) % r.len().max(1)
}

impl Mutation {
    /// Applies the edit to a token (or to an already mangled one: positions are taken modulo
    /// the lengths, so any sequence of edits applies). `other` is another token, for
    /// [`Wrapping::SecondToken`].
    pub fn apply(self, token: &str, other: &str) -> String {
        let mut c: Vec<char> = token.chars().collect();
        match self {
            Self::TruncateIn(part, k) => {
                let r = part_range(&c, part);
                c.truncate(r.start + usize::from(k) % r.len().max(1));
            }
            Self::Drop(part, k) => {
                let i = at(&c, part, k);
                if i < c.len() {
                    c.remove(i);
                }
            }
            Self::Duplicate(part, k) => {
                let i = at(&c, part, k);
                if let Some(&ch) = c.get(i) {
                    c.insert(i, ch);
                }
            }
            Self::Replace(part, k, n) => {
                let i = at(&c, part, k);
                let pick = |n: usize| BASE64URL[n % BASE64URL.len()] as char;
                if let Some(old) = c.get(i).copied() {
                    let new = pick(usize::from(n));
                    c[i] = if new == old {
                        pick(usize::from(n) + 1)
                    } else {
                        new
                    };
                }
            }
            Self::Insert(k, space) => {
                let i = 1 + usize::from(k) % c.len().max(1);
                let i = i.min(c.len());
                for (j, ch) in space.text().chars().enumerate() {
                    c.insert(i + j, ch);
                }
            }
            Self::Wrap(w) => {
                let field = match token
                    .trim_start_matches(|ch: char| !ch.is_ascii_alphanumeric())
                    .split('.')
                    .next()
                {
                    Some("ack") => "ackToken",
                    Some("chk") => "checkpointToken",
                    _ => "stateToken",
                };
                let s = match w {
                    Wrapping::DoubleQuotes => format!("\"{token}\""),
                    Wrapping::SingleQuotes => format!("'{token}'"),
                    Wrapping::TypographicQuotes => format!("\u{201C}{token}\u{201D}"),
                    Wrapping::Backticks => format!("`{token}`"),
                    Wrapping::TripleBackticks => format!("```{token}```"),
                    Wrapping::Fence { info: true } => format!("```text\n{token}\n```"),
                    Wrapping::Fence { info: false } => format!("```\n{token}\n```\n"),
                    Wrapping::AngleBrackets => format!("<{token}>"),
                    Wrapping::Parentheses => format!("({token})"),
                    Wrapping::FieldLabel => format!("{field}: {token}"),
                    Wrapping::Padding => format!("\n  {token} \n"),
                    Wrapping::SecondToken => format!("{token}\n{other}"),
                    Wrapping::Prose => format!("the token is {token}"),
                };
                c = s.chars().collect();
            }
            Self::Case(case) => match case {
                Case::Upper => c.iter_mut().for_each(|ch| *ch = ch.to_ascii_uppercase()),
                Case::Lower => c.iter_mut().for_each(|ch| *ch = ch.to_ascii_lowercase()),
                Case::Prefix | Case::Version => {
                    let part = if case == Case::Prefix {
                        Part::Prefix
                    } else {
                        Part::Version
                    };
                    for i in part_range(&c, part) {
                        c[i] = c[i].to_ascii_uppercase();
                    }
                }
                Case::PayloadChar(k) => {
                    // The first letter of the payload from a position on, with its case flipped.
                    let r = part_range(&c, Part::Payload);
                    let start = r.start + usize::from(k) % r.len().max(1);
                    if let Some(i) = (start..r.end)
                        .chain(r.start..start)
                        .find(|&i| c[i].is_ascii_alphabetic())
                    {
                        c[i] = if c[i].is_ascii_uppercase() {
                            c[i].to_ascii_lowercase()
                        } else {
                            c[i].to_ascii_uppercase()
                        };
                    }
                }
            },
            Self::StandardBase64 => {
                let parts: Vec<String> = token
                    .split('.')
                    .enumerate()
                    .map(|(i, p)| {
                        let p = p.replace('-', "+").replace('_', "/");
                        if i >= 2 && p.len() % 4 != 0 {
                            format!("{p}{}", "=".repeat(4 - p.len() % 4))
                        } else {
                            p
                        }
                    })
                    .collect();
                c = parts.join(".").chars().collect();
            }
            Self::Trailing(ch) => c.push(ch),
            Self::UrlEncode => {
                let mut s = String::new();
                for ch in token.chars() {
                    if ch.is_ascii_alphanumeric() {
                        s.push(ch);
                    } else {
                        let mut buf = [0u8; 4];
                        for b in ch.encode_utf8(&mut buf).bytes() {
                            s.push_str(&format!("%{b:02X}"));
                        }
                    }
                }
                c = s.chars().collect();
            }
            Self::Ellipsis(k) => {
                if c.len() > 14 {
                    let head = 6 + usize::from(k) % (c.len() - 12);
                    let tail = c.split_off(c.len() - 6);
                    c.truncate(head.min(c.len()));
                    c.push('\u{2026}');
                    c.extend(tail);
                } else {
                    c.push('\u{2026}');
                }
            }
        }
        c.into_iter().collect()
    }
}

fn part_strategy() -> impl Strategy<Value = Part> {
    prop_oneof![
        1 => Just(Part::Prefix),
        1 => Just(Part::Version),
        3 => Just(Part::Payload),
        3 => Just(Part::Signature),
    ]
}

fn space_strategy() -> impl Strategy<Value = Space> {
    prop_oneof![
        Just(Space::Space),
        Just(Space::Newline),
        Just(Space::CrLf),
        Just(Space::Tab),
        Just(Space::ZeroWidth),
    ]
}

fn wrapping_strategy() -> impl Strategy<Value = Wrapping> {
    prop_oneof![
        Just(Wrapping::DoubleQuotes),
        Just(Wrapping::SingleQuotes),
        Just(Wrapping::TypographicQuotes),
        Just(Wrapping::Backticks),
        Just(Wrapping::TripleBackticks),
        any::<bool>().prop_map(|info| Wrapping::Fence { info }),
        Just(Wrapping::AngleBrackets),
        Just(Wrapping::Parentheses),
        Just(Wrapping::FieldLabel),
        Just(Wrapping::Padding),
        Just(Wrapping::SecondToken),
        Just(Wrapping::Prose),
    ]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    prop_oneof![
        Just(Case::Upper),
        Just(Case::Lower),
        Just(Case::Prefix),
        Just(Case::Version),
        any::<u16>().prop_map(Case::PayloadChar),
    ]
}

/// Any single mutation.
pub fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (part_strategy(), any::<u16>()).prop_map(|(p, k)| Mutation::TruncateIn(p, k)),
        2 => (part_strategy(), any::<u16>()).prop_map(|(p, k)| Mutation::Drop(p, k)),
        2 => (part_strategy(), any::<u16>()).prop_map(|(p, k)| Mutation::Duplicate(p, k)),
        2 => (part_strategy(), any::<u16>(), any::<u8>()).prop_map(|(p, k, c)| Mutation::Replace(p, k, c)),
        3 => (any::<u16>(), space_strategy()).prop_map(|(k, s)| Mutation::Insert(k, s)),
        3 => wrapping_strategy().prop_map(Mutation::Wrap),
        1 => case_strategy().prop_map(Mutation::Case),
        1 => Just(Mutation::StandardBase64),
        1 => prop_oneof![Just('.'), Just(','), Just(';'), Just(':'), Just('!'), Just(')')].prop_map(Mutation::Trailing),
        1 => Just(Mutation::UrlEncode),
        1 => any::<u16>().prop_map(Mutation::Ellipsis),
    ]
}

/// Whether a mutation is one that must be tolerated on its own (D46, D47).
pub fn harmless(m: Mutation) -> bool {
    match m {
        Mutation::Insert(..)
        | Mutation::StandardBase64
        | Mutation::Trailing(_)
        | Mutation::UrlEncode => true,
        Mutation::Wrap(w) => !matches!(w, Wrapping::SecondToken | Wrapping::Prose),
        _ => false,
    }
}

/// Which call a case makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Template {
    /// `continue_workflow` with the stateToken only.
    Rehydrate,
    /// `continue_workflow` with the stateToken and the ackToken.
    Advance,
    /// `continue_workflow` with the ackToken only.
    AckAlone,
    /// `checkpoint_workflow`.
    Checkpoint,
}

/// The token field of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    State,
    Ack,
    Checkpoint,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Self::State => "stateToken",
            Self::Ack => "ackToken",
            Self::Checkpoint => "checkpointToken",
        }
    }
}

impl Template {
    pub const ALL: [Template; 4] = [
        Template::Rehydrate,
        Template::Advance,
        Template::AckAlone,
        Template::Checkpoint,
    ];

    /// The token fields the call sends.
    pub fn fields(self) -> &'static [Field] {
        match self {
            Self::Rehydrate => &[Field::State],
            Self::Advance => &[Field::State, Field::Ack],
            Self::AckAlone => &[Field::Ack],
            Self::Checkpoint => &[Field::State, Field::Checkpoint],
        }
    }
}

/// The token values of one call (before or after mangling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub state: Option<String>,
    pub ack: Option<String>,
    pub checkpoint: Option<String>,
}

impl Tokens {
    /// The clean tokens `template` sends, from `response`.
    pub fn of(template: Template, response: &ExecutionOutput) -> Tokens {
        let has = |f: Field| template.fields().contains(&f);
        Tokens {
            state: has(Field::State).then(|| response.state_token.clone()),
            ack: if has(Field::Ack) {
                response.ack_token.clone()
            } else {
                None
            },
            checkpoint: if has(Field::Checkpoint) {
                response.checkpoint_token.clone()
            } else {
                None
            },
        }
    }

    pub fn get(&self, field: Field) -> &str {
        match field {
            Field::State => self.state.as_deref(),
            Field::Ack => self.ack.as_deref(),
            Field::Checkpoint => self.checkpoint.as_deref(),
        }
        .unwrap_or_default()
    }

    pub fn set(&mut self, field: Field, value: String) {
        match field {
            Field::State => self.state = Some(value),
            Field::Ack => self.ack = Some(value),
            Field::Checkpoint => self.checkpoint = Some(value),
        }
    }
}

/// A data directory with run A (advanced to its loop, so its tokens name a non-root node),
/// run B of another workflow, and run F of a third data directory with its own keyring.
#[derive(Debug)]
pub struct World {
    pub base: MemFs,
    /// Entropy seed of every process that runs a case (identical for the mangled and clean call).
    pub seed: u64,
    /// The latest response of run A.
    pub a: ExecutionOutput,
    /// An earlier response of run A (another node).
    pub a_earlier: ExecutionOutput,
    pub b: ExecutionOutput,
    pub foreign: ExecutionOutput,
}

fn start(wr: &workrail::protocol::Workrail, workflow: &str) -> Result<ExecutionOutput, String> {
    wr.start_workflow(StartWorkflowInput {
        preset: None,
        workflow_id: workflow.into(),
        context: None,
        preferences: vec![],
    })
    .map_err(|e| format!("start {workflow}: {e:?}"))
}

impl World {
    pub fn new(seed: u64) -> Result<World, String> {
        let base = MemFs::new();
        let wr = open_workrail_with(&base, seed, fixture::multi_catalog())
            .map_err(|e| format!("open: {e:?}"))?;
        let a0 = start(&wr, fixture::WORKFLOW_ID)?;
        let a = wr
            .continue_workflow(ContinueWorkflowInput {
                preset: None,
                state_token: Some(a0.state_token.clone()),
                ack_token: a0.ack_token.clone(),
                context: None,
                output: Some(agent_output(Some("plan"), Agent::Good, 0)),
                preferences: vec![],
            })
            .map_err(|e| format!("advance A: {e:?}"))?;
        let b = start(&wr, fixture::LINEAR_ID)?;
        let elsewhere = MemFs::new();
        let other = open_workrail_with(&elsewhere, seed.wrapping_add(1), fixture::multi_catalog())
            .map_err(|e| format!("open the other data directory: {e:?}"))?;
        let foreign = start(&other, fixture::WORKFLOW_ID)?;
        Ok(World {
            base,
            seed: seed.wrapping_mul(31).wrapping_add(5),
            a,
            a_earlier: a0,
            b,
            foreign,
        })
    }

    /// A copy of the data directory (every file, byte for byte).
    fn copy(&self) -> Result<MemFs, String> {
        let copy = self.base.after_crash(UnsyncedData::Kept);
        if copy.snapshot() != self.base.snapshot() {
            return Err("the copy of the data directory differs from it".into());
        }
        Ok(copy)
    }

    /// Runs a call with these tokens on a fresh copy of the data directory, as a new process.
    pub fn run(&self, template: Template, tokens: &Tokens) -> Result<(Reply, Fingerprint), String> {
        let fs = self.copy()?;
        let wr = open_workrail_with(&fs, self.seed, fixture::multi_catalog())
            .map_err(|e| format!("open: {e:?}"))?;
        let output = agent_output(Some("implement"), Agent::Good, 1);
        let reply = match template {
            Template::Checkpoint => wr.checkpoint_workflow(CheckpointWorkflowInput {
                state_token: tokens.state.clone().unwrap_or_default(),
                checkpoint_token: tokens.checkpoint.clone().unwrap_or_default(),
                output,
            }),
            Template::Rehydrate => wr.continue_workflow(ContinueWorkflowInput {
                preset: None,
                state_token: tokens.state.clone(),
                ack_token: tokens.ack.clone(),
                context: None,
                output: None,
                preferences: vec![],
            }),
            Template::Advance | Template::AckAlone => wr.continue_workflow(ContinueWorkflowInput {
                preset: None,
                state_token: tokens.state.clone(),
                ack_token: tokens.ack.clone(),
                context: None,
                output: Some(output),
                preferences: vec![],
            }),
        };
        Ok((reply, fs.snapshot()))
    }
}

/// How a mangled call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Same response and same bytes written as the clean call.
    Tolerated,
    Refused(ErrorEnvelope),
}

/// The oracle for a call whose `mangled` fields differ from the clean tokens of `template`.
pub fn judge(
    world: &World,
    template: Template,
    mangled: &Tokens,
    fields: &[Field],
) -> Result<Verdict, String> {
    let clean = Tokens::of(template, &world.a);
    let (clean_reply, clean_fs) = world.run(template, &clean)?;
    let clean_out = clean_reply.map_err(|e| format!("the clean call fails: {e:?}"))?;
    let (reply, fs) = world.run(template, mangled)?;
    match reply {
        Ok(out) => {
            if out != clean_out {
                return Err(format!(
                    "accepted, but the response differs from the clean call's: {out:?}"
                ));
            }
            if fs != clean_fs {
                return Err("accepted, but wrote other bytes than the clean call".into());
            }
            Ok(Verdict::Tolerated)
        }
        Err(e) => {
            let fail = |why: &str| Err(format!("{why}: {e:?}"));
            let code = e.code.to_string();
            if !code.starts_with("TOKEN_") && e.code != ErrorCode::ValidationError {
                return fail("refused with a code outside TOKEN_* / VALIDATION_ERROR");
            }
            if e.retry != Retry::NotRetryable {
                return fail("a mangled token must not be retryable as is");
            }
            if fs != world.base.snapshot() {
                return fail("a refused call wrote to the data directory");
            }
            if !fields
                .iter()
                .any(|f| e.message.contains(&format!("`{}`", f.name())))
            {
                return fail("the message does not name the mangled field");
            }
            let problem = e.details.as_ref().and_then(|d| d["problem"].as_str());
            if problem.is_none_or(str::is_empty) {
                return fail("details do not name the specific problem");
            }
            for needed in ["exactly", "latest", "resume_session"] {
                if !e.suggestion.contains(needed) {
                    return fail(&format!("the suggestion does not say {needed:?}"));
                }
            }
            Ok(Verdict::Refused(e))
        }
    }
}

/// The `details.problem` of a refusal.
pub fn problem(e: &ErrorEnvelope) -> &str {
    e.details
        .as_ref()
        .and_then(|d| d["problem"].as_str())
        .unwrap_or_default()
}
