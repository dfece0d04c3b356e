"""Parallel lanes driven over the official Python MCP SDK (`mcp` on PyPI), the way a main agent
and its subagents would drive them.

A workflow with a three-lane parallel step runs once per merge strategy. The main agent reaches
the parallel step and hands each lane's tokens to a subagent: here a separate client process
(this script, in `lane` mode) with its own `workrail mcp` server on the same data directory. The
lanes finish in a random order; lanes 1 and 3 both list `src/shared.rs`. Then the main agent
acknowledges the parallel step:

- `fail-on-conflict`: blocked, naming the file and both lanes;
- `workspace`: proceeds to the synthesis with the lane recorded first as the winner, and a
  `lane_conflict` warning;
- `concatenate`: proceeds, and nothing conflicts.

Usage: python lanes_over_python_sdk.py <path to the workrail binary>
Prints `N passed, 0 failed` when every check holds; exits 1 on the first failure.
"""
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CHECKS = 0
SHARED = "src/shared.rs"

ROUTINE = {
    "id": "project.routine-inspect",
    "name": "Inspect",
    "description": "Inspect one area.",
    "steps": [{"id": "look", "title": "Look at {area}", "prompt": "Inspect the area you were given."}],
}


def workflow(strategy):
    return {
        "id": "project.fan",
        "name": "Fan",
        "description": "Three lanes, then a synthesis.",
        "version": "1.0.0",
        "steps": [
            {"id": "prepare", "title": "Prepare", "prompt": "Prepare."},
            {
                "type": "parallel",
                "id": "fan-out",
                "title": "Inspect in parallel",
                "mergeStrategy": strategy,
                "parallelDelegations": [
                    {"workflowId": "routine-inspect", "goal": f"Inspect {area}", "args": {"area": area}}
                    for area in ("parser", "store", "docs")
                ],
                "synthesis": {"prompt": "Merge what the lanes found."},
            },
            {"id": "ship", "title": "Ship", "prompt": "Ship."},
        ],
    }


def check(condition, what):
    global CHECKS
    if not condition:
        print(f"FAILED: {what}")
        print(f"{CHECKS} passed, 1 failed")
        sys.exit(1)
    CHECKS += 1


def server(binary, data, workflows):
    env = {**os.environ, "WORKRAIL_DATA_DIR": data, "WORKRAIL_WORKFLOW_DIRS": workflows}
    return StdioServerParameters(command=binary, args=["mcp"], env=env)


