"""``actorbus route``: the router's protocol selection, from the shell.

- ``route eval FILE``: score the router on a ProtocolRouterBench file (scenario
  and module accuracy, macro-F1, confusion matrix, per level, and
  leave-one-level-out beside the published baselines); ``--json OUT`` writes it
  all, decisions included; ``--model`` scores the model-backed router instead.
- ``route select FILE``: the decision record of every module of a scenarios file
  (the benchmark's format; ground truth not needed), as JSON; ``route select
  --text "..."``: the protocol for one module described in words, and why.
- ``route dest --url URL (--skill S | --to A,B)``: ask the router service on the
  bus (``python -m actorbus.services.router``) where one message should go.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from actorbus.actors.system import ActorSystem
from actorbus.cli.common import EXIT_OK, EXIT_USAGE, CliError, bus_options, stdout, with_system
from actorbus.services.router import (
    BenchmarkError,
    FeatureModelError,
    Module,
    evaluate,
    load,
    read_scenarios,
    select,
)
from actorbus.services.router.actor import POLICY_NAMES, RouteDecision, RouteRequest
from actorbus.services.router.evaluate import report


def _model(args: argparse.Namespace) -> Any:
    try:
        return load(args.features)
    except (FeatureModelError, OSError) as exc:
        raise CliError(f"feature model {args.features}: {exc}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    out = stdout()
    model = _model(args)
    try:
        if args.model is not None:
            result = _eval_with_model(args, model, out)
        else:
            result = evaluate(
                args.file,
                model=model,
                lolo=not args.no_lolo,
                progress=lambda what: out.print(f"[dim]{what} ...[/]", highlight=False),
            )
    except BenchmarkError as exc:
        raise CliError(str(exc)) from None
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        out.print_json(json.dumps({k: v for k, v in result.items() if k != "decisions"}))
        return EXIT_OK
    _print(out, result, model.protocols)
    if args.json_out:
        out.print(f"wrote {args.json_out}")
    return EXIT_OK


def _eval_with_model(args: argparse.Namespace, features: Any, out: Any) -> dict[str, Any]:
    """``route eval --model``: the model router's decisions, scored the same way."""
    from actorbus.agents.protocol_router import ModelRouter
    from actorbus.codecs.errors import ModelError

    scenarios = read_scenarios(args.file)
    try:
        router = ModelRouter.from_env(args.model or None, features=features)
    except ModelError as exc:
        raise CliError(str(exc)) from None
    modules = sum(len(s.modules) for s in scenarios)
    out.print(f"[dim]asking {router.client.model} about {modules} modules ...[/]")

    async def decide() -> list[list[Any]]:
        try:
            return await router.decide(scenarios)
        finally:
            await router.close()

    decisions = asyncio.run(decide())
    result = report(args.file, scenarios, decisions, features)
    fell_back = [d.decided_by for ds in decisions for d in ds if d.decided_by != "model"]
    result["router"] = {"model": router.client.model, "spec_only_fallbacks": len(fell_back)}
    if fell_back:
        out.print(
            f"[yellow]{len(fell_back)} of {modules} modules fell back to the spec-only "
            f"router; the first: {fell_back[0]}[/]",
            highlight=False,
        )
    return result


def _print(out: Any, result: dict[str, Any], protocols: tuple[str, ...]) -> None:
    t = Table(title=f"ProtocolRouterBench: {result['file']}")
    for col in ("", "scenarios", "modules", "scenario acc. %", "module acc. %", "macro-F1"):
        t.add_column(col, justify="right")
    rows = [("all", result["overall"]), *result["levels"].items()]
    lolo = result.get("leave_one_level_out")
    for name, r in rows:
        t.add_row(
            name,
            str(r["scenarios"]),
            str(r["modules"]),
            f"{r['scenario_accuracy']:.1f}",
            f"{r['module_accuracy']:.1f}",
            f"{r['macro_f1']:.3f}",
        )
    if lolo is not None:
        p = lolo["pooled"]
        t.add_row(
            "leave-one-level-out",
            str(p["scenarios"]),
            str(p["modules"]),
            f"{p['scenario_accuracy']:.1f}",
            f"{p['module_accuracy']:.1f}",
            f"{p['macro_f1']:.3f}",
        )
    for name, b in result["baselines"].items():
        t.add_row(name, "", "", f"{b['scenario_accuracy']:.1f}", f"{b['module_accuracy']:.1f}", "")
    out.print(t)
    c = Table(title="confusion (rows: truth, columns: decision)")
    c.add_column("")
    for p in protocols:
        c.add_column(p, justify="right")
    for truth, row in result["overall"]["confusion"].items():
        c.add_row(truth, *(str(row[p]) for p in protocols))
    out.print(c)
    for miss in result["misses"]:
        out.print(
            f"  miss {miss['scenario']} {miss['module']!r}: {miss['truth']} expected, "
            f"{miss['selected']} chosen ({miss['decided_by']})",
            highlight=False,
        )


