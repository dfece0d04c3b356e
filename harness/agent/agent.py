#!/usr/bin/env python3
"""A responses-only agent: drives any WorkRail workflow over stdio reading nothing but the
server's answers, the way a model in a chat client would have to.

    agent.py --server CMD --workflows DIR [--mode guided|never-stop] [--only ID ...]

For every workflow file under DIR (its `id`), it starts a run and then, call after call, reads
the pending step and answers it:

- notes: a recap of the step (its title, the words the prompt stresses), lengthened or shortened
  when a blocker asks for a length, with the author's failed-check messages addressed by name;
- artifacts: the shape an example in the answer shows (`pending.requiredArtifact.example`, a
  JSON example in the prompt or in a blocker's suggested fix), filled in: a `wr.loop_control`
  says `continue` until the loop has run `--loop-passes` times, then `stop`; a `wr.assessment`
  picks a level the answer lists, and another one when the chosen level asked for a follow-up;
  with `--examples prompt` the example the step's own prompt shows comes first, as a model that
  copies the workflow author's text would send it;
- context: values for every context key a blocker, an error or an unrendered `{{marker}}` names;
- confirmation: in `guided` mode the simulated user confirms every step that asks; in
  `never-stop` mode the run was started with `full_auto_never_stop` where the server lets the
  agent choose (its `start_workflow` takes `preferences`), and nothing is asked.

It stops at completion, after `--max-calls` calls, or when stuck (the same step blocked or
refused four times in a row). Per workflow it reports: completed or not, calls made, every
`INTERNAL_ERROR`, and every call where the next step was not obvious from the text (an artifact
required with no example shown, a blocker or error that names nothing the agent could act on,
a repeat of the same block).

Python 3 standard library only (it shares `../reference/mcpstdio.py`). The workflows it runs are
never copied into the project; point `--workflows` at a local directory.
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from mcpstdio import McpError, Sandbox, advance_arguments, start_arguments  # noqa: E402

MODES = {"guided": "guided", "never-stop": "full_auto_never_stop"}
NOTES_LIMIT = 3800  # bytes: under the 4096-byte notes budget both servers apply


# ---- reading the text ------------------------------------------------------------------------

def json_objects(text):
    """Every JSON object that appears in `text` (fenced or inline), outermost first."""
    found = []
    decoder = json.JSONDecoder()
    i = 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return found
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        if isinstance(value, dict):
            found.append(value)
        i = end


def artifact_examples(value):
    """Objects with a string `kind` inside `value` (an example may wrap them in `output`)."""
    out = []
    if isinstance(value, dict):
        if isinstance(value.get("kind"), str) and "." in value["kind"]:
            out.append(value)
            return out
        for v in value.values():
            out.extend(artifact_examples(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(artifact_examples(v))
    return out


def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def readable(reply):
    """All the words of an answer as an agent reads them: every string of the structured answer
    (prompts, blocker messages and fixes, validation issues, error suggestions) and the text
    content unless it is only that structure printed as JSON."""
    parts = list(strings(reply.body))
    if not reply.text.lstrip().startswith("{"):
        parts.append(reply.text)
    return "\n".join(parts)


def split_top(text, sep=","):
    """Splits at `sep` outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def value_for(spec, name):
    """A plausible value for a field described in prose: `"1.0.0"`, `"a"|"b"`, `string[]`,
    `object containing a, b`, `object`, `string`, `number`, `boolean`."""
    spec = (spec or "").strip()
    literals = re.findall(r'"([^"]*)"', spec)
    if literals and re.fullmatch(r'(\s*"[^"]*"\s*\|?)+', spec):
        return literals[0]
    if spec.endswith("[]") or spec.startswith("array"):
        return [f"{name} entry"]
    if spec.startswith("object containing"):
        return {f: f"{f} text" for f in split_top(spec[len("object containing"):])}
    if spec.startswith("object"):
        return {}
    if spec.startswith(("number", "integer")):
        return 1
    if spec.startswith("boolean"):
        return True
    return f"{name} text"


