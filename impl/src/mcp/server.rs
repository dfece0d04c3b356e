//! The rmcp stdio server: `tools/list` serves [`super::tools::tool_defs`], `tools/call` runs
//! [`super::dispatch::call_tool`] on the runtime's thread, one call at a time (decision D67);
//! over HTTP ([`super::http`]) each call runs on a blocking thread, so clients are served at once.
//! Pipes are read and written from that thread too (D70); other stdio goes through tokio's
//! blocking threads. stdout carries only MCP
//! messages; logs go to stderr. The server returns when the client closes stdin.

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData as McpError, ServerHandler};

use super::backend::ToolBackend;
use super::dispatch;
use super::tools::enabled_tool_defs;

/// Short, agent-facing server instructions (the tool descriptions carry the details).
pub const INSTRUCTIONS: &str = "WorkRail runs workflows one step at a time and keeps the durable record. Typical loop: list_workflows -> (inspect_workflow) -> start_workflow -> perform pending.prompt -> continue_workflow with the returned stateToken + ackToken (and output.notesMarkdown) -> repeat until isComplete is true. Tokens are opaque: round-trip them unchanged. Call continue_workflow without ackToken to recover the pending step after a restart or rewind; reuse an older stateToken to fork. In a new chat without a stateToken, resume_session (when listed) finds the run to continue. Errors are tool results with isError=true and an error envelope: follow its suggestion.";

/// Where `tools/call` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallThread {
    /// On the runtime's only thread, one call at a time (stdio, decision D67).
    Runtime,
    /// On tokio's blocking pool, so one client's call never waits for another's (HTTP).
    BlockingPool,
}

/// The MCP server over a [`ToolBackend`].
pub struct WorkrailServer<B: ToolBackend> {
    backend: Arc<B>,
    tools: Arc<Vec<Tool>>,
    calls: CallThread,
}

impl<B: ToolBackend> std::fmt::Debug for WorkrailServer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkrailServer")
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl<B: ToolBackend> Clone for WorkrailServer<B> {
    fn clone(&self) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            tools: Arc::clone(&self.tools),
            calls: self.calls,
        }
    }
}

impl<B: ToolBackend> WorkrailServer<B> {
    pub fn new(backend: Arc<B>) -> Self {
        // Flagged tools that are switched off are not listed (and refused by dispatch).
        let tools = enabled_tool_defs(&backend.features())
            .iter()
            .map(|d| d.to_rmcp())
            .collect();
        Self {
            backend,
            tools: Arc::new(tools),
            calls: CallThread::Runtime,
        }
    }

    /// The same server, running its tool calls on `calls`.
    pub fn with_calls_on(mut self, calls: CallThread) -> Self {
        self.calls = calls;
        self
    }

    /// The tool definitions `tools/list` returns (the tools the feature flags switch on).
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}

impl<B: ToolBackend> ServerHandler for WorkrailServer<B> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("workrail", env!("CARGO_PKG_VERSION")).with_title("WorkRail"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let arguments = request.arguments.map(serde_json::Value::Object);
        tracing::debug!(tool = %name, "tools/call");
        let outcome = match self.calls {
            // On this (the runtime's only) thread, one call at a time (decision D67): handing each
            // call to a pool thread and back cost two thread wake-ups, a third of a rehydrate.
            CallThread::Runtime => dispatch::call_tool(self.backend.as_ref(), &name, arguments),
            CallThread::BlockingPool => {
                let backend = Arc::clone(&self.backend);
                let tool = name.clone();
                tokio::task::spawn_blocking(move || {
                    dispatch::call_tool(backend.as_ref(), &tool, arguments)
                })
                .await
                .map_err(|e| {
                    McpError::internal_error(format!("the tool call did not finish: {e}"), None)
                })?
            }
        };
        if outcome.is_error {
            tracing::info!(tool = %name, "tool returned an error envelope");
        }
        Ok(CallToolResponse::from(outcome.into_call_result()))
    }
}

/// Serves MCP over this process's stdin/stdout until the client closes stdin. Every line gets an
/// answer: what rmcp cannot parse is answered by [`super::transport`].
pub async fn serve_stdio<B: ToolBackend>(backend: Arc<B>) -> Result<(), String> {
    // Pipes (what MCP clients give a server) are read and written from this thread when ready
    // (decision D70); a terminal or a file goes through tokio's blocking stdio threads.
    let guarded = match stdio_pipes() {
        Some((input, output)) => super::transport::guard(input, output),
        None => super::transport::guard(tokio::io::stdin(), tokio::io::stdout()),
    };
    let flushed = guarded.flushed;
    let result = serve_on(backend, (guarded.reader, guarded.writer)).await;
    // Every answer reaches stdout before the process exits (bounded: a client that stopped
    // reading must not keep it alive).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), flushed).await;
    result
}

async fn serve_on<B: ToolBackend>(
    backend: Arc<B>,
    transport: (tokio::io::DuplexStream, tokio::io::DuplexStream),
) -> Result<(), String> {
    let server = WorkrailServer::new(backend);
    let running = match server.serve(transport).await {
        Ok(running) => running,
        // stdin closed before (or during) the handshake: nothing to serve, a clean exit.
        Err(ServerInitializeError::ConnectionClosed(context)) => {
            tracing::info!(%context, "stdin closed before the MCP handshake completed");
            return Ok(());
        }
        Err(ServerInitializeError::Cancelled) => return Ok(()),
        Err(e) => return Err(format!("the MCP handshake failed: {e}")),
    };
    match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "MCP session ended");
            Ok(())
        }
        Err(e) => Err(format!("the MCP service task failed: {e}")),
    }
}

/// Builds a Tokio runtime and serves stdio until EOF (the `workrail mcp` entry point).
pub fn run_stdio<B: ToolBackend>(backend: Arc<B>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(serve_stdio(backend));
    // Do not wait for a blocked stdin reader thread at exit.
    runtime.shutdown_background();
    result
}

/// This process's stdin and stdout as non-blocking pipes, when both are pipes.
#[cfg(unix)]
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned().ok()?);
    let output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned().ok()?);
    // Both or neither: converting one makes it non-blocking, which the blocking fallback for
    // the other could not share.
    let is_pipe = |f: &std::fs::File| f.metadata().is_ok_and(|m| m.file_type().is_fifo());
    if !is_pipe(&input) || !is_pipe(&output) {
        return None;
    }
    let input = tokio::net::unix::pipe::Receiver::from_file(input).ok()?;
    let output = tokio::net::unix::pipe::Sender::from_file(output).ok()?;
    Some((input, output))
}

#[cfg(not(unix))]
fn stdio_pipes() -> Option<(tokio::io::Stdin, tokio::io::Stdout)> {
    None
}
