//! `workrail mcp` whose store could not be opened at start (decision D127): the server starts
//! anyway and opens its backend on the next tool call, until that works.
//!
//! An MCP client starts its servers when it starts and rarely restarts one. A PostgreSQL store
//! that is unreachable at that moment (a laptop offline, a VPN not up yet, the database
//! restarting) must not leave the chat without WorkRail until the client is restarted: each
//! tool call tries to open the backend again and, while that fails, answers a retryable
//! `STORE_IO_ERROR` that says nothing was recorded and why. Once open, the backend serves every
//! call and is never opened again. Attempts are serialized, so concurrent calls never open two
//! backends.

use std::sync::{Arc, Mutex, OnceLock};

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartSessionInput, StartWorkflowInput,
};

use super::backend::ToolBackend;
use crate::features::Features;

/// How long a client should wait before retrying a call the unopened store refused.
pub const RETRY_AFTER_MS: u64 = 2000;

type Opener<B> = Box<dyn Fn() -> Result<B, ErrorEnvelope> + Send + Sync>;

/// A [`ToolBackend`] opened on first use: `open` runs on each call until it succeeds.
pub struct OpeningBackend<B: ToolBackend> {
    open: Opener<B>,
    opened: OnceLock<Arc<B>>,
    /// Held while an attempt runs, so concurrent calls wait for it instead of racing it.
    attempt: Mutex<()>,
    /// The flags of the data directory, for listing tools before the backend is open (they are
    /// files in the data directory, not in the store).
    features: Features,
    /// Where the store lives, for the error text (never holds a password).
    store: String,
    /// Renders an execution response as text (the open backend renders its own).
    render: fn(&ExecutionOutput) -> String,
}

impl<B: ToolBackend> std::fmt::Debug for OpeningBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpeningBackend")
            .field("store", &self.store)
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

impl<B: ToolBackend> OpeningBackend<B> {
    /// A backend that opens with `open` on its first call. `features` lists the tools until it
    /// is open; `store` names the store in errors; `render` renders a response should one ever
    /// be rendered before the backend is open.
    pub fn new(
        open: impl Fn() -> Result<B, ErrorEnvelope> + Send + Sync + 'static,
        features: Features,
        store: String,
        render: fn(&ExecutionOutput) -> String,
    ) -> Self {
        Self {
            open: Box::new(open),
            opened: OnceLock::new(),
            attempt: Mutex::new(()),
            features,
            store,
            render,
        }
    }

    /// Whether the backend is open.
    pub fn is_open(&self) -> bool {
        self.opened.get().is_some()
    }

    /// The open backend, opening it now if needed; the refusal a client can act on otherwise.
    fn backend(&self) -> Result<&Arc<B>, ErrorEnvelope> {
        if let Some(opened) = self.opened.get() {
            return Ok(opened);
        }
        let _attempt = self.attempt.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(opened) = self.opened.get() {
            return Ok(opened);
        }
        match (self.open)() {
            Ok(backend) => {
                tracing::info!(store = %self.store, "the store is open; serving every call");
                Ok(self.opened.get_or_init(|| Arc::new(backend)))
            }
            Err(cause) => {
                tracing::warn!(store = %self.store, "the store is still unavailable: {}", cause.message);
                Err(unavailable(&cause))
            }
        }
    }
}

/// The retryable refusal of a call made while the store cannot be opened.
fn unavailable(cause: &ErrorEnvelope) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!(
            "WorkRail cannot open its store yet, so this call did nothing and recorded nothing: {}",
            cause.message
        ),
        format!(
            "Retry the same call with the same arguments in about {} seconds: this server tries to open the store again on every call, with no restart. If it keeps failing, tell the user: {}",
            RETRY_AFTER_MS / 1000,
            cause.suggestion
        ),
        Retry::RetryableAfterMs {
            after_ms: RETRY_AFTER_MS,
        },
    )
}

