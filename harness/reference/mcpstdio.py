"""A small MCP client over stdio for WorkRail servers (Python 3 standard library only).

It speaks newline-delimited JSON-RPC 2.0 to one server process and reads WorkRail's execution
responses in either shape a WorkRail server answers in: this project's (`structuredContent`
with `stateToken`/`ackToken`) and the TypeScript reference's (a JSON text body with a
`continueToken`, when started with `WORKRAIL_JSON_RESPONSES=true`). Nothing here knows which
server it talks to beyond what the responses and the tool schemas say.

Used by `langref.py` (the same-answers driver) and `../agent/agent.py` (the responses-only agent).
"""
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading

PROTOCOL_VERSION = "2025-06-18"

# Steps a server inserts before a workflow's own first step. The reference prepends a protocol
# briefing to every run it starts over MCP; it is not part of the workflow, so the drivers
# acknowledge it without counting it as a call of the script.
PROTOCOL_STEPS = frozenset({"wr-system-onboarding"})


class McpError(Exception):
    """The server broke the protocol, died, or did not answer in time."""


class Reply:
    """One `tools/call` result, read the way an agent reads it."""

    def __init__(self, result):
        self.raw = result
        self.is_error = bool(result.get("isError"))
        self.text = "\n".join(
            c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"
        )
        body = result.get("structuredContent")
        if not isinstance(body, dict):
            body = None
            first = next((c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"), "")
            if first.lstrip().startswith("{"):
                try:
                    parsed = json.loads(first)
                    body = parsed if isinstance(parsed, dict) else None
                except ValueError:
                    body = None
        self.body = body or {}

    @property
    def pending(self):
        pending = self.body.get("pending")
        return pending if isinstance(pending, dict) else None

    @property
    def step(self):
        return (self.pending or {}).get("stepId")

    @property
    def prompt(self):
        return (self.pending or {}).get("prompt") or ""

    @property
    def complete(self):
        return self.body.get("isComplete") is True

    @property
    def blocked(self):
        return self.body.get("kind") == "blocked"

    @property
    def blockers(self):
        found = self.body.get("blockers")
        if isinstance(found, dict):
            found = found.get("blockers")
        return [b for b in (found or []) if isinstance(b, dict)]

    @property
    def confirm(self):
        return (
            self.body.get("nextIntent") == "await_user_confirmation"
            or (self.pending or {}).get("requireConfirmation") is True
        )

    @property
    def error_code(self):
        code = self.body.get("code")
        if code is None and isinstance(self.body.get("error"), dict):
            code = self.body["error"].get("code")
        return code

    def everything(self):
        """Every word of the reply: the text content and the structured body."""
        return self.text + "\n" + json.dumps(self.body, ensure_ascii=False)

    def next_tokens(self):
        """The token arguments for the next `continue_workflow` call, as the reply names them."""
        params = (self.body.get("nextCall") or {}).get("params") or {}
        tokens = {k: v for k, v in params.items() if k.endswith("Token") and isinstance(v, str)}
        if tokens:
            return tokens
        tokens = {k: self.body[k] for k in ("stateToken", "ackToken") if isinstance(self.body.get(k), str)}
        if tokens:
            return tokens
        if isinstance(self.body.get("continueToken"), str):
            return {"continueToken": self.body["continueToken"]}
        return {}


class McpServer:
    """One server process spoken to over stdio."""

    def __init__(self, command, cwd=None, env=None, stderr_path=None, timeout=60.0):
        self.timeout = timeout
        self._stderr = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            command,
            shell=True,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next_id = 0
        self.request(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
             "clientInfo": {"name": "workrail-langref", "version": "1"}},
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.tool_schemas = {t["name"]: t.get("inputSchema") or {} for t in self.request("tools/list", {}).get("tools", [])}

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message):
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise McpError(f"the server closed its input ({e})") from e

    def request(self, method, params):
        self._next_id += 1
        wanted = self._next_id
        self._send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        while True:
            try:
                line = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise McpError(f"no answer to {method} within {self.timeout:.0f} s") from None
            if line is None:
                raise McpError(f"the server exited (code {self.proc.poll()}) before answering {method}")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not JSON-RPC (a stray log line on stdout)
            if "method" in message and "id" in message:
                # A request from the server (e.g. roots/list): this client offers no capabilities.
                self._send({"jsonrpc": "2.0", "id": message["id"],
                            "error": {"code": -32601, "message": "not supported by this client"}})
                continue
            if message.get("id") != wanted:
                continue
            if "error" in message:
                raise McpError(f"{method}: JSON-RPC error {message['error']}")
            return message.get("result") or {}

    def call(self, tool, arguments):
        return Reply(self.request("tools/call", {"name": tool, "arguments": arguments}))

    def accepts(self, tool, argument):
        return argument in ((self.tool_schemas.get(tool) or {}).get("properties") or {})

    def requires(self, tool, argument):
        return argument in ((self.tool_schemas.get(tool) or {}).get("required") or [])

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()


class Sandbox:
    """A private workspace, home, data directory and copy of a workflow directory for one server.

    Both servers are pointed at the copy by every variable either of them reads:
    `WORKRAIL_WORKFLOW_DIRS` (this project) and `WORKFLOW_STORAGE_PATH` (the reference); `HOME`
    is private so neither reads the user's `~/.workrail`.
    """

    def __init__(self, workflows_dir, keep=False, flatten=False):
        self.keep = keep
        self.root = tempfile.mkdtemp(prefix="workrail-langref-")
        self.workspace = os.path.join(self.root, "workspace")
        self.home = os.path.join(self.root, "home")
        self.data = os.path.join(self.root, "data")
        self.workflows = os.path.join(self.root, "workflows")
        for d in (self.workspace, self.home, self.data):
            os.makedirs(d)
        if flatten:
            # Every JSON file of the tree in one directory (`a/b.json` -> `a__b.json`): servers
            # differ in which subdirectories they read (the reference skips `examples/`).
            os.makedirs(self.workflows)
            for root, _, files in os.walk(workflows_dir):
                for name in files:
                    if name.endswith(".json"):
                        rel = os.path.relpath(os.path.join(root, name), workflows_dir)
                        shutil.copyfile(os.path.join(root, name), os.path.join(self.workflows, rel.replace(os.sep, "__")))
        else:
            shutil.copytree(workflows_dir, self.workflows)
        self.stderr_path = os.path.join(self.root, "server-stderr.log")

    def env(self, extra=None):
        env = dict(os.environ)
        env.update({
            "HOME": self.home,
            "XDG_DATA_HOME": os.path.join(self.home, ".local", "share"),
            "WORKRAIL_DATA_DIR": self.data,
            "WORKRAIL_WORKFLOW_DIRS": self.workflows,
            "WORKFLOW_STORAGE_PATH": self.workflows,
            "WORKRAIL_JSON_RESPONSES": "true",
        })
        env.update(extra or {})
        return env

    def server(self, command, cwd=None, extra_env=None, timeout=60.0):
        return McpServer(command, cwd=cwd or self.workspace, env=self.env(extra_env),
                         stderr_path=self.stderr_path, timeout=timeout)

    def stderr_tail(self, lines=20):
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def close(self):
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def start_arguments(server, workflow_id, goal, workspace, context=None, preferences=None):
    """`start_workflow` arguments for this server: what its schema requires, and what it accepts."""
    args = {"workflowId": workflow_id}
    if server.accepts("start_workflow", "workspacePath"):
        args["workspacePath"] = workspace
    if server.accepts("start_workflow", "goal"):
        args["goal"] = goal
    if context and server.accepts("start_workflow", "context"):
        args["context"] = context
    if preferences and server.accepts("start_workflow", "preferences"):
        args["preferences"] = preferences
    return args


def advance_arguments(server, reply, notes=None, artifacts=None, context=None):
    """`continue_workflow` arguments that acknowledge the pending step of `reply`."""
    args = dict(reply.next_tokens())
    if server.accepts("continue_workflow", "intent"):
        args["intent"] = "advance"
    output = {}
    if notes is not None:
        output["notesMarkdown"] = notes
    if artifacts:
        output["artifacts"] = artifacts
    if output:
        args["output"] = output
    if context:
        args["context"] = context
    return args
