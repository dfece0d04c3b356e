"""Agents over Streamable HTTP, driven by the official Python MCP SDK (`mcp` on PyPI).

`workrail serve --http` runs with one client key. An agent over the SDK's Streamable HTTP client
starts a workflow and advances it; a second agent over stdio (another `workrail mcp` process on
the same data directory and store) continues it from the HTTP agent's tokens; the HTTP agent
continues from the stdio agent's. Three HTTP agents then run at once. A request without the key,
or from a foreign Origin, is refused. With WORKRAIL_STORE set, both servers use that store.

Usage: python http_over_python_sdk.py <path to the workrail binary>
Prints `N passed, 0 failed` when every check holds; exits 1 on the first failure.
"""
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        print(f"FAILED: {what}")
        print("0 passed, 1 failed")
        sys.exit(1)
    CHECKS += 1


def ack(out, notes):
    return {"stateToken": out["stateToken"], "ackToken": out["ackToken"],
            "output": {"notesMarkdown": notes}}


async def over_http(url, key, steps):
    """Runs `steps(session)` in one SDK session over Streamable HTTP with the client key."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await steps(s)


async def over_stdio(binary, env, steps):
    params = StdioServerParameters(command=binary, args=["mcp"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            return await steps(s)


async def call(s, tool, arguments):
    result = await s.call_tool(tool, arguments)
    check(not result.is_error, f"{tool} succeeds: {result.content[0].text[:300] if result.content else ''}")
    return result.structured_content


async def drive(binary, env, url, key):
    async def start(s):
        tools = {t.name for t in (await s.list_tools()).tools}
        check({"start_workflow", "continue_workflow"} <= tools, "the tools are listed over HTTP")
        s0 = await call(s, "start_workflow", {"workflowId": "wr.coding_task"})
        return await call(s, "continue_workflow", ack(s0, "Planned over HTTP."))

    s1 = await over_http(url, key, start)
    session = s1["session"]["sessionId"]

    async def middle(s):
        return await call(s, "continue_workflow", ack(s1, "Built over stdio."))

    s2 = await over_stdio(binary, env, middle)
    check(s2["session"]["sessionId"] == session, "stdio continued the HTTP agent's session")

    async def finish(s):
        return await call(s, "continue_workflow", ack(s2, "Checked over HTTP again."))

    s3 = await over_http(url, key, finish)
    check(s3["session"]["sessionId"] == session, "HTTP continued the stdio agent's tokens")

    async def alone(s):
        out = await call(s, "start_workflow", {"workflowId": "wr.coding_task"})
        return (await call(s, "continue_workflow", ack(out, "In parallel.")))["session"]["sessionId"]

    several = await asyncio.gather(*(over_http(url, key, alone) for _ in range(3)))
    check(len(set(several)) == 3, "three HTTP agents at once ran three sessions")
    return session


def refused(url, headers):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "start_workflow", "arguments": {"workflowId": "wr.coding_task"}}})
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "WORKRAIL_DATA_DIR": data}
        key = subprocess.run([binary, "keys", "client", "add", "sdk-agent"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
        check(key.startswith("wrc_"), "a client key is printed")
        server = subprocess.Popen([binary, "serve", "--http"], env=env, stdout=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline().strip()
            prefix = "WorkRail MCP over HTTP: "
            check(line.startswith(prefix), f"the server prints its URL ({line!r})")
            url = line[len(prefix):]
            check(refused(url, {}) == 401, "a request without a key is refused")
            check(refused(url, {"Authorization": "Bearer wrc_wrong"}) == 401, "a wrong key is refused")
            check(refused(url, {"Authorization": f"Bearer {key}", "Origin": "http://evil.example"}) == 403,
                  "a foreign Origin is refused")
            asyncio.run(drive(binary, env, url, key))
        finally:
            server.kill()
            server.wait()
    print(f"{CHECKS} passed, 0 failed")


if __name__ == "__main__":
    main()
