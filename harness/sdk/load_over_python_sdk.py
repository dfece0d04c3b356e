"""A load run: many agents at once over the official Python MCP SDK (`mcp` on PyPI), over
Streamable HTTP (one `workrail serve --http`) and over stdio (one `workrail mcp` per agent), on
the store WORKRAIL_STORE names (PostgreSQL for the documented run) or the file store.

Each agent starts a run of a 40-step workflow and acknowledges step after step, starting a new
run when one completes, until the time is up. Every call's latency is measured from the
agent's side (the SDK's own cost included). A call that answers an error counts as an error;
the run must end with 0.

Usage:
    python load_over_python_sdk.py <workrail binary> [--agents 50] [--seconds 60]
                                   [--transport http|stdio|both]

Prints one line per transport: agents, seconds, calls, calls/s, p50 and p99 in ms, errors, and
the calls, p50 and p99 of the calls begun from WARM_UP seconds after the first on.
Exits 1 when any call failed. Documented in impl/docs/load.md; not run in CI (it takes minutes
and measures the machine).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

STEPS = 40
# Seconds after the first call from which the steady state is reported besides the whole run.
WARM_UP = 10
WORKFLOW = {
    "id": "project.load",
    "name": "Load",
    "description": "Forty plain steps, for the load run.",
    "version": "1.0.0",
    "steps": [
        {"id": f"step-{i}", "title": f"Step {i}", "prompt": f"Do step {i}, then acknowledge it."}
        for i in range(STEPS)
    ],
}


class Tally:
    def __init__(self):
        self.latencies = []
        self.began_and_spent = []
        self.errors = []
        self.first = None
        self.last = None

    def record(self, began, seconds, error=None):
        self.latencies.append(seconds)
        self.began_and_spent.append((began, seconds))
        self.first = began if self.first is None else min(self.first, began)
        self.last = began + seconds if self.last is None else max(self.last, began + seconds)
        if error is not None:
            self.errors.append(error)

    def window(self):
        return (self.last - self.first) if self.first is not None else 0.0


async def agent(session, deadline, tally, name):
    out = None
    while time.monotonic() < deadline:
        if out is None or out.get("isComplete"):
            tool, arguments = "start_workflow", {"workflowId": WORKFLOW["id"]}
        else:
            tool, arguments = "continue_workflow", {
                "stateToken": out["stateToken"],
                "ackToken": out["ackToken"],
                "output": {"notesMarkdown": f"{name}: done."},
            }
        began = time.perf_counter()
        result = await session.call_tool(tool, arguments)
        spent = time.perf_counter() - began
        if result.is_error:
            text = result.content[0].text[:300] if result.content else ""
            tally.record(began, spent, f"{tool}: {text}")
            # Retry the same call: a retryable error (a busy session) is not lost work.
            await asyncio.sleep(0.05)
            continue
        tally.record(began, spent)
        out = result.structured_content


async def over_http(url, key, deadline, tally, name):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                await agent(s, deadline, tally, name)


async def over_stdio(binary, env, deadline, tally, name):
    params = StdioServerParameters(command=binary, args=["mcp"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            await agent(s, deadline, tally, name)


def percentiles(seconds):
    ms = sorted(x * 1000 for x in seconds)
    p50 = statistics.median(ms) if ms else float("nan")
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan")
    return p50, p99


def report(transport, agents, tally):
    calls = len(tally.latencies)
    seconds = tally.window()
    p50, p99 = percentiles(tally.latencies)
    # The agents' first calls wait on the client's own start (50 sessions set up in one Python
    # process at once): calls begun from WARM_UP seconds on show the steady state.
    warm = [s for began, s in tally.began_and_spent if began - tally.first >= WARM_UP]
    warm_p50, warm_p99 = percentiles(warm)
    print(
        f"{transport}: {agents} agents, {seconds:.1f} s, {calls} calls, {calls / max(seconds, 1e-9):.1f} calls/s, "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(tally.errors)} errors; "
        f"from {WARM_UP} s on: {len(warm)} calls, p50 {warm_p50:.1f} ms, p99 {warm_p99:.1f} ms",
        flush=True,
    )
    for error in tally.errors[:5]:
        print(f"  error: {error}")
    return len(tally.errors) == 0 and calls > 0


async def run_http(binary, env, agents, seconds):
    # One client key per agent, as each bot of a team has its own (a key's requests in flight
    # are bounded per client).
    keys = [
        subprocess.run([binary, "keys", "client", "add", f"load-{i}"], env=env,
                       capture_output=True, text=True, check=True).stdout.strip()
        for i in range(agents)
    ]
    server = subprocess.Popen([binary, "serve", "--http"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().strip()
        prefix = "WorkRail MCP over HTTP: "
        if not line.startswith(prefix):
            raise SystemExit(f"the server did not print its URL: {line!r}")
        url = line[len(prefix):]
        tally = Tally()
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(over_http(url, keys[i], deadline, tally, f"agent-{i}") for i in range(agents)))
        return report("http", agents, tally)
    finally:
        server.kill()
        server.wait()


async def run_stdio(binary, env, agents, seconds):
    tally = Tally()
    # Calls/s is counted over the window from the first call to the last, so the server
    # processes' start does not count against them.
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(over_stdio(binary, env, deadline, tally, f"agent-{i}") for i in range(agents)))
    return report("stdio", agents, tally)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--transport", choices=["http", "stdio", "both"], default="both")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    store = os.environ.get("WORKRAIL_STORE", "")
    print(f"store: {'PostgreSQL' if store.startswith('postgres') else 'files'}; "
          f"machine: {os.cpu_count()} cores", flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as data:
        workflows = os.path.join(data, "workflows-src")
        os.makedirs(workflows)
        with open(os.path.join(workflows, "load.json"), "w") as f:
            json.dump(WORKFLOW, f)
        env = {**os.environ, "WORKRAIL_DATA_DIR": os.path.join(data, "data"),
               "WORKRAIL_WORKFLOW_DIRS": workflows, "WORKRAIL_LOG": "error"}
        if args.transport in ("http", "both"):
            ok &= asyncio.run(run_http(binary, env, args.agents, args.seconds))
        if args.transport in ("stdio", "both"):
            ok &= asyncio.run(run_stdio(binary, env, args.agents, args.seconds))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
