//! Mangled tokens: agents corrupt long tokens when they copy them (truncate, drop, duplicate or
//! replace a character, wrap lines, quote or fence them, swap fields, paste another run's or
//! another data directory's token, change case, re-encode). For tokens from real responses,
//! every such edit in every token field of every call (rehydrate, ack with its stateToken, ack
//! alone, checkpoint) is either tolerated (the same response and the same bytes written as the
//! clean call: decisions D46, D47) or refused with a `TOKEN_*` envelope that names the field
//! and the specific problem and says how to recover, and the data directory stays
//! byte-identical (see `workrail_harness::mangle`).
//!
//! Guards against: a mangled token that advances or writes anything, vague errors ("invalid
//! token") an agent cannot act on, and refusing wrapping that cannot be part of a token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use proptest::prelude::*;
use workrail_harness::mangle::{
    Case, Field, Mutation, Part, Space, Template, Tokens, Verdict, World, Wrapping, harmless,
    judge, mutation_strategy, problem,
};
use workrail_harness::ops;
use workrail_spec::error::ErrorCode;

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| World::new(42).unwrap())
}

/// What a named case must end in.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Tolerated,
    /// Refused with this code, one of these `details.problem` values, and this phrase in the
    /// message.
    Refused(ErrorCode, &'static [&'static str], &'static str),
}

const CUT_OFF: Expect = Expect::Refused(ErrorCode::TokenInvalidFormat, &["cut_off"], "cut off");
const GARBLED: Expect = Expect::Refused(
    ErrorCode::TokenBadSignature,
    &["altered", "signature_mismatch"],
    "altered",
);

/// A garbled payload: refused as malformed (the base64 no longer decodes) or as altered (it
/// decodes, but the signature does not match).
fn garbled_payload(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::TokenInvalidFormat | ErrorCode::TokenBadSignature
    )
}

