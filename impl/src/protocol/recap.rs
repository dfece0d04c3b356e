//! Bounded recaps for rehydration (contract "Resumption vs rewind behavior", "Recap budgets and
//! truncation").
//!
//! On a tip node: the recap notes along its branch, most recent kept. On a node that already has
//! children (a rewind): the existing branches, then a recap of the preferred branch downstream,
//! and the reminder that advancing forks. Byte-budgeted: most recent entries are kept, older ones
//! are dropped and counted, and a single over-long entry is cut with the canonical marker.

use std::borrow::Cow;

use workrail_spec::budget::truncate_with_marker;
use workrail_spec::closed::RecapTruncationPolicy;
use workrail_spec::ids::{NodeId, RunId};
use workrail_spec::tools::RecapView;

use super::facts::Facts;
use crate::projections::RunView;
use crate::store::StoreError;

/// Budget of a recap's text, in UTF-8 bytes.
pub const RECAP_MAX_BYTES: usize = 4096;
/// Budget of one branch summary line.
const BRANCH_SNIPPET_MAX_BYTES: usize = 256;
/// Budget of a rewind's branch list, a quarter of the recap: the preferred branch's notes come
/// before the other branches' summaries (locks §"Non-tip node": downstream recap first, then
/// other branch summaries), so many branches must not crowd them out (D218).
const BRANCH_LIST_MAX_BYTES: usize = RECAP_MAX_BYTES / 4;

/// The explicit marker in front of a truncated recap: that it was cut, how many entries were
/// omitted, and the policy (contract "Recap budgets and truncation").
fn truncation_header(omitted: u32, cut: bool) -> String {
    match (omitted, cut) {
        (0, false) => String::new(),
        (omitted, false) => format!(
            "[recap truncated: policy kept_most_recent; {omitted} earlier entries omitted]\n"
        ),
        (omitted, true) => format!(
            "[recap truncated: policy cut_newest_entry; {omitted} earlier entries omitted]\n"
        ),
    }
}

fn policy(omitted: u32, cut: bool) -> Option<RecapTruncationPolicy> {
    match (omitted, cut) {
        (_, true) => Some(RecapTruncationPolicy::CutNewestEntry),
        (0, false) => None,
        (_, false) => Some(RecapTruncationPolicy::KeptMostRecent),
    }
}

/// One recap entry, `[number] text`: numbered from 1 (the oldest).
#[derive(Clone)]
struct Entry<'n> {
    number: usize,
    text: Cow<'n, str>,
}

impl Entry<'_> {
    /// The UTF-8 length of the formatted entry, without formatting it.
    fn len(&self) -> usize {
        self.number.checked_ilog10().unwrap_or(0) as usize + 1 + 3 + self.text.len()
    }

    fn write_to(&self, out: &mut String) {
        out.push('[');
        out.push_str(itoa::Buffer::new().format(self.number));
        out.push_str("] ");
        out.push_str(&self.text);
    }
}

