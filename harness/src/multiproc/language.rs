//! The storm clients' runs of a workflow in the WorkRail 3.x language
//! ([`fixture::LANGUAGE_JSON`], decision D139), mixed into the kill storm (and so into the gc
//! storm and the database outage, which use its clients).
//!
//! The workflow is written into the lab's workflow directory as 3.x files spell it (a legacy
//! dot-free id, `version`, a step `runCondition`, a `forEach` loop with `itemVar` and `indexVar`,
//! `validationCriteria`). A client starts it with `context: {items, flag}` (0 to 4 distinct
//! items, one more than the loop's `maxIterations`; the loop's flag set three times in four),
//! and acknowledges each pending step the way an agent that reads only the response does:
//!
//! - the notes contain every text the step's `## Notes checks` section says they must contain;
//! - a step that asks for a context key (``send `context.<key>` as `a` or `b` ``) gets one of the
//!   offered values in the ack's `context`.
//!
//! What the client expects next follows the workflow's control flow over what it sent and what
//! the run started with (the survey's `mode`; the deep dive only for `slow`; one review per item
//! while the flag holds, at most `maxIterations`; the summary; completion). Any other answer, a
//! blocked ack included (the client sent what the step asked for), and a first pending step that
//! is not the survey naming the run's items, counts in `language_mismatches`, a failure like
//! every other count. (The ledger also counts a blocked answer in `lost_events`: it expects every
//! answered attempt to have advanced to the node its response names.) Kills, replays and forks go through the same paths as the plain runs, so
//! the oracle's lost events, replay mismatches and stale tokens cover these runs too.

use serde_json::{Map, Value, json};

use super::{Lab, Resp, Rng, Slot};
use crate::fixture;

/// The items a run may loop over (a run takes 0 to 4 of them, distinct, in random order).
const AREAS: [&str; 5] = ["api", "ui", "db", "docs", "ops"];
/// The fixture loop's `maxIterations`.
const MAX_ITERATIONS: usize = 3;

/// What a client started a run of the language workflow with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LangRun {
    items: Vec<String>,
    flag: bool,
    /// The `mode` every survey acknowledgement of this run sends, forks included: the run's
    /// context is the run's (locks §18.2), so a fork that sent `slow` after a branch had passed
    /// the deep dive with `fast` would make that branch run it later, out of order (decision
    /// D154), which the in-process model comparison checks; these clients judge durability.
    mode: &'static str,
}

/// A pending step as the client sees it, or completion.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    Step { id: String, title: String },
    Complete,
}

impl Next {
    fn step(id: &str, title: &str) -> Self {
        Self::Step {
            id: id.to_owned(),
            title: title.to_owned(),
        }
    }
}

impl LangRun {
    fn random(rng: &mut Rng) -> Self {
        let mut pool: Vec<&str> = AREAS.to_vec();
        let n = rng.below(AREAS.len() as u64) as usize;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            let i = rng.below(pool.len() as u64) as usize;
            items.push(pool.remove(i).to_owned());
        }
        Self {
            items,
            flag: rng.below(4) != 0,
            mode: if rng.below(2) == 0 { "fast" } else { "slow" },
        }
    }

    /// What the walk reaches at the loop's iteration `i` (0-based): the review of item `i`, or,
    /// past the items, the iteration bound or a false flag, the summary.
    fn loop_at(&self, i: usize) -> Next {
        match self.items.get(i) {
            Some(item) if self.flag && i < MAX_ITERATIONS => {
                Next::step("review", &format!("Review {item}"))
            }
            _ => Next::step("summary", "Summary"),
        }
    }

    /// The pending step after acknowledging `pending` with `mode` in the context.
    fn after(&self, pending: &Value, mode: Option<&str>) -> Result<Next, String> {
        let title = pending["title"].as_str().unwrap_or_default();
        match pending["stepId"].as_str().unwrap_or_default() {
            "survey" if mode == Some("slow") => Ok(Next::step("deep-dive", "Deep dive")),
            "survey" | "deep-dive" => Ok(self.loop_at(0)),
            "review" => self
                .items
                .iter()
                .position(|item| title == format!("Review {item}"))
                .map(|i| self.loop_at(i + 1))
                .ok_or_else(|| {
                    format!(
                        "a review of none of the run's items {:?}: {title:?}",
                        self.items
                    )
                }),
            "summary" => Ok(Next::Complete),
            other => Err(format!(
                "a pending step the workflow does not have: {other:?}"
            )),
        }
    }
}

/// The pending step a response shows, or an error for a blocked answer.
fn observed(resp: &Resp) -> Result<Next, String> {
    let structured = &resp.result["structuredContent"];
    if structured["kind"] == json!("blocked") {
        return Err(format!("blocked: {}", structured["blockers"]));
    }
    if resp.complete {
        return Ok(Next::Complete);
    }
    let pending = &structured["pending"];
    Ok(Next::step(
        pending["stepId"].as_str().unwrap_or_default(),
        pending["title"].as_str().unwrap_or_default(),
    ))
}

/// The texts the step's `## Notes checks` section says the notes must contain.
fn required_texts(prompt: &str) -> Vec<String> {
    let Some((_, checks)) = prompt.split_once("## Notes checks\n") else {
        return Vec::new();
    };
    checks
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("- the notes contain \""))
        .filter_map(|rest| rest.split_once('"').map(|(text, _)| text.to_owned()))
        .collect()
}

/// The context key the prompt asks for (``send `context.<key>` as `a` or `b` ``) and the values
/// it offers.
fn asked_context(prompt: &str) -> Option<(String, Vec<String>)> {
    let (_, rest) = prompt.split_once("send `context.")?;
    let (key, rest) = rest.split_once('`')?;
    let rest = rest.strip_prefix(" as `")?;
    let offered = rest.split_once("`.").map_or(rest, |(offered, _)| offered);
    let values: Vec<String> = offered.split("` or `").map(str::to_owned).collect();
    Some((key.to_owned(), values))
}