/// Every string-level mutation with its expected outcome.
fn named_mutations() -> Vec<(&'static str, Mutation, Expect)> {
    use Expect::{Refused, Tolerated};
    use Mutation as M;
    let invalid = ErrorCode::TokenInvalidFormat;
    vec![
        (
            "truncate_inside_prefix",
            M::TruncateIn(Part::Prefix, 1),
            CUT_OFF,
        ),
        (
            "truncate_after_prefix",
            M::TruncateIn(Part::Version, 0),
            CUT_OFF,
        ),
        (
            "truncate_inside_version",
            M::TruncateIn(Part::Version, 1),
            CUT_OFF,
        ),
        (
            "truncate_inside_payload",
            M::TruncateIn(Part::Payload, 100),
            CUT_OFF,
        ),
        (
            "truncate_before_signature",
            M::TruncateIn(Part::Signature, 0),
            CUT_OFF,
        ),
        (
            "truncate_inside_signature",
            M::TruncateIn(Part::Signature, 5),
            CUT_OFF,
        ),
        (
            "truncate_last_character",
            M::TruncateIn(Part::Signature, 42),
            CUT_OFF,
        ),
        (
            "drop_in_prefix",
            M::Drop(Part::Prefix, 0),
            Refused(invalid, &["prefix"], "starts with"),
        ),
        (
            "drop_in_payload",
            M::Drop(Part::Payload, 50),
            Refused(invalid, &["payload", "altered"], "payload"),
        ),
        ("drop_in_signature", M::Drop(Part::Signature, 20), CUT_OFF),
        (
            "duplicate_in_payload",
            M::Duplicate(Part::Payload, 50),
            Refused(invalid, &["payload", "altered"], "payload"),
        ),
        (
            "duplicate_in_signature",
            M::Duplicate(Part::Signature, 20),
            Refused(invalid, &["extra_text"], "44 characters"),
        ),
        (
            "replace_in_payload",
            M::Replace(Part::Payload, 50, 7),
            Refused(invalid, &["payload", "altered", "signature_mismatch"], ""),
        ),
        (
            "replace_in_signature",
            M::Replace(Part::Signature, 20, 7),
            GARBLED,
        ),
        // Index 59 of the base64url alphabet is `7`: `v1` becomes `v7`.
        (
            "replace_version_digit",
            M::Replace(Part::Version, 1, 59),
            Refused(
                ErrorCode::TokenUnsupportedVersion,
                &["unsupported_version"],
                "v7",
            ),
        ),
        ("insert_space", M::Insert(100, Space::Space), Tolerated),
        ("insert_newline", M::Insert(60, Space::Newline), Tolerated),
        ("insert_crlf", M::Insert(200, Space::CrLf), Tolerated),
        ("insert_tab", M::Insert(3, Space::Tab), Tolerated),
        (
            "insert_zero_width_space",
            M::Insert(150, Space::ZeroWidth),
            Tolerated,
        ),
        (
            "wrap_double_quotes",
            M::Wrap(Wrapping::DoubleQuotes),
            Tolerated,
        ),
        (
            "wrap_single_quotes",
            M::Wrap(Wrapping::SingleQuotes),
            Tolerated,
        ),
        (
            "wrap_typographic_quotes",
            M::Wrap(Wrapping::TypographicQuotes),
            Tolerated,
        ),
        ("wrap_backticks", M::Wrap(Wrapping::Backticks), Tolerated),
        (
            "wrap_triple_backticks",
            M::Wrap(Wrapping::TripleBackticks),
            Tolerated,
        ),
        (
            "wrap_code_fence_with_info",
            M::Wrap(Wrapping::Fence { info: true }),
            Tolerated,
        ),
        (
            "wrap_code_fence",
            M::Wrap(Wrapping::Fence { info: false }),
            Tolerated,
        ),
        (
            "wrap_angle_brackets",
            M::Wrap(Wrapping::AngleBrackets),
            Tolerated,
        ),
        (
            "wrap_parentheses",
            M::Wrap(Wrapping::Parentheses),
            Tolerated,
        ),
        (
            "field_label_before",
            M::Wrap(Wrapping::FieldLabel),
            Tolerated,
        ),
        (
            "surrounding_whitespace",
            M::Wrap(Wrapping::Padding),
            Tolerated,
        ),
        (
            "two_tokens_in_one_field",
            M::Wrap(Wrapping::SecondToken),
            Refused(invalid, &["extra_text"], "more than one token"),
        ),
        (
            "prose_before",
            M::Wrap(Wrapping::Prose),
            Refused(invalid, &["extra_text"], "text was pasted before the token"),
        ),
        (
            "uppercase",
            M::Case(Case::Upper),
            Refused(invalid, &["prefix"], "case-sensitive"),
        ),
        (
            "lowercase",
            M::Case(Case::Lower),
            Refused(
                invalid,
                &["payload", "signature", "altered", "signature_mismatch"],
                "",
            ),
        ),
        (
            "uppercase_prefix",
            M::Case(Case::Prefix),
            Refused(invalid, &["prefix"], "case-sensitive"),
        ),
        (
            "uppercase_version",
            M::Case(Case::Version),
            Refused(invalid, &["version"], "case-sensitive"),
        ),
        (
            "flip_case_in_payload",
            M::Case(Case::PayloadChar(40)),
            Refused(invalid, &["payload", "altered", "signature_mismatch"], ""),
        ),
        ("standard_base64_alphabet", M::StandardBase64, Tolerated),
        ("trailing_period", M::Trailing('.'), Tolerated),
        ("trailing_comma", M::Trailing(','), Tolerated),
        ("trailing_semicolon", M::Trailing(';'), Tolerated),
        ("trailing_parenthesis", M::Trailing(')'), Tolerated),
        ("url_encoded", M::UrlEncode, Tolerated),
        (
            "shortened_with_ellipsis",
            M::Ellipsis(30),
            Refused(invalid, &["cut_off"], "ellipsis"),
        ),
    ]
}

fn check(name: &str, template: Template, mangled: &Tokens, fields: &[Field], expect: Expect) {
    let verdict = match judge(world(), template, mangled, fields) {
        Ok(v) => v,
        Err(e) => panic!("{name} ({template:?}, {fields:?}): {e}"),
    };
    match (expect, verdict) {
        (Expect::Tolerated, Verdict::Tolerated) => {}
        (Expect::Refused(code, problems, phrase), Verdict::Refused(e)) => {
            let code_ok =
                e.code == code || (problems.contains(&"altered") && garbled_payload(e.code));
            assert!(
                code_ok && problems.contains(&problem(&e)) && e.message.contains(phrase),
                "{name} ({template:?}, {fields:?}): expected {code} {problems:?} saying {phrase:?}, got {e:?}"
            );
        }
        (expect, verdict) => {
            panic!("{name} ({template:?}, {fields:?}): expected {expect:?}, got {verdict:?}")
        }
    }
}