def cmd_select(args: argparse.Namespace) -> int:
    model = _model(args)
    if (args.file is None) == (args.text is None):
        raise CliError("give a scenarios FILE or --text (one of them)", EXIT_USAGE)
    if args.text is not None:
        # one module described in a few words: each sentence a task
        tasks = tuple(t.strip() for t in re.split(r"(?<=[.;!?])\s+", args.text) if t.strip())
        decision = select(Module(id="module", name="", tasks=tasks), model=model)
        if args.json:
            stdout().print_json(json.dumps(decision.record()))
        else:
            stdout().print(
                f"[bold]{decision.selected_protocol}[/]: {escape(decision.rationale)}\n"
                f"[dim]evidence: {escape('; '.join(decision.evidence_spans) or '(none)')}",
                highlight=False,
            )
        return EXIT_OK
    try:
        scenarios = read_scenarios(args.file)
    except BenchmarkError as exc:
        raise CliError(str(exc)) from None
    records = {
        s.id: [select(m, s.description, model=model).record() for m in s.modules] for s in scenarios
    }
    stdout().print_json(json.dumps(records))
    return EXIT_OK


def cmd_dest(args: argparse.Namespace) -> int:
    if (args.skill is None) == (args.to is None):
        raise CliError("give --skill or --to (not both)")
    request = RouteRequest(
        candidates=[a.strip() for a in args.to.split(",") if a.strip()] if args.to else None,
        skill=args.skill,
        key=args.key,
        policy=args.policy,
    )

    async def work(system: ActorSystem, _args: argparse.Namespace) -> None:
        decision = await system.ask(
            f"router/{args.router_key}", request, timeout=10, returns=RouteDecision
        )
        if args.json:
            stdout().print_json(decision.model_dump_json())
        else:
            rest = ", ".join(decision.order[1:]) or "-"
            stdout().print(
                f"{decision.destination}  ({decision.policy}; then {rest})", highlight=False
            )

    return asyncio.run(with_system(args, work))


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    route = sub.add_parser(
        "route",
        parents=[common],
        help="the router's protocol selection: decide, and score on ProtocolRouterBench",
        description="Protocol selection per module (A2A, ACP, ANP, Agora): spec-only and "
        "deterministic on the canonical feature model, or by a model (eval --model).",
    )
    what = route.add_subparsers(dest="route_command", metavar="ACTION", required=True)
    ev = what.add_parser(
        "eval",
        parents=[common],
        help="score the router on a ProtocolRouterBench scenarios file",
    )
    ev.add_argument("file", help="scenarios JSON (ProtocolRouterBench's format, with ground truth)")
    ev.add_argument("--json-out", metavar="OUT", help="also write every figure and decision here")
    ev.add_argument("--json", action="store_true", help="print the figures as JSON")
    ev.add_argument("--no-lolo", action="store_true", help="skip leave-one-level-out")
    ev.add_argument("--features", help="a feature model JSON other than the shipped one")
    ev.add_argument(
        "--model",
        nargs="?",
        const="",
        metavar="NAME",
        help="decide with a model (the environment's, as agents find it: OPENAI_* or "
        "ANTHROPIC_*; NAME overrides its model) at temperature 0, the spec-only router "
        "where it cannot; no leave-one-level-out",
    )
    ev.set_defaults(func=cmd_eval)
    sel = what.add_parser(
        "select",
        parents=[common],
        help="the decision record of every module of a file, or of one described in words",
    )
    sel.add_argument("file", nargs="?", help="scenarios JSON (ProtocolRouterBench's format)")
    sel.add_argument(
        "--text",
        metavar="REQUIREMENTS",
        help="one module's requirements in words (\"agents stream partial results; "
        'no encryption is needed"): its protocol, why, and the evidence',
    )
    sel.add_argument("--json", action="store_true", help="print the decision record as JSON")
    sel.add_argument("--features", help="a feature model JSON other than the shipped one")
    sel.set_defaults(func=cmd_select)
    dest = what.add_parser(
        "dest",
        parents=[common],
        help="ask the router service where one message should go",
    )
    bus_options(dest)
    dest.add_argument("--skill", help="route among the healthy actors offering this skill")
    dest.add_argument("--to", help="route among these addresses (comma-separated)")
    dest.add_argument("--key", help="session or trace id (sticky policies)")
    dest.add_argument(
        "--policy",
        default="latency-aware",
        choices=[p for p in POLICY_NAMES if p != "weighted"],
        help="destination policy (latency-aware)",
    )
    dest.add_argument("--router-key", default="main", help="the router actor's key (main)")
    dest.set_defaults(func=cmd_dest)