impl<B: ToolBackend> ToolBackend for OpeningBackend<B> {
    fn features(&self) -> Features {
        match self.opened.get() {
            Some(opened) => opened.features(),
            None => self.features.clone(),
        }
    }
    fn list_workflows(
        &self,
        input: ListWorkflowsInput,
    ) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        self.backend()?.list_workflows(input)
    }
    fn inspect_workflow(
        &self,
        input: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
        self.backend()?.inspect_workflow(input)
    }
    fn start_workflow(&self, input: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.backend()?.start_workflow(input)
    }
    fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.backend()?.continue_workflow(input)
    }
    fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.backend()?.checkpoint_workflow(input)
    }
    fn resume_session(
        &self,
        input: ResumeSessionInput,
    ) -> Result<ResumeSessionOutput, ErrorEnvelope> {
        self.backend()?.resume_session(input)
    }
    fn start_session(&self, input: StartSessionInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.backend()?.start_session(input)
    }
    fn render_execution(&self, output: &ExecutionOutput) -> String {
        // Only a call the open backend answered has an output to render.
        match self.opened.get() {
            Some(opened) => opened.render_execution(output),
            None => (self.render)(output),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Answers `list_workflows` with nothing and refuses the rest: enough to see which backend
    /// answered.
    struct Fake;

    fn refused() -> ErrorEnvelope {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            "fake",
            "fake",
            Retry::NotRetryable,
        )
    }

    impl ToolBackend for Fake {
        fn list_workflows(
            &self,
            _: ListWorkflowsInput,
        ) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
            Ok(ListWorkflowsOutput {
                workflows: vec![],
                problems: vec![],
            })
        }
        fn inspect_workflow(
            &self,
            _: InspectWorkflowInput,
        ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn start_workflow(&self, _: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn continue_workflow(
            &self,
            _: ContinueWorkflowInput,
        ) -> Result<ExecutionOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn checkpoint_workflow(
            &self,
            _: CheckpointWorkflowInput,
        ) -> Result<ExecutionOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn resume_session(
            &self,
            _: ResumeSessionInput,
        ) -> Result<ResumeSessionOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn start_session(&self, _: StartSessionInput) -> Result<ExecutionOutput, ErrorEnvelope> {
            Err(refused())
        }
        fn render_execution(&self, _: &ExecutionOutput) -> String {
            String::new()
        }
    }

    fn unreachable() -> ErrorEnvelope {
        ErrorEnvelope::new(
            ErrorCode::StoreIoError,
            "cannot open PostgreSQL: connection refused",
            "Start PostgreSQL.",
            Retry::NotRetryable,
        )
    }

    /// Opens after `failures` failed attempts, counting every attempt.
    fn opening(failures: usize, attempts: Arc<AtomicUsize>) -> OpeningBackend<Fake> {
        OpeningBackend::new(
            move || {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                if n < failures {
                    Err(unreachable())
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    Ok(Fake)
                }
            },
            Features::default(),
            "PostgreSQL postgres://db/w (schema workrail)".into(),
            |_| String::new(),
        )
    }

    #[test]
    fn each_call_tries_again_until_the_store_opens_then_never_again() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let backend = opening(2, Arc::clone(&attempts));
        for expected in 1..=2 {
            let err = backend
                .list_workflows(ListWorkflowsInput::default())
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::StoreIoError);
            assert_eq!(
                err.retry,
                Retry::RetryableAfterMs {
                    after_ms: RETRY_AFTER_MS
                }
            );
            assert!(err.message.contains("recorded nothing"), "{}", err.message);
            assert!(
                err.message.contains("connection refused"),
                "{}",
                err.message
            );
            assert!(
                err.suggestion.contains("Start PostgreSQL."),
                "{}",
                err.suggestion
            );
            assert_eq!(attempts.load(Ordering::SeqCst), expected);
            assert!(!backend.is_open());
        }
        assert!(
            backend
                .list_workflows(ListWorkflowsInput::default())
                .is_ok()
        );
        assert!(backend.is_open());
        // Open: calls go to the backend (its own refusals included), with no new attempt.
        let err = backend
            .start_workflow(StartWorkflowInput {
                workflow_id: "wr.coding_task".into(),
                context: None,
                preferences: vec![],
                preset: None,
            })
            .unwrap_err();
        assert_eq!(err.message, "fake");
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn concurrent_calls_open_one_backend() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let backend = opening(0, Arc::clone(&attempts));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    assert!(
                        backend
                            .list_workflows(ListWorkflowsInput::default())
                            .is_ok()
                    );
                });
            }
        });
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }
}