/// Every named mutation in every token field of every call.
/// lock: L-TOKEN-ERRORS, L-ERR-SELF-CORRECTING, L-TOKEN-FORMAT
#[test]
fn every_named_mutation_is_tolerated_or_refused_precisely() {
    let w = world();
    let mut cases = 0;
    for template in Template::ALL {
        let clean = Tokens::of(template, &w.a);
        for &field in template.fields() {
            let other = match field {
                Field::State => w.a.ack_token.clone().unwrap(),
                _ => w.a.state_token.clone(),
            };
            for (name, mutation, expect) in named_mutations() {
                let mut mangled = clean.clone();
                mangled.set(field, mutation.apply(clean.get(field), &other));
                check(name, template, &mangled, &[field], expect);
                cases += 1;
            }
            let mut empty = clean.clone();
            empty.set(field, String::new());
            let expect = Expect::Refused(ErrorCode::TokenInvalidFormat, &["empty"], "empty");
            check("empty", template, &empty, &[field], expect);
        }
    }
    assert_eq!(
        cases,
        6 * named_mutations().len(),
        "every field of every call"
    );
}

/// Whole-token mix-ups: swapped fields, a token of the wrong kind, another run's token,
/// another node's token of the same run, another data directory's token.
/// lock: L-TOKEN-ERRORS, L-TOKEN-SCOPED, L-ERR-SELF-CORRECTING, L-TOKEN-KEYRING-VERIFY
#[test]
fn swapped_foreign_and_other_run_tokens_are_refused_precisely() {
    let w = world();
    let a = |t| Tokens::of(t, &w.a);
    let invalid = ErrorCode::TokenInvalidFormat;
    let scope = ErrorCode::TokenScopeMismatch;
    let foreign = Expect::Refused(
        ErrorCode::TokenBadSignature,
        &["signature_mismatch"],
        "another WorkRail data directory",
    );
    let with = |t: Template, f: Field, v: &str| {
        let mut tokens = a(t);
        tokens.set(f, v.to_owned());
        tokens
    };
    let st = |o: &workrail_spec::tools::ExecutionOutput| o.state_token.clone();
    let ack = |o: &workrail_spec::tools::ExecutionOutput| o.ack_token.clone().unwrap();
    let chk = |o: &workrail_spec::tools::ExecutionOutput| o.checkpoint_token.clone().unwrap();
    use Field::{Ack, Checkpoint as Chk, State};
    use Template::{AckAlone, Advance, Checkpoint, Rehydrate};
    let both = [State, Ack];
    let both_chk = [State, Chk];
    let mut swapped_adv = a(Advance);
    swapped_adv.state = Some(ack(&w.a));
    swapped_adv.ack = Some(st(&w.a));
    let mut swapped_chk = a(Checkpoint);
    swapped_chk.state = Some(chk(&w.a));
    swapped_chk.checkpoint = Some(st(&w.a));
    let cases: Vec<(&str, Template, Tokens, &[Field], Expect)> = vec![
        (
            "swap_state_and_ack",
            Advance,
            swapped_adv,
            &both,
            Expect::Refused(invalid, &["swapped"], "swapped"),
        ),
        (
            "swap_state_and_checkpoint",
            Checkpoint,
            swapped_chk,
            &both_chk,
            Expect::Refused(invalid, &["swapped"], "swapped"),
        ),
        (
            "ack_in_state_field",
            Rehydrate,
            with(Rehydrate, State, &ack(&w.a)),
            &[State],
            Expect::Refused(invalid, &["wrong_kind"], "an ack token"),
        ),
        (
            "state_in_ack_field",
            AckAlone,
            with(AckAlone, Ack, &st(&w.a)),
            &[Ack],
            Expect::Refused(invalid, &["wrong_kind"], "a state token"),
        ),
        (
            "checkpoint_in_ack_field",
            Advance,
            with(Advance, Ack, &chk(&w.a)),
            &[Ack],
            Expect::Refused(invalid, &["wrong_kind"], "a checkpoint token"),
        ),
        (
            "ack_of_another_run",
            Advance,
            with(Advance, Ack, &ack(&w.b)),
            &both,
            Expect::Refused(scope, &["scope_mismatch"], "(another run)"),
        ),
        (
            "state_of_another_run",
            Advance,
            with(Advance, State, &st(&w.b)),
            &both,
            Expect::Refused(scope, &["scope_mismatch"], "(another run)"),
        ),
        (
            "ack_of_another_node",
            Advance,
            with(Advance, Ack, &ack(&w.a_earlier)),
            &both,
            Expect::Refused(scope, &["scope_mismatch"], "same run"),
        ),
        (
            "checkpoint_of_another_run",
            Checkpoint,
            with(Checkpoint, Chk, &chk(&w.b)),
            &both_chk,
            Expect::Refused(scope, &["scope_mismatch"], "(another run)"),
        ),
        (
            "state_of_another_data_dir",
            Rehydrate,
            with(Rehydrate, State, &st(&w.foreign)),
            &[State],
            foreign,
        ),
        (
            "ack_of_another_data_dir",
            Advance,
            with(Advance, Ack, &ack(&w.foreign)),
            &[Ack],
            foreign,
        ),
        (
            "ack_alone_of_another_data_dir",
            AckAlone,
            with(AckAlone, Ack, &ack(&w.foreign)),
            &[Ack],
            foreign,
        ),
        (
            "checkpoint_of_another_data_dir",
            Checkpoint,
            with(Checkpoint, Chk, &chk(&w.foreign)),
            &[Chk],
            foreign,
        ),
    ];
    for (name, template, tokens, fields, expect) in cases {
        check(name, template, &tokens, fields, expect);
    }
    // The scope mismatch names both runs by the labels their responses show.
    let mixed = with(Advance, Ack, &ack(&w.b));
    let Verdict::Refused(e) = judge(w, Advance, &mixed, &both).unwrap() else {
        panic!("a mixed pair was accepted");
    };
    assert!(
        e.message.contains(&w.a.run.label) && e.message.contains(&w.b.run.label),
        "{e:?}"
    );
}

