#!/usr/bin/env python3
"""Same answers as the reference: drive a WorkRail server through the scripts of
`fixtures/language/` and record, per call, the pending step and the outcome.

    langref.py record --server CMD [--cwd DIR] [SCRIPT ...]   write <script>.expected.json
    langref.py check  --server CMD [--cwd DIR] [SCRIPT ...]   compare with them, print diffs
    langref.py run    --server CMD [--cwd DIR] SCRIPT ...     print what the server answers

SCRIPT is a script file or a script name (`lang-cond-var.plain-values`); none means every
script. Each script runs on a fresh server process with a private data directory, home and copy
of `fixtures/language/workflows/` (see `mcpstdio.Sandbox`). What is recorded, and what is left
out as differing by design, is in `fixtures/language/README.md` (decision D150).

Python 3 standard library only. Exit status: 0 when every script answered the same (or its
difference is allowed), 1 when one differs, 2 on bad usage.
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcpstdio import PROTOCOL_STEPS, McpError, Sandbox, advance_arguments, start_arguments  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURES = os.path.join(REPO, "fixtures", "language")
DEFAULT_NOTES = "Did what the step asked and checked the result."
FORMAT = "workrail-langref/1"


# ---- scripts ---------------------------------------------------------------------------------

def script_name(path):
    return os.path.basename(path)[: -len(".script.json")]


def find_scripts(fixtures, wanted):
    directory = os.path.join(fixtures, "scripts")
    every = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".script.json"))
    if not wanted:
        return every
    chosen = []
    for w in wanted:
        if os.path.isfile(w):
            chosen.append(os.path.abspath(w))
            continue
        hits = [p for p in every if script_name(p) == w or script_name(p).startswith(w + ".")]
        if not hits:
            raise SystemExit(f"langref: no script named {w!r} in {directory}")
        chosen.extend(hits)
    return chosen


def load_workflow(fixtures, workflow_id):
    with open(os.path.join(fixtures, "workflows", workflow_id + ".json"), encoding="utf-8") as f:
        return json.load(f)


def authored_texts(workflow, step_id):
    """The sentences a workflow author wrote for a step's checks: validation rule messages and
    assessment consequence guidance. A blocked answer is judged by which of them it quotes."""
    found = set()

    def walk_criteria(node):
        if isinstance(node, list):
            for item in node:
                walk_criteria(item)
        elif isinstance(node, dict):
            if isinstance(node.get("message"), str):
                found.add(node["message"])
            for key in ("and", "or"):
                walk_criteria(node.get(key))
            walk_criteria(node.get("not"))

    def visit(steps):
        for s in steps or []:
            if not isinstance(s, dict):
                continue
            if s.get("id") == step_id:
                walk_criteria(s.get("validationCriteria"))
                for c in s.get("assessmentConsequences") or []:
                    guidance = (c.get("effect") or {}).get("guidance")
                    if isinstance(guidance, str):
                        found.add(guidance)
            if isinstance(s.get("body"), list):
                visit(s["body"])

    visit(workflow.get("steps"))
    return found


# ---- driving ---------------------------------------------------------------------------------

class Driver:
    def __init__(self, server_command, cwd=None, extra_env=None, timeout=60.0, fixtures=FIXTURES, keep=False):
        self.server_command = server_command
        self.cwd = cwd
        self.extra_env = extra_env or {}
        self.timeout = timeout
        self.fixtures = fixtures
        self.keep = keep

    def run(self, script_path):
        """Runs one script on a fresh server; returns the recorded sequence."""
        with open(script_path, encoding="utf-8") as f:
            script = json.load(f)
        workflow = load_workflow(self.fixtures, script["workflow"])
        sandbox = Sandbox(os.path.join(self.fixtures, "workflows"), keep=self.keep)
        server = None
        try:
            server = sandbox.server(self.server_command, cwd=self.cwd, extra_env=self.extra_env, timeout=self.timeout)
            errors = []
            steps = self._drive(server, sandbox, script, workflow, script_name(script_path), errors)
        except McpError as e:
            raise McpError(f"{script_name(script_path)}: {e}\n--- server stderr (last lines) ---\n{sandbox.stderr_tail()}") from e
        finally:
            if server is not None:
                server.close()
            sandbox.close()
        recorded = {"format": FORMAT, "script": script_name(script_path), "workflow": script["workflow"], "steps": steps}
        if errors:
            # What the server said when it refused a call: shown to whoever reads a difference,
            # never compared and never written into an expected file (it is the server's prose).
            recorded["errors"] = errors
        return recorded

    def _drive(self, server, sandbox, script, workflow, name, errors):
        observe = [re.compile(p) for p in script.get("observe", [])]
        start_context = script.get("startContext") or None
        goal = f"Run the fixture script {name}."
        reply = server.call("start_workflow", start_arguments(server, script["workflow"], goal, sandbox.workspace, start_context))
        context_sent_at_start = bool(start_context) and server.accepts("start_workflow", "context")
        pending_context = None if context_sent_at_start else start_context
        if reply.is_error:
            errors.append(f"start: {first_line(reply)}")
            return [{"call": "start", "outcome": "refused"}]
        # A step the server inserts before the workflow's own (the reference's protocol briefing):
        # acknowledge it, carrying the start context when start_workflow could not take it.
        while reply.step in PROTOCOL_STEPS and not reply.complete:
            reply = server.call("continue_workflow", advance_arguments(server, reply, notes="Understood.", context=pending_context))
            pending_context = None
            if reply.is_error:
                errors.append(f"start: {first_line(reply)}")
                return [{"call": "start", "outcome": "refused"}]
        steps = [self._entry("start", reply, "pending", observe, workflow)]
        if reply.complete:
            return steps

        calls = list(script.get("calls", []))
        fill = script.get("fill")
        max_calls = script.get("maxCalls", len(calls))
        last_good = reply
        number = 0
        errors_in_a_row = 0
        while number < max_calls and errors_in_a_row < 2:
            if number < len(calls):
                call = calls[number]
            elif fill is not None:
                call = fill
            else:
                break
            number += 1
            notes = call["notes"] if "notes" in call else DEFAULT_NOTES
            context = call.get("context")
            if pending_context:
                context = {**pending_context, **(context or {})}
                pending_context = None
            reply = server.call("continue_workflow", advance_arguments(
                server, last_good, notes=notes, artifacts=call.get("artifacts"), context=context))
            if reply.is_error:
                # The same tokens stay valid (nothing was recorded); the next call may fix the
                # cause. Two errors in a row end the script: the run is stuck.
                steps.append({"call": number, "outcome": "error"})
                errors.append(f"call {number}: {first_line(reply)}")
                errors_in_a_row += 1
                continue
            errors_in_a_row = 0
            outcome = "complete" if reply.complete else ("blocked" if reply.blocked else "advanced")
            steps.append(self._entry(number, reply, outcome, observe, workflow, blocked_step=last_good.step))
            last_good = reply
            if reply.complete:
                break
        return steps

    @staticmethod
    def _entry(call, reply, outcome, observe, workflow, blocked_step=None):
        entry = {"call": call, "outcome": outcome}
        if outcome == "complete":
            return entry
        entry["step"] = reply.step
        if reply.confirm:
            entry["confirm"] = True
        if outcome == "blocked":
            blockers = []
            for b in reply.blockers:
                pointer = b.get("pointer") or {}
                item = {"code": b.get("code"), "pointer": pointer.get("kind")}
                if pointer.get("dimensionId"):
                    item["dimension"] = pointer["dimensionId"]
                blockers.append(item)
            entry["blockers"] = sorted(blockers, key=lambda b: json.dumps(b, sort_keys=True))
            everything = reply.everything()
            entry["quoted"] = sorted(t for t in authored_texts(workflow, reply.step or blocked_step) if t in everything)
        if observe:
            entry["observed"] = {p.pattern: p.findall(reply.prompt) for p in observe}
        return entry


def first_line(reply):
    message = reply.body.get("message") or reply.text
    code = reply.error_code
    text = (message or "").strip().splitlines()
    return (f"{code}: " if code else "") + (text[0][:400] if text else "(no message)")


# ---- comparing -------------------------------------------------------------------------------

def expected_path(script_path):
    return script_path[: -len(".script.json")] + ".expected.json"


def load_allowed(path):
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        listed = json.load(f).get("allowed", [])
    return {a["script"]: a for a in listed}


def describe(entry):
    if entry is None:
        return "(nothing)"
    parts = [f"call {entry['call']}: {entry['outcome']}"]
    if entry.get("step"):
        parts.append(f"at {entry['step']}")
    if entry.get("confirm"):
        parts.append("(confirmation asked)")
    for key in ("blockers", "quoted", "observed"):
        if key in entry:
            parts.append(f"{key}={json.dumps(entry[key], ensure_ascii=False)}")
    return " ".join(parts)


def diff(expected, actual):
    """Readable lines for every position where the two sequences differ (empty when equal)."""
    lines = []
    want, got = expected["steps"], actual["steps"]
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else None
        g = got[i] if i < len(got) else None
        if w != g:
            lines.append(f"  - expected {describe(w)}")
            lines.append(f"  + got      {describe(g)}")
    return lines


# ---- command line ----------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["record", "check", "run"])
    parser.add_argument("scripts", nargs="*", help="script files or names (default: every script)")
    parser.add_argument("--server", required=True, help="the server command, e.g. 'target/debug/workrail mcp'")
    parser.add_argument("--cwd", help="working directory for the server (default: a private empty workspace)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for the server")
    parser.add_argument("--fixtures", default=FIXTURES, help="the fixtures directory (default: fixtures/language)")
    parser.add_argument("--allow", help="allow-list file (default: <fixtures>/allowed-differences.json)")
    parser.add_argument("--out", help="record/run: write the recorded sequences into this directory instead")
    parser.add_argument("--jobs", type=int, default=1, help="scripts run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep each script's temporary directory")
    args = parser.parse_intermixed_args(argv)

    extra_env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env takes KEY=VALUE, got {item!r}")
        extra_env[key] = value
    fixtures = os.path.abspath(args.fixtures)
    paths = find_scripts(fixtures, args.scripts)
    driver = Driver(args.server, cwd=args.cwd, extra_env=extra_env, timeout=args.timeout, fixtures=fixtures, keep=args.keep)
    allowed = load_allowed(args.allow or os.path.join(fixtures, "allowed-differences.json"))

    def one(path):
        try:
            return path, driver.run(path), None
        except McpError as e:
            return path, None, str(e)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, paths))

    same = differ = allowed_count = failed = 0
    for path, recorded, error in results:
        name = script_name(path)
        if error is not None:
            failed += 1
            print(f"FAILED {name}: {error}")
            continue
        errors = recorded.pop("errors", [])
        text = json.dumps(recorded, indent=2, ensure_ascii=False) + "\n"
        if args.mode in ("record", "run") and args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, name + ".expected.json"), "w", encoding="utf-8") as f:
                f.write(text)
            if errors:
                with open(os.path.join(args.out, name + ".errors.txt"), "w", encoding="utf-8") as f:
                    f.write("\n".join(errors) + "\n")
        if args.mode == "record" and not args.out:
            with open(expected_path(path), "w", encoding="utf-8") as f:
                f.write(text)
            print(f"recorded {name}: {len(recorded['steps'])} entries")
        elif args.mode == "run":
            if not args.out:
                print(f"== {name}")
                for entry in recorded["steps"]:
                    print("  " + describe(entry))
                for error in errors:
                    print("  ! " + error)
        elif args.mode == "check":
            try:
                with open(expected_path(path), encoding="utf-8") as f:
                    expected = json.load(f)
            except FileNotFoundError:
                failed += 1
                print(f"MISSING {name}: no {os.path.basename(expected_path(path))} (run `record` against the reference)")
                continue
            lines = diff(expected, recorded)
            if not lines:
                same += 1
            elif name in allowed:
                allowed_count += 1
                print(f"ALLOWED {name} ({allowed[name].get('decision')}): differs as that decision says")
            else:
                differ += 1
                print(f"DIFFERS {name}")
                print("\n".join(lines))
                for error in errors:
                    print("  ! " + error)
    if args.mode == "check":
        print(f"{same} same, {differ} differ, {allowed_count} allowed, {failed} failed")
        return 0 if differ == 0 and failed == 0 else 1
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