def artifacts_from_field_lists(text):
    """Artifacts described only as a field list ("Provide a wr.x artifact ... Required fields:
    a (string), b ("1.0.0"), c (object containing d, e)"), filled in."""
    found = []
    for m in re.finditer(r"Provide an? (wr\.[A-Za-z0-9_]+) artifact[^\n]*\n(?:[^\n]*\n){0,3}?Required fields: ([^\n]+)", text):
        artifact = {"kind": m.group(1)}
        for field in split_top(m.group(2).rstrip(".")):
            fm = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?$", field)
            if fm:
                artifact[fm.group(1)] = value_for(fm.group(2), fm.group(1))
        found.append(artifact)
    return found


def field_fixes(issues):
    """Schema complaints that name a field (`version: Invalid literal value, expected 1`,
    `items: Expected array, received string`, `name: Required`) as {path: value}."""
    fixes = {}
    for issue in issues:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_.]*): (.+)$", issue.strip())
        if not m:
            continue
        path, said = m.group(1), m.group(2)
        literal = re.search(r"expected (\S+)$", said)
        kind = re.search(r"Expected (\w+)", said)
        if "literal" in said and literal:
            raw = literal.group(1).strip("'\"")
            try:
                fixes[path] = json.loads(raw)
            except ValueError:
                fixes[path] = raw
        elif kind:
            fixes[path] = {"array": [f"{path} entry"], "number": 1, "boolean": True, "object": {},
                           "string": f"{path} text"}.get(kind.group(1), f"{path} text")
        elif said.startswith("Required"):
            fixes[path] = f"{path} text"
    return fixes


def stressed_words(prompt):
    """Words a prompt stresses: UPPER CASE phrases, **bold**, `code` and "quoted" terms."""
    words = set(re.findall(r"\b[A-Z][A-Z0-9_ -]{2,40}[A-Z0-9]\b", prompt))
    words |= set(re.findall(r"\*\*([^*\n]{2,60})\*\*", prompt))
    words |= set(re.findall(r"`([^`\n]{2,60})`", prompt))
    words |= set(re.findall(r"\"([^\"\n]{2,40})\"", prompt))
    return sorted(w.strip() for w in words if w.strip())


CONTEXT_PATTERNS = [
    r"context\[['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]\]",
    r"context (?:key|variable|value)s? [`'\"]([A-Za-z_][A-Za-z0-9_]*)[`'\"]",
    r"\[unset: ([A-Za-z_][A-Za-z0-9_]*)[^\]]*\]",
    r"`context\.([A-Za-z_][A-Za-z0-9_]*)`",
    r"[Ee]ach item in '([A-Za-z_][A-Za-z0-9_]*)'",
]


def named_context_keys(text):
    keys = []
    for pattern in CONTEXT_PATTERNS:
        for key in re.findall(pattern, text):
            if key not in keys:
                keys.append(key)
    return keys


def context_value(key, text):
    """A plausible value for a context key, from what the text says about it."""
    around = " ".join(re.findall(r"[^.\n]*" + re.escape(key) + r"[^.\n]*", text)).lower()
    if re.search(r"must be an object|contains strings|contains numbers", around):
        return [{"id": f"{key}-{i}", "name": f"{key} {i}", "title": f"{key} {i}", "description": f"item {i} of {key}"}
                for i in (1, 2)]
    if "array" in around or "list" in around or "foreach" in around:
        return ["first item", "second item"]
    if "numeric" in around or "number" in around or "count" in around:
        return 2
    if "boolean" in around or "true" in around:
        return True
    return f"{key} value"


def length_bounds(text):
    """(min, max) characters a blocker asks for, when it says so."""
    lo = hi = None
    for a, b in re.findall(r"(\d+)\s*[-–]\s*(\d+)\s*char", text):
        lo, hi = max(lo or 0, int(a)), min(hi or 10**9, int(b))
    for a in re.findall(r"(?:at least|minimum(?: length)?|min(?:imum)?\.?)\s*(\d+)", text, re.I):
        lo = max(lo or 0, int(a))
    for a in re.findall(r"(?:at most|maximum(?: length)?|exceeds maximum length|no more than)\s*(\d+)", text, re.I):
        hi = min(hi or 10**9, int(a))
    return lo, hi


# ---- acting ----------------------------------------------------------------------------------