async def run_lane(binary, data, workflows, state_token, ack_token, lane_id, files):
    """A subagent: drive the lane from its tokens to its end, following only the answers."""
    async with stdio_client(server(binary, data, workflows)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            state, ack = state_token, ack_token
            for _ in range(10):
                reply = await s.call_tool(
                    "continue_workflow", {"stateToken": state, "ackToken": ack,
                                          "output": build_output(state, ack, lane_id, files, None)})
                out = reply.structured_content
                if reply.is_error or out.get("kind") == "blocked":
                    raise SystemExit(f"lane {lane_id} failed: {reply.content[0].text[:600]}")
                if out["isComplete"]:
                    return
                pending = out["pending"]
                state, ack = out["stateToken"], out["ackToken"]
                if pending["stepId"] == "lane-report":
                    # The answer shows the artifact it wants: fill in the example.
                    example = pending["requiredArtifact"]["example"]
                    reply = await s.call_tool(
                        "continue_workflow", {"stateToken": state, "ackToken": ack,
                                              "output": build_output(state, ack, lane_id, files, example)})
                    out = reply.structured_content
                    if reply.is_error or not out.get("isComplete"):
                        raise SystemExit(f"lane {lane_id} did not complete: {reply.content[0].text[:600]}")
                    return
    raise SystemExit(f"lane {lane_id} did not reach its end")


def build_output(state, ack, lane_id, files, example):
    output = {"notesMarkdown": f"Lane {lane_id}: inspected."}
    if example is not None:
        artifact = dict(example)
        artifact.update({"blockId": lane_id, "blockType": "review", "status": "completed",
                         "deliverables": {"blockType": "generic", "summary": "Findings written."},
                         "summary": f"Lane {lane_id} inspected its area.",
                         "filesModified": files, "filesCreated": []})
        output["artifacts"] = [artifact]
    return output


async def main_agent(binary, root, strategy):
    data = os.path.join(root, strategy, "data")
    workflows = os.path.join(root, strategy, "workflows")
    os.makedirs(workflows)
    with open(os.path.join(workflows, "routine.json"), "w") as f:
        json.dump(ROUTINE, f)
    with open(os.path.join(workflows, "fan.json"), "w") as f:
        json.dump(workflow(strategy), f)
    async with stdio_client(server(binary, data, workflows)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            first = (await s.call_tool("start_workflow", {"workflowId": "project.fan"})).structured_content
            reply = await s.call_tool("continue_workflow", {
                "stateToken": first["stateToken"], "ackToken": first["ackToken"],
                "output": {"notesMarkdown": "Prepared."}})
            fan = reply.structured_content
            check(fan["pending"]["stepId"] == "fan-out", f"{strategy}: the parallel step is pending")
            lanes = fan.get("lanes") or []
            check(len(lanes) == 3, f"{strategy}: the parallel step hands out three lanes")
            text = reply.content[0].text
            check(all(l["stateToken"] in text for l in lanes), f"{strategy}: the text carries every lane's tokens")
            # Three subagents, three client processes, finishing in a random order.
            order = list(range(3))
            random.shuffle(order)
            for i in order:
                lane = lanes[i]
                files = [SHARED] if i in (0, 2) else [f"src/{i}.rs"]
                done = subprocess.run(
                    [sys.executable, __file__, "lane", binary, data, workflows, lane["stateToken"],
                     lane["ackToken"], lane["laneId"], json.dumps(files)],
                    capture_output=True, text=True, timeout=120)
                check(done.returncode == 0, f"{strategy}: lane {i + 1} completes in its own process: {done.stdout}{done.stderr}")
            after = (await s.call_tool("continue_workflow", {"stateToken": fan["stateToken"]})).structured_content
            check(all(l["status"] == "completed" for l in after["lanes"]), f"{strategy}: every lane reads completed")
            reply = await s.call_tool("continue_workflow", {
                "stateToken": fan["stateToken"], "ackToken": fan["ackToken"],
                "output": {"notesMarkdown": "Every lane is in."}})
            out = reply.structured_content
            first_of_pair = min((order.index(0), 0), (order.index(2), 2))[1]
            if strategy == "fail-on-conflict":
                check(out["kind"] == "blocked", "fail-on-conflict: the synthesis waits")
                message = " ".join(b["message"] for b in out["blockers"])
                check(SHARED in message, "fail-on-conflict: the blocker names the file")
                check(lanes[0]["laneId"] in message and lanes[2]["laneId"] in message,
                      "fail-on-conflict: the blocker names both lanes")
                check(all(b["code"] == "USER_ONLY_DEPENDENCY" for b in out["blockers"]),
                      "fail-on-conflict: only the user can settle it")
            else:
                check(out["kind"] == "ok" and out["pending"]["stepId"] == "fan-out__synthesis",
                      f"{strategy}: the synthesis step is next")
                prompt = out["pending"]["prompt"]
                check("## Lane results" in prompt, f"{strategy}: the synthesis shows the lane results")
                conflicts = [w for w in out.get("warnings", []) if w["code"] == "lane_conflict"]
                if strategy == "workspace":
                    check(len(conflicts) == 1 and SHARED in conflicts[0]["message"],
                          "workspace: one lane_conflict warning names the file")
                    check(f"lane {first_of_pair + 1} completed first" in prompt,
                          "workspace: the lane recorded first wins")
                else:
                    check(not conflicts and "Conflict" not in prompt, "concatenate: nothing conflicts")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "lane":
        _, _, binary, data, workflows, state, ack, lane_id, files = sys.argv
        asyncio.run(run_lane(binary, data, workflows, state, ack, lane_id, json.loads(files)))
        return
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as root:
        for strategy in ("fail-on-conflict", "workspace", "concatenate"):
            asyncio.run(main_agent(binary, root, strategy))
    print(f"{CHECKS} passed, 0 failed")


if __name__ == "__main__":
    main()