proptest! {
    #![proptest_config(ops::config(1))]

    /// Random sequences of mutations in a random field of a random call: never anything but
    /// "tolerated" or a precise refusal that writes nothing; a single harmless edit is always
    /// tolerated.
    /// lock: L-TOKEN-ERRORS, L-ERR-SELF-CORRECTING
    #[test]
    fn random_mutation_sequences_are_tolerated_or_refused_precisely(
        template in 0usize..4,
        field in 0usize..2,
        mutations in prop::collection::vec(mutation_strategy(), 1..4),
    ) {
        let w = world();
        let template = Template::ALL[template];
        let fields = template.fields();
        let field = fields[field % fields.len()];
        let clean = Tokens::of(template, &w.a);
        let other = w.b.state_token.clone();
        let mut value = clean.get(field).to_owned();
        for m in &mutations {
            value = m.apply(&value, &other);
        }
        let mut mangled = clean.clone();
        mangled.set(field, value.clone());
        let verdict = judge(w, template, &mangled, &[field])
            .map_err(|e| TestCaseError::fail(format!("{mutations:?} -> {value:?}: {e}")))?;
        if mutations.len() == 1 && harmless(mutations[0]) {
            prop_assert_eq!(verdict, Verdict::Tolerated, "{:?} -> {:?}", mutations, value);
        }
    }

    /// Line wrapping anywhere plus one wrapping or trailing punctuation is still tolerated.
    /// lock: L-TOKEN-FORMAT
    #[test]
    fn wrapped_lines_inside_quotes_or_fences_are_tolerated(
        template in 0usize..4,
        field in 0usize..2,
        breaks in prop::collection::vec((any::<u16>(), prop_oneof![Just(Space::Space), Just(Space::Newline), Just(Space::CrLf), Just(Space::ZeroWidth)]), 0..4),
        outer in mutation_strategy().prop_filter("harmless wrapping", |m| harmless(*m) && matches!(m, Mutation::Wrap(_) | Mutation::Trailing(_))),
    ) {
        let w = world();
        let template = Template::ALL[template];
        let fields = template.fields();
        let field = fields[field % fields.len()];
        let clean = Tokens::of(template, &w.a);
        let mut value = clean.get(field).to_owned();
        for (at, space) in &breaks {
            value = Mutation::Insert(*at, *space).apply(&value, "");
        }
        value = outer.apply(&value, "");
        let mut mangled = clean.clone();
        mangled.set(field, value.clone());
        let verdict = judge(w, template, &mangled, &[field])
            .map_err(|e| TestCaseError::fail(format!("{value:?}: {e}")))?;
        prop_assert_eq!(verdict, Verdict::Tolerated, "{:?}", value);
    }
}
