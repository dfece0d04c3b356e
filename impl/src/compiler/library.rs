//! The other workflows a compile may draw on: the routines a `wr.templates.routine.<name>` call
//! expands, and the workflow ids parallel delegations name.
//!
//! The library is an input of the pure compiler like the source itself (the compiler reads no
//! files): the caller (the catalog, `workrail validate`) builds it from the workflow sources, in
//! precedence order. An expansion copies the routine's steps into the snapshot, so the routine's
//! text is pinned with the workflow's hash and a later edit of the routine is a drift of every
//! workflow that expands it.

use serde_json::Value;
use workrail_spec::ids::{IdStatus, WorkflowId};

use super::ids::normalize_segment;

/// One workflow of the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryEntry {
    pub workflow_id: WorkflowId,
    /// From the bundled source (bundled routines answer first).
    pub bundled: bool,
    /// The source document (kept only for routines: the only entries expanded).
    pub source: Option<Value>,
}

/// The workflows of the sources, each id once (the first definition in precedence order wins,
/// as in the catalog).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowLibrary {
    entries: Vec<LibraryEntry>,
}

impl WorkflowLibrary {
    /// Builds the library from documents in precedence order: `(from the bundled source, text)`.
    /// Documents that are not JSON objects with a valid id, or whose id the source may not
    /// define (`wr.*` outside the bundled source, anything else inside it), are left out: they
    /// never load, so nothing may expand them.
    pub fn from_documents<'a>(documents: impl IntoIterator<Item = (bool, &'a str)>) -> Self {
        let mut library = Self::default();
        for (bundled, text) in documents {
            let Ok(value) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            library.add(bundled, value);
        }
        library
    }

    /// Adds one document (ignored when it has no usable id or the id is already taken).
    pub fn add(&mut self, bundled: bool, source: Value) {
        let Some(id) = source
            .get("id")
            .and_then(Value::as_str)
            .and_then(|raw| WorkflowId::parse(raw).ok())
        else {
            return;
        };
        if id.is_reserved() != bundled || self.entries.iter().any(|e| e.workflow_id == id) {
            return;
        }
        let source = workflow_routine_key(id.as_str()).map(|_| source);
        self.entries.push(LibraryEntry {
            workflow_id: id,
            bundled,
            source,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The routine a template asks for by name: bundled routines first, then the others in
    /// precedence order.
    pub fn routine(&self, name: &str) -> Option<&LibraryEntry> {
        let key = routine_key(name);
        let matching = |e: &&LibraryEntry| {
            e.source.is_some() && workflow_routine_key(e.workflow_id.as_str()) == Some(key.clone())
        };
        self.entries
            .iter()
            .filter(|e| e.bundled)
            .find(matching)
            .or_else(|| self.entries.iter().filter(|e| !e.bundled).find(matching))
    }

    /// The id a delegation's `workflowId` reaches: the id itself when a source defines it, else
    /// for a routine id (`wr.routine-x`, `routine-x`) the routine that answers its name.
    pub fn resolve_workflow(&self, raw: &str) -> Option<&WorkflowId> {
        if let Some(entry) = self.entries.iter().find(|e| e.workflow_id.as_str() == raw) {
            return Some(&entry.workflow_id);
        }
        let key = workflow_routine_key(raw)?;
        self.routine(&key).map(|e| &e.workflow_id)
    }

    /// The entry of a workflow id the library holds.
    pub fn entry(&self, workflow_id: &str) -> Option<&LibraryEntry> {
        self.entries
            .iter()
            .find(|e| e.workflow_id.as_str() == workflow_id)
    }

    /// The routine template ids the library answers, sorted (for "use one of" suggestions).
    pub fn routine_template_ids(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.source.is_some())
            .filter_map(|e| routine_template_id(e.workflow_id.as_str()))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The comparison key of a routine name (the legacy-id normalization, so a hyphen and an
/// underscore are the same).
pub fn routine_key(name: &str) -> String {
    normalize_segment(name)
}

/// The routine key of a workflow id, if the id names a routine: `<ns>.routine-<name>`,
/// `<ns>.routine_<name>` or a legacy `routine-<name>`.
pub fn workflow_routine_key(workflow_id: &str) -> Option<String> {
    let name = workflow_id
        .split_once('.')
        .map_or(workflow_id, |(_, name)| name);
    normalize_segment(name)
        .strip_prefix("routine_")
        .filter(|rest| !rest.is_empty())
        .map(str::to_owned)
}

/// The template id that expands a routine workflow.
pub fn routine_template_id(workflow_id: &str) -> Option<String> {
    let name = match WorkflowId::parse(workflow_id) {
        Ok(id) if id.id_status() == IdStatus::Legacy => workflow_id,
        _ => workflow_id.split_once('.').map_or(workflow_id, |(_, n)| n),
    };
    let rest = name
        .strip_prefix("routine-")
        .or_else(|| name.strip_prefix("routine_"))?;
    (!rest.is_empty()).then(|| {
        format!(
            "{}{rest}",
            crate::builtins::routines::ROUTINE_TEMPLATE_PREFIX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str) -> String {
        serde_json::json!({"id": id, "name": "n", "description": "d", "steps": []}).to_string()
    }

    #[test]
    fn routine_names_match_across_the_namespace_rename() {
        assert_eq!(
            workflow_routine_key("wr.routine-design-review").as_deref(),
            Some("design_review")
        );
        assert_eq!(
            workflow_routine_key("project.routine_design_review").as_deref(),
            Some("design_review")
        );
        assert_eq!(
            workflow_routine_key("routine-design-review").as_deref(),
            Some("design_review")
        );
        assert_eq!(workflow_routine_key("project.design_review"), None);
        assert_eq!(workflow_routine_key("wr.routine-"), None);
        assert_eq!(
            routine_template_id("project.routine_ideation").as_deref(),
            Some("wr.templates.routine.ideation")
        );
    }

    #[test]
    fn bundled_routines_answer_first_and_sources_keep_their_namespace_rules() {
        let (bundled, project, user, stray) = (
            doc("wr.routine-review"),
            doc("project.routine_review"),
            doc("user.routine-review"),
            doc("wr.routine-other"),
        );
        let library = WorkflowLibrary::from_documents([
            (false, project.as_str()),
            (false, user.as_str()),
            // A `wr.*` id outside the bundled source never loads: it is not in the library.
            (false, stray.as_str()),
            (true, bundled.as_str()),
            (false, "not json"),
        ]);
        let hit = library.routine("review").map(|e| e.workflow_id.as_str());
        assert_eq!(hit, Some("wr.routine-review"));
        assert!(library.routine("other").is_none());
        assert_eq!(
            library
                .resolve_workflow("wr.routine-review")
                .map(WorkflowId::as_str),
            Some("wr.routine-review")
        );
        let without_bundled =
            WorkflowLibrary::from_documents([(false, project.as_str()), (false, user.as_str())]);
        assert_eq!(
            without_bundled
                .resolve_workflow("wr.routine-review")
                .map(WorkflowId::as_str),
            Some("project.routine_review")
        );
        assert_eq!(
            without_bundled.routine_template_ids(),
            vec!["wr.templates.routine.review".to_owned()]
        );
    }
}