class Run:
    """One workflow run driven to the end."""

    # `--examples prompt`: copy the artifact the step's own prompt shows before the server's
    # `requiredArtifact.example`, as a model that trusts the workflow author's text would.
    prompt_first = False

    def __init__(self, server, sandbox, workflow_id, mode, max_calls, loop_passes, trace=False):
        self.trace = trace
        self.server = server
        self.sandbox = sandbox
        self.workflow_id = workflow_id
        self.mode = mode
        self.max_calls = max_calls
        self.loop_passes = loop_passes
        self.calls = 0
        self.internal_errors = []
        self.unclear = []
        self.confirmations = 0
        self.loop_decisions = {}  # stepId -> how many decisions sent
        self.last_step = None
        self.followups = set()  # (dimension, level) pairs a follow-up was required for
        self.context = {}
        self.extra_notes = []
        self.length = (None, None)
        self.artifact_fixes = {}
        self.lanes_driven = set()

    def note_unclear(self, why):
        self.unclear.append({"call": self.calls, "why": why})

    def call(self, tool, args):
        self.calls += 1
        reply = self.server.call(tool, args)
        if self.trace:
            shown = {k: v for k, v in args.items() if not k.endswith("Token")}
            outcome = ("error " + str(reply.error_code)) if reply.is_error else (
                "complete" if reply.complete else ("blocked" if reply.blocked else "ok"))
            print(f"[{self.workflow_id} #{self.calls}] {tool} {json.dumps(shown)[:600]}\n    -> {outcome} at {reply.step}"
                  + (f" {json.dumps(reply.blockers)[:800]}" if reply.blocked else "")
                  + (f" {readable(reply)[:400]}" if reply.is_error else ""), file=sys.stderr)
        if reply.is_error and reply.error_code == "INTERNAL_ERROR":
            message = (reply.body.get("message") or reply.text).strip().splitlines()
            self.internal_errors.append({"call": self.calls, "message": (message[0] if message else "")[:300]})
        return reply

    def drive(self):
        prefs = {"autonomy": MODES[self.mode]}
        reply = self.call("start_workflow", start_arguments(
            self.server, self.workflow_id, f"Complete the {self.workflow_id} workflow.", self.sandbox.workspace,
            preferences=prefs))
        if reply.is_error:
            return self.report(False, reply, "start refused")
        return self.follow(reply)

    def drive_lanes(self, reply):
        """A parallel step hands out lanes: each is driven to its end like a subagent would, from
        the lane's own tokens (one after another here; the server does not care who drives)."""
        for lane in reply.body.get("lanes") or []:
            if not lane.get("ackToken") or lane.get("laneId") in self.lanes_driven:
                continue
            self.lanes_driven.add(lane.get("laneId"))
            sub = Run(self.server, self.sandbox, f"{self.workflow_id}#lane{lane.get('index')}",
                      self.mode, self.max_calls, self.loop_passes, self.trace)
            result = sub.follow(sub.call("continue_workflow", {"stateToken": lane["stateToken"]}))
            self.calls += sub.calls
            self.internal_errors += sub.internal_errors
            self.unclear += sub.unclear
            if not result["completed"]:
                self.note_unclear(f"lane {lane.get('index')} did not complete: {result.get('why')}")

    def follow(self, reply):
        last_good = reply
        same = 0
        previous_state = None
        while self.calls < self.max_calls:
            if last_good.complete:
                return self.report(True, last_good)
            if reply.is_error or reply.blocked:
                self.learn_from(reply)
            if last_good.confirm and self.mode == "guided" and not (reply.is_error or reply.blocked):
                self.confirmations += 1  # the simulated user says yes; the agent carries on
            self.last_step = last_good.step
            self.drive_lanes(last_good)
            args = self.answer(last_good, reply)
            state = (last_good.step, reply.is_error, reply.blocked, json.dumps(reply.blockers, sort_keys=True),
                     reply.error_code, json.dumps(reply.body.get("validation"), sort_keys=True))
            same = same + 1 if state == previous_state and (reply.is_error or reply.blocked) else 0
            previous_state = state
            if same >= 3:
                self.note_unclear(f"stuck at {last_good.step}: the same {'error' if reply.is_error else 'block'} four times")
                return self.report(False, reply, "stuck")
            reply = self.call("continue_workflow", args)
            if not reply.is_error:
                if not reply.blocked:
                    self.reset_step_memory()
                    sent = (args.get("output") or {}).get("artifacts") or []
                    if any(a.get("kind") == "wr.loop_control" for a in sent):
                        self.loop_decisions[last_good.step] = self.loop_decisions.get(last_good.step, 0) + 1
                last_good = reply
        return self.report(last_good.complete, last_good, None if last_good.complete else "call bound reached")

    def reset_step_memory(self):
        self.extra_notes = []
        self.length = (None, None)
        self.artifact_fixes = {}

    def learn_from(self, reply):
        """What a blocked answer or an error asks for: context keys, words, a length, an artifact."""
        text = readable(reply)
        keys = named_context_keys(text)
        for key in keys:
            # What an error or a blocker says about a key wins over an earlier guess.
            self.context[key] = context_value(key, text)
        lo, hi = length_bounds(text)
        if lo or hi:
            self.length = (lo, hi)
        for b in reply.blockers:
            dim = (b.get("pointer") or {}).get("dimensionId")
            level = re.search(r'matched "([^"]+)"|level "([^"]+)"', b.get("message") or "")
            if dim and level:
                self.followups.add((dim, level.group(1) or level.group(2)))
        validation = reply.body.get("validation")
        issues = [i for i in (validation or {}).get("issues", []) if isinstance(i, str)] if isinstance(validation, dict) else []
        issues += [b["message"] for b in reply.blockers if isinstance(b.get("message"), str)]
        for issue in issues:
            if issue not in self.extra_notes:
                self.extra_notes.append(issue)
        fixes = field_fixes(issues)
        self.artifact_fixes.update(fixes)
        examples = [e for obj in json_objects(text) for e in artifact_examples(obj)]
        if not keys and not issues and not (lo or hi) and not examples and not fixes:
            self.note_unclear(f"{reply.step or 'error'}: the answer names nothing to fix"
                              + (f" ({reply.error_code})" if reply.is_error else ""))

    def answer(self, pending_reply, reply):
        step = pending_reply.step or "?"
        title = (pending_reply.pending or {}).get("title") or step
        prompt = pending_reply.prompt
        everything = readable(pending_reply) + ("\n" + readable(reply) if reply is not pending_reply else "")
        artifacts = self.artifacts_for(pending_reply, reply, everything)
        notes = self.notes_for(title, prompt)
        for key in named_context_keys(prompt):
            self.context.setdefault(key, context_value(key, prompt))
        context = dict(self.context) if self.context else None
        return advance_arguments(self.server, pending_reply, notes=notes, artifacts=artifacts, context=context)

    def notes_for(self, title, prompt):
        lines = [f"## {title}", "", "What I did: worked through this step as the prompt asks.", ""]
        stressed = stressed_words(prompt)[:40]
        if stressed:
            lines.append("Covered: " + ", ".join(stressed))
        for issue in self.extra_notes:
            lines.append(f"- Addressed: {issue}")
        notes = "\n".join(lines)
        lo, hi = self.length
        if lo and len(notes) < lo:
            notes += "\n\n" + ("Further detail on the work and its result. " * (1 + (lo - len(notes)) // 40))
        if hi and len(notes) > hi:
            notes = notes[: max(hi - 1, 1)]
        return notes.encode()[:NOTES_LIMIT].decode(errors="ignore")

    def artifacts_for(self, pending_reply, reply, everything):
        examples = []
        if self.prompt_first:
            for obj in json_objects(pending_reply.prompt):
                examples.extend(artifact_examples(obj))
        required = (pending_reply.pending or {}).get("requiredArtifact")
        if isinstance(required, dict) and isinstance(required.get("example"), dict):
            examples.append(required["example"])
        for obj in json_objects(everything):
            examples.extend(artifact_examples(obj))
        described = [a for a in artifacts_from_field_lists(everything) if a["kind"] not in {e.get("kind") for e in examples}]
        if described:
            self.note_unclear(f"{pending_reply.step}: no example of {', '.join(a['kind'] for a in described)}; built from its field list")
            examples.extend(described)
        # The prompt asks for an artifact in so many words (not "artifact" in the sense of a file).
        wants = re.search(r"[Aa]rtifact contract:|wr\.contracts\.", pending_reply.prompt)
        # Kinds the step's contract names (`wr.contracts.x` asks for a `wr.x` artifact).
        named = {"wr." + k for k in re.findall(r"wr\.contracts\.([A-Za-z0-9_]+)", everything)}
        if isinstance(required, dict) and isinstance(required.get("kind"), str):
            named.add(required["kind"])
        chosen = {}
        for e in examples:
            optional = ("wr.capability_observation", "workflow_divergence", "wr.user_only_dependency")
            if e.get("kind") in optional and e.get("kind") not in named:
                continue  # reports any step may add, not what this step asks for
            target = e.get("assessmentId")
            if isinstance(target, str) and target.startswith("<"):
                target = None  # a generic example: its placeholder names no assessment
            key = (e["kind"], target)
            if key in chosen:
                if isinstance(e.get("dimensions"), dict) and isinstance(chosen[key].get("dimensions"), dict):
                    chosen[key]["dimensions"].update({k: v for k, v in e["dimensions"].items() if k not in chosen[key]["dimensions"]})
                continue
            chosen[key] = json.loads(json.dumps(e))
        # A generic example of a kind is dropped when a concrete one of that kind is shown.
        concrete = {k for (k, t) in chosen if t is not None}
        by_kind = {key: e for key, e in chosen.items() if key[1] is not None or key[0] not in concrete}
        if not by_kind:
            if wants:
                self.note_unclear(f"{pending_reply.step}: an artifact seems required but no example is shown")
            return None
        return [self.fill(e, pending_reply, everything) for e in by_kind.values()]

    def fill(self, example, pending_reply, everything):
        kind = example.get("kind")
        if kind not in ("wr.loop_control", "wr.assessment"):
            for path, value in self.artifact_fixes.items():
                target = example
                *parents, leaf = path.split(".")
                for p in parents:
                    target = target.setdefault(p, {}) if isinstance(target, dict) else {}
                if isinstance(target, dict):
                    target[leaf] = value
        if kind == "wr.loop_control":
            # Counted when an advance goes through (see `drive`); every other field stays as
            # the example shows it (one server wants `loopId`, the other says to leave it out).
            n = self.loop_decisions.get(pending_reply.step, 0) + 1
            example["decision"] = "stop" if n >= self.loop_passes else "continue"
        elif kind == "wr.assessment":
            dims = example.get("dimensions") if isinstance(example.get("dimensions"), dict) else {}
            segment = self.assessment_segment(example.get("assessmentId"), everything)
            filled = {}
            for dim in list(dims) + [d for d in self.dimensions_named(segment) if d not in dims]:
                # The last level listed (usually the best), unless a follow-up was asked for it.
                levels = self.levels_named(dim, everything) or [dims.get(dim) if isinstance(dims.get(dim), str) else "high"]
                fine = [lv for lv in levels if (dim, lv) not in self.followups]
                filled[dim] = (fine or levels)[-1]
            example["dimensions"] = filled
        return example

    @staticmethod
    def assessment_segment(assessment_id, text):
        """The part of the text about one assessment (from its name to the next assessment's)."""
        if not isinstance(assessment_id, str) or assessment_id.startswith("<"):
            return text
        at = text.find(f'Assessment target: "{assessment_id}"')
        if at < 0:
            at = text.find(f'"{assessment_id}"')
        if at < 0:
            return text
        ends = [i for i in (text.find("Assessment target:", at + 20), text.find("Set assessmentId:", at + 20)) if i > 0]
        return text[at: min(ends) if ends else len(text)]

    @staticmethod
    def dimensions_named(text):
        listed = re.findall(r"^[-*\s]*([A-Za-z][A-Za-z0-9_-]*) \(([^)|]+(?:\|[^)|]+)+)\)", text, re.M)
        return list(dict.fromkeys(
            [d for d, _ in listed]
            + re.findall(r'[Dd]imension "([^"]+)"', text) + re.findall(r'Provide a value for "([^"]+)"', text)))

    @staticmethod
    def levels_named(dim, text):
        m = re.search(re.escape(dim) + r'["`]?\s*\(([^)]+)\)', text)
        if m:
            return [p.strip() for p in m.group(1).split("|") if p.strip()]
        m = re.search(r'"' + re.escape(dim) + r'"[^\n]*?[Aa]llowed levels: ([^.\n]+)', text)
        if m:
            return [p.strip() for p in m.group(1).split(",") if p.strip()]
        return []

    def report(self, completed, reply, why=None):
        out = {"workflow": self.workflow_id, "mode": self.mode, "completed": completed, "calls": self.calls,
               "internalErrors": self.internal_errors, "unclear": self.unclear,
               "confirmations": self.confirmations}
        if not completed:
            out["stoppedAt"] = reply.step or self.last_step
            out["why"] = why
            if reply.is_error:
                out["lastError"] = f"{reply.error_code}: " + (reply.body.get("message") or reply.text)[:300]
        return out


def workflow_ids(directory):
    ids = []
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    value = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(value, dict) and isinstance(value.get("id"), str) and isinstance(value.get("steps"), list):
                ids.append(value["id"])
    return sorted(set(ids))


def run_one(args, workflow_id, mode):
    sandbox = Sandbox(args.workflows, keep=args.keep, flatten=True)
    server = None
    try:
        server = sandbox.server(args.server, cwd=args.cwd, timeout=args.timeout)
        return Run(server, sandbox, workflow_id, mode, args.max_calls, args.loop_passes, args.trace).drive()
    except McpError as e:
        return {"workflow": workflow_id, "mode": mode, "completed": False, "calls": None, "internalErrors": [],
                "unclear": [], "why": f"server failure: {e}", "stderr": sandbox.stderr_tail(8)}
    finally:
        if server is not None:
            server.close()
        sandbox.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the server command, e.g. 'target/debug/workrail mcp'")
    parser.add_argument("--workflows", required=True, help="directory of workflow files to run (searched recursively)")
    parser.add_argument("--mode", choices=sorted(MODES) + ["both"], default="both")
    parser.add_argument("--only", nargs="*", help="run only these workflow ids")
    parser.add_argument("--cwd", help="working directory for the server (default: a private workspace)")
    parser.add_argument("--max-calls", type=int, default=150, help="calls per run before giving up (default 150)")
    parser.add_argument("--loop-passes", type=int, default=2, help="loop passes before a loop_control says stop (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", help="also write the full report to this file")
    parser.add_argument("--keep", action="store_true", help="keep each run's temporary directory")
    parser.add_argument("--trace", action="store_true", help="print every call and its outcome on stderr")
    parser.add_argument("--examples", choices=["server", "prompt"], default="server",
                        help="which example artifact comes first: the server's requiredArtifact.example (default) "
                             "or the one the step's prompt shows, as the workflow's author wrote it")
    args = parser.parse_args(argv)
    args.workflows = os.path.abspath(args.workflows)
    Run.prompt_first = args.examples == "prompt"

    ids = args.only or workflow_ids(args.workflows)
    modes = ["guided", "never-stop"] if args.mode == "both" else [args.mode]
    jobs = [(w, m) for m in modes for w in ids]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda job: run_one(args, *job), jobs))

    for r in results:
        status = "completed" if r["completed"] else f"NOT completed ({r.get('why')}, at {r.get('stoppedAt')})"
        print(f"{r['mode']:<10} {r['workflow']:<45} {status}; calls={r['calls']} "
              f"internal_errors={len(r['internalErrors'])} unclear={len(r['unclear'])}")
        for e in r["internalErrors"]:
            print(f"    INTERNAL_ERROR at call {e['call']}: {e['message']}")
        for u in r["unclear"]:
            print(f"    unclear at call {u['call']}: {u['why']}")
        if r.get("lastError"):
            print(f"    last error: {r['lastError']}")
    for m in modes:
        mine = [r for r in results if r["mode"] == m]
        done = sum(r["completed"] for r in mine)
        ie = sum(len(r["internalErrors"]) for r in mine)
        unclear = sum(len(r["unclear"]) for r in mine)
        print(f"summary {m}: {done} of {len(mine)} completed, {ie} INTERNAL_ERROR, {unclear} unclear calls")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["completed"] and not r["internalErrors"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