/// Keeps the most recent entries within `budget`; returns (text, omitted, cut). `newest_first`
/// holds at least the entries the budget can take plus one (or all), `total` counts them all.
/// Only the kept entries are formatted, once, into the text.
fn most_recent_within(
    newest_first: &[Entry<'_>],
    total: usize,
    budget: usize,
) -> (String, u32, bool) {
    let mut kept = 0usize;
    let mut used = 0usize;
    for entry in newest_first {
        let cost = entry.len() + if kept == 0 { 0 } else { 2 };
        if used + cost > budget {
            break;
        }
        used += cost;
        kept += 1;
    }
    let omitted = (total - kept) as u32;
    if kept == 0
        && let Some(last) = newest_first.first()
    {
        // The newest entry alone is too long: keep its beginning, marked.
        let mut whole = String::with_capacity(last.len());
        last.write_to(&mut whole);
        let cut = truncate_with_marker(&whole, budget)
            .map(|t| t.text.into_owned())
            .unwrap_or_default();
        return (cut, omitted.saturating_sub(1), true);
    }
    let mut text = String::with_capacity(used);
    for (i, entry) in newest_first[..kept].iter().rev().enumerate() {
        if i > 0 {
            text.push_str("\n\n");
        }
        entry.write_to(&mut text);
    }
    (text, omitted, false)
}

/// A rewind's list of the node's branches, numbered in the order they were made: the preferred
/// branch always, then the others newest first while the list stays within
/// `budget` bytes, shown in number order, and a closing line counting the older ones left out
/// (D218).
fn branch_list(
    facts: &Facts<'_>,
    view: &RunView,
    run: &RunId,
    children: &[NodeId],
    budget: usize,
) -> Result<BranchList, StoreError> {
    let line = |i: usize, child: &NodeId, preferred: bool| -> Result<String, StoreError> {
        let summary = facts
            .recap_notes(run, child)?
            .map(|notes| snippet(&notes))
            .unwrap_or_else(|| "(no notes)".to_owned());
        Ok(format!(
            "- branch {}{}: {summary}\n",
            i + 1,
            if preferred { " (preferred)" } else { "" }
        ))
    };
    let preferred = view.preferred_tip.as_ref().and_then(|tip| {
        children
            .iter()
            .position(|child| view.is_on_path(child, tip))
    });
    let mut shown: Vec<(usize, String)> = Vec::new();
    let mut used = 0;
    if let Some(i) = preferred {
        let text = line(i, &children[i], true)?;
        used += text.len();
        shown.push((i, text));
    }
    // Room for the closing line is kept while a branch after this one might be left out.
    const CLOSING_ROOM: usize = 64;
    let mut left_out = 0;
    for (i, child) in children.iter().enumerate().rev() {
        if Some(i) == preferred {
            continue;
        }
        if left_out > 0 {
            left_out += 1;
            continue;
        }
        let text = line(i, child, false)?;
        let more_after = i > usize::from(preferred.is_some_and(|p| p < i));
        let room = budget.saturating_sub(if more_after { CLOSING_ROOM } else { 0 });
        if used + text.len() > room {
            left_out += 1;
            continue;
        }
        used += text.len();
        shown.push((i, text));
    }
    shown.sort_by_key(|(i, _)| *i);
    let mut text: String = shown.into_iter().map(|(_, text)| text).collect();
    if left_out > 0 {
        text.push_str(&format!("- {left_out} older branch(es) not listed\n"));
    }
    Ok(BranchList { text, left_out })
}

/// A rewind's branch list and how many branches it leaves out.
struct BranchList {
    text: String,
    left_out: usize,
}

fn snippet(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_with_marker(&one_line, BRANCH_SNIPPET_MAX_BYTES)
        .map(|t| t.text.into_owned())
        .unwrap_or_default()
}

/// Recap entries (step notes), numbered from 1 (the oldest), newest first: `positions` yields
/// where the `total` notes are in the log, newest first, and only as many as `budget` bytes can
/// hold plus one are read (a deep branch costs nothing for the notes that cannot be shown).
fn newest_notes<'n>(
    facts: &Facts<'n>,
    positions: impl Iterator<Item = usize>,
    total: usize,
    budget: usize,
) -> Result<(Vec<Entry<'n>>, usize), StoreError> {
    let mut used = 0usize;
    let mut out = Vec::new();
    for (back, position) in positions.enumerate() {
        let entry = Entry {
            number: total - back,
            text: facts.notes_at(position)?.unwrap_or_default(),
        };
        used += entry.len() + 2;
        out.push(entry);
        if used > budget {
            break;
        }
    }
    Ok((out, total))
}

