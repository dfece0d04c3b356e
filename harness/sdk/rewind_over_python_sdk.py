"""An agent after a rewind, driven over the official Python MCP SDK (`mcp` on PyPI).

The user rewinds the chat; the agent redoes a step and sends its OLD stateToken and ackToken
with NEW notes. The server must say the new notes were not recorded and name the ackToken to
send them with; following only the text records them on a new branch, and both branches stay
durable (checked with `workrail inspect`). Also: a typo in a workflow id gets "did you mean".

Usage: python rewind_over_python_sdk.py <path to the workrail binary>
Prints `N passed, 0 failed` when every check holds; exits 1 on the first failure.
"""
import asyncio
import os
import re
import subprocess
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        print(f"FAILED: {what}")
        print("0 passed, 1 failed")
        sys.exit(1)
    CHECKS += 1


async def drive(binary, data):
    params = StdioServerParameters(
        command=binary, args=["mcp"], env={**os.environ, "WORKRAIL_DATA_DIR": data}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            s0 = (await s.call_tool("start_workflow", {"workflowId": "wr.coding_task"})).structured_content
            first = await s.call_tool(
                "continue_workflow",
                {"stateToken": s0["stateToken"], "ackToken": s0["ackToken"],
                 "output": {"notesMarkdown": "Plan A: split by module."}},
            )
            check(not first.is_error, "the first ack advances")
            # The rewind: old tokens, new notes.
            again = await s.call_tool(
                "continue_workflow",
                {"stateToken": s0["stateToken"], "ackToken": s0["ackToken"],
                 "output": {"notesMarkdown": "Plan B: split by feature."}},
            )
            text = again.content[0].text
            check("REPLAY" in text and "NOT recorded" in text, "the text says the new notes were not recorded")
            check(again.structured_content["replay"]["notRecorded"] == ["output.notesMarkdown"],
                  "the structure names what was not recorded")
            # Follow only the text: the ackToken line of the REPLAY section.
            section = text.split("## REPLAY", 1)[1]
            found = re.search(r"^ackToken: (\S+)$", section, re.M)
            check(found is not None, "the REPLAY section names the ackToken to use")
            fork = await s.call_tool(
                "continue_workflow",
                {"ackToken": found.group(1), "output": {"notesMarkdown": "Plan B: split by feature."}},
            )
            check(not fork.is_error, "the fork ack advances")
            check("Forked:" in fork.content[0].text, "the fork's answer says it forked")
            typo = await s.call_tool("start_workflow", {"workflowId": "wr.coding_tsk"})
            check(typo.is_error and "wr.coding_task" in typo.content[0].text, "a typo gets did-you-mean")
            return s0["session"]["sessionId"]


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as data:
        session = asyncio.run(drive(binary, data))
        shown = subprocess.run(
            [binary, "inspect", session], env={**os.environ, "WORKRAIL_DATA_DIR": data},
            capture_output=True, text=True, check=False,
        ).stdout
        check("Plan A" in shown and "Plan B" in shown, "both branches are durable")
    print(f"{CHECKS} passed, 0 failed")


if __name__ == "__main__":
    main()