impl Lab {
    /// A storm client's new run: the language workflow for its first run when `client` is
    /// odd, and for every second later run on average; else the plain workflow.
    pub(super) fn start_storm_run(
        &self,
        client: usize,
        slot: &Slot,
        first: bool,
        rng: &mut Rng,
    ) -> Option<Resp> {
        let language = if first {
            client % 2 == 1
        } else {
            rng.below(2) == 0
        };
        if !language {
            return self.start(client, slot, fixture::LINEAR_ID);
        }
        let run = LangRun::random(rng);
        let args = json!({
            "workflowId": fixture::LANGUAGE_ID,
            "context": {"items": run.items, "flag": run.flag},
        });
        let result = self.call(slot, "start_workflow", &args, None)?;
        let resp = self.saw(client, result)?;
        let pending = &resp.result["structuredContent"]["pending"];
        let prompt = pending["prompt"].as_str().unwrap_or_default();
        let mut book = self.book();
        book.report.language_runs += 1;
        if pending["stepId"] != json!("survey")
            || !run.items.iter().all(|item| prompt.contains(item.as_str()))
        {
            book.report.language_mismatches += 1;
            book.report.sample(format!(
                "a run of {} started with {run:?} shows {pending}, not the survey of its items",
                fixture::LANGUAGE_ID
            ));
        }
        book.lang_runs.insert(resp.session.clone(), run);
        drop(book);
        Some(resp)
    }

    /// Acknowledges the pending step of `at`, a node of a language run, with what the step
    /// asks for, and checks that the answer is the step the workflow goes on with.
    pub(super) fn ack_language(
        &self,
        client: usize,
        slot: &Slot,
        at: &Resp,
        run: &LangRun,
        ack_token: String,
        rng: &mut Rng,
    ) -> Option<Resp> {
        let pending = at.result["structuredContent"]["pending"].clone();
        let prompt = pending["prompt"].as_str().unwrap_or_default();
        let step = pending["stepId"].as_str().unwrap_or_default();
        let mut notes = format!("Client {client} finished {step}.");
        for text in required_texts(prompt) {
            notes.push(' ');
            notes.push_str(&text);
        }
        let mut context = Map::new();
        if let Some((key, values)) = asked_context(prompt) {
            let value = if key == "mode" && values.iter().any(|v| v == run.mode) {
                Some(run.mode.to_owned())
            } else {
                rng.pick(&values).cloned()
            };
            if let Some(value) = value {
                context.insert(key, json!(value));
            }
        }
        let mode = context
            .get("mode")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut args = json!({
            "ackToken": ack_token,
            "output": {"notesMarkdown": notes},
        });
        if !context.is_empty() {
            args["context"] = Value::Object(context);
        }
        if rng.below(2) == 0 {
            args["stateToken"] = json!(at.state_token);
        }
        let next = self.send_ack(client, slot, &args)?;
        let expected = run.after(&pending, mode.as_deref());
        let got = observed(&next);
        let mut book = self.book();
        book.report.language_acks += 1;
        if expected.is_err() || got != expected {
            book.report.language_mismatches += 1;
            book.report.sample(format!(
                "a language run ({run:?}) acknowledged at {pending} with {args}: expected {expected:?}, answered {got:?}"
            ));
        }
        drop(book);
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_reads_what_a_step_asks_for() {
        let prompt = "Review api (item 0).\n\n## Notes checks\nWorkRail checks output.notesMarkdown when you acknowledge this step (exact text, case-sensitive):\n- the notes contain \"Recap\"\n- the notes contain \"did\" (when mode equals \"slow\")\n\n## Functions\n- the notes contain \"not a check\"";
        assert_eq!(required_texts(prompt), ["Recap", "did"]);
        assert_eq!(required_texts("No checks."), Vec::<String>::new());
        let survey = "Survey the work on [\"api\"]. Then choose how to go on: send `context.mode` as `fast` or `slow`.";
        assert_eq!(
            asked_context(survey),
            Some((
                "mode".to_owned(),
                vec!["fast".to_owned(), "slow".to_owned()]
            ))
        );
        assert_eq!(asked_context("Review api."), None);
    }

    #[test]
    fn the_client_expects_the_workflow_s_control_flow() {
        let run = LangRun {
            items: vec!["api".into(), "ui".into(), "db".into(), "docs".into()],
            flag: true,
            mode: "slow",
        };
        let at = |id: &str, title: &str| json!({"stepId": id, "title": title});
        assert_eq!(
            run.after(&at("survey", "Survey"), Some("slow")),
            Ok(Next::step("deep-dive", "Deep dive"))
        );
        assert_eq!(
            run.after(&at("survey", "Survey"), Some("fast")),
            Ok(Next::step("review", "Review api"))
        );
        assert_eq!(
            run.after(&at("review", "Review ui"), None),
            Ok(Next::step("review", "Review db"))
        );
        // The loop's bound: three of the four items.
        assert_eq!(
            run.after(&at("review", "Review db"), None),
            Ok(Next::step("summary", "Summary"))
        );
        assert_eq!(
            run.after(&at("summary", "Summary"), None),
            Ok(Next::Complete)
        );
        assert!(run.after(&at("review", "Review ops"), None).is_err());
        let off = LangRun {
            items: vec!["api".into()],
            flag: false,
            mode: "fast",
        };
        assert_eq!(
            off.after(&at("deep-dive", "Deep dive"), None),
            Ok(Next::step("summary", "Summary"))
        );
    }
}