/// The recap for rehydrating `node`, or `None` when there is nothing to recall. Its notes are
/// read from the log, so it fails when the log cannot be read again (D226).
pub fn recap(
    facts: &Facts<'_>,
    run: &RunId,
    node: &NodeId,
) -> Result<Option<RecapView>, StoreError> {
    let Some(view) = facts.run(run) else {
        return Ok(None);
    };
    let Some(info) = view.dag.nodes.get(node) else {
        return Ok(None);
    };
    if info.children.is_empty() {
        // Only the newest notes the budget can hold are looked up; the rest are counted.
        let (count, notes) = view.noted_notes_upwards(node);
        let (entries, total) = newest_notes(facts, notes, count, RECAP_MAX_BYTES)?;
        if total == 0 {
            return Ok(None);
        }
        // Everything fits: no header. Otherwise the header's own bytes come out of the budget,
        // so the whole text stays within it.
        let (mut body, mut omitted, mut cut) = most_recent_within(&entries, total, RECAP_MAX_BYTES);
        if omitted > 0 || cut {
            // Two bytes of slack: the omitted count may gain a digit in the second pass.
            let reserve = truncation_header(omitted, cut).len() + 2;
            (body, omitted, cut) = most_recent_within(&entries, total, RECAP_MAX_BYTES - reserve);
        }
        let header = truncation_header(omitted, cut);
        return Ok(Some(RecapView {
            text: format!("{header}{body}"),
            truncated: omitted > 0 || cut,
            omitted_entries: omitted,
            policy: policy(omitted, cut),
        }));
    }
    // A rewind: this point already has branches.
    let mut text = format!(
        "This step was already completed {} time(s) from here; advancing again creates a new branch.\n",
        info.children.len()
    );
    // The branch list first gets its guaranteed share; the preferred branch's notes get the
    // rest, and whatever they leave unused lists more branches (D218).
    let guaranteed = branch_list(facts, view, run, &info.children, BRANCH_LIST_MAX_BYTES)?;
    // Only the newest notes the room can hold are looked up; the rest are counted. The lead
    // line and, when something is left out, the truncation header come out of the room first,
    // so the newest entry is never the one the budget cuts.
    const LEAD: &str = "Preferred branch since here:\n";
    let room = RECAP_MAX_BYTES.saturating_sub(text.len() + guaranteed.text.len() + LEAD.len());
    let (count, downstream_notes) = view.noted_notes_on_preferred_branch_below(node);
    let (entries, total) = newest_notes(facts, downstream_notes, count, room)?;
    let (mut body, mut omitted, mut cut) = most_recent_within(&entries, total, room);
    if omitted > 0 || cut {
        // Two bytes of slack: the omitted count may gain a digit in the second pass.
        let reserve = truncation_header(omitted, cut).len() + 2;
        (body, omitted, cut) = most_recent_within(&entries, total, room.saturating_sub(reserve));
    }
    let downstream = if total > 0 {
        format!("{LEAD}{}{body}", truncation_header(omitted, cut))
    } else {
        String::new()
    };
    let list = if guaranteed.left_out > 0 {
        let unused =
            RECAP_MAX_BYTES.saturating_sub(text.len() + guaranteed.text.len() + downstream.len());
        branch_list(
            facts,
            view,
            run,
            &info.children,
            guaranteed.text.len() + unused,
        )?
    } else {
        guaranteed
    };
    text.push_str(&list.text);
    text.push_str(&downstream);
    let text = truncate_with_marker(&text, RECAP_MAX_BYTES)
        .map(|t| t.text.into_owned())
        .unwrap_or_default();
    let cut = cut || text.ends_with(workrail_spec::budget::TRUNCATION_MARKER);
    Ok(Some(RecapView {
        truncated: omitted > 0 || cut,
        text,
        omitted_entries: omitted,
        policy: policy(omitted, cut),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_knows_its_formatted_length() {
        for number in [1, 9, 10, 99, 100, 999, 1000, 123_456, usize::MAX] {
            for text in ["", "did it", "é — ünïcode ✓"] {
                let entry = Entry {
                    number,
                    text: Cow::Borrowed(text),
                };
                let mut formatted = String::new();
                entry.write_to(&mut formatted);
                assert_eq!(formatted, format!("[{number}] {text}"));
                assert_eq!(entry.len(), formatted.len(), "{formatted}");
            }
        }
    }
}
