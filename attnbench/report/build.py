"""Run directories -> report.html (self-contained) and report.pdf (the same page, printed).

    python -m attnbench report RUN_DIR [RUN_DIR ...] [--out DIR] [--no-pdf]
    python -m attnbench report --all-experiments        # experiments/<name>/ -> reports/<name>/
    python -m attnbench report --decision               # every experiment -> reports/decision/

Every experiment run ends by calling ``build_report`` on its own run directory (attnbench.cli.main).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import shutil
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd
import yaml
from jinja2 import Environment, PackageLoader

from attnbench import __version__
from attnbench.records.redact import redact

from attnbench.verdicts.claims.judge import SEED_RULE, judge_all
from attnbench.verdicts.claims.questions import judge_questions
from attnbench.verdicts.claims.c7_serving import SERVING_METRICS

from .brief import brief
from .caveats import caveats
from attnbench.report.frame import FIGURE_DIR, RunData, load
from attnbench.verdicts.readings import is_preset
from attnbench.report.figures import cost_figures  # noqa: F401  registers every figure, in report order
from attnbench.report.style import FIGURES, render
from attnbench.report.appendix import configs_file, environments_file, other_file
from attnbench.report.pages import breakable, column_parts, fewer_colours, repo_paths, repository_root
from .pdf import PdfError, html_to_pdf
from attnbench.report.tables.decision import DECISION_METRICS, decision_table
from attnbench.report.tables.extra import EXTERNAL_METRICS, external_table, other_table, presets_table, training_table
from attnbench.report.tables.readiness import serving_chain_table, serving_table


@dataclass
class ReportResult:
    html: Path
    pdf: Path | None
    pdf_error: str | None
    figures: dict[str, Path] = field(default_factory=dict)  # id -> PNG of the figures that had records
    seconds: dict[str, float] = field(default_factory=dict)  # time per stage
    problems: list[str] = field(default_factory=list)  # damaged results files: what was left out, one line each
    bottom_line: list[str] = field(default_factory=list)  # the decision brief's bottom line (README's first screen)


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("attnbench.report", "templates"),
        autoescape=True,
        trim_blocks=False,
        lstrip_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters["parts"] = column_parts  # a table wider than the page: its column groups (pages.py)
    env.filters["breakable"] = breakable  # a path or a long number may wrap in a narrow cell
    return env


def png_size(png: bytes) -> tuple[int, int]:
    return struct.unpack(">II", png[16:24])


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def figures_section(data: RunData, out_dir: Path) -> tuple[list[dict], dict[str, Path]]:
    """Every figure drawn from these records, and its PNG; a figure without records is left out
    of the report (``missing`` only for one that could not be drawn)."""
    fig_dir = out_dir / FIGURE_DIR
    items, files = [], {}
    for spec in FIGURES:
        item: dict[str, object] = {
            "id": spec.id,
            "title": spec.title,
            "caption": spec.caption,
            "src": None,
            "missing": f"No records for this yet (metrics: {', '.join(spec.metrics)}).",
        }
        try:
            png = render(spec, data.records)
        except Exception as ex:  # one broken figure must not cost the whole report
            png = None
            item["missing"] = f"Could not draw this figure: {type(ex).__name__}: {ex}"
        stale = fig_dir / f"{spec.id}.png"
        if png is None:
            stale.unlink(missing_ok=True)
            if str(item["missing"]).startswith("No records"):
                continue
        else:
            fig_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(stale, png)
            files[spec.id] = stale
            w, h = png_size(png)
            item.update(
                src="data:image/png;base64," + base64.b64encode(fewer_colours(png)).decode("ascii"), width=w // 2, height=h // 2
            )  # 150 dpi PNG shown at 75 px per inch of figure
        items.append(item)
    return items, files


def _dedupe(items: Iterable[tuple[str, dict]]) -> list[tuple[dict, list[str]]]:
    """Group equal dicts, keeping which run directories each came from."""
    seen: dict[str, tuple[dict, list[str]]] = {}
    for run_dir, obj in items:
        key = json.dumps(obj, sort_keys=True, default=str)
        entry = seen.setdefault(key, (obj, []))
        if run_dir not in entry[1]:
            entry[1].append(run_dir)
    return list(seen.values())


def configs_section(data: RunData) -> list[dict]:
    latest: dict[str, dict] = {}
    for h in data.headers:  # the last (re)start of each run directory holds the config it ran
        latest[h["run_dir"]] = h
    out = []
    for cfg, run_dirs in _dedupe((d, {"hash": h.get("config_hash"), "config": h.get("config")}) for d, h in latest.items()):
        out.append(
            {
                "hash": cfg["hash"],
                "run_dirs": run_dirs,
                "yaml": yaml.safe_dump(cfg["config"], sort_keys=False, default_flow_style=False, width=100),
            }
        )
    return out


def environments_section(data: RunData) -> list[dict]:
    def env(h):
        return {"git": h.get("git"), "hardware": h.get("hardware"), "versions": h.get("versions")}

    out = []
    for i, (e, run_dirs) in enumerate(_dedupe((h["run_dir"], env(h)) for h in data.headers)):
        hw, git, versions = e.get("hardware") or {}, e.get("git") or {}, e.get("versions") or {}
        items = [
            ("runs", ", ".join(run_dirs)),
            ("commit", f"{git.get('commit', 'unknown')}" + (" (uncommitted changes)" if git.get("dirty") else "")),
            ("hardware", ", ".join(f"{k}={v}" for k, v in hw.items())),
            ("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)),
        ]
        device = hw.get("gpu") or hw.get("cpu") or "unknown"
        out.append({"label": f"environment {i + 1}: {device}", "rows": items, "device": device})
    return out


def budget_lines(data: RunData) -> list[str]:
    """Each run directory's last eval/budget_summary (longctx.budget_summary): what the budget left
    out at the load seen. The report's first line, as it was the run's last."""
    d = data.records[data.records["metric"] == "eval/budget_summary"]
    lines = {str(run): str(g.iloc[-1]["note"]) for run, g in d.groupby("run_dir", sort=True) if pd.notna(g.iloc[-1]["note"])}
    if len(lines) < 2:
        return list(lines.values())
    # several runs merged (the decision report): each line says whose it is (experiment/run folder)
    return [f"{'/'.join(Path(run).parts[-2:])}: {note}" for run, note in lines.items()]


def budget_status(lines: list[str]) -> str | None:
    """The budget lines of many runs in one line (each run's own goes to the appendix's table)."""
    if len(lines) < 2:
        return lines[0] if lines else None
    counts = [re.search(r": (\d+) of (\d+) cells skipped", line) for line in lines]
    skipped = sum(int(m.group(1)) for m in counts if m)
    planned = sum(int(m.group(2)) for m in counts if m)
    runs = sum(1 for m in counts if m and int(m.group(1)))
    return (
        f"{len(lines)} runs under a time budget: {skipped} of {planned} cells skipped for it, in {runs} run{'s' if runs != 1 else ''} "
        f"(each run's line: Run status, in the appendix)"
    )


def run_states(data: RunData) -> list[dict]:
    """How each run directory's last (re)start ended, from its footer line."""
    ended = {f["run_dir"]: f for f in data.footers}
    last_start = {}
    for h in data.headers:
        last_start[h["run_dir"]] = h.get("started", "")
    states: Counter[str] = Counter()
    for run_dir, started in last_start.items():
        f = ended.get(run_dir)
        if f is None or str(f.get("ended", "")) < str(started):
            states["no end recorded (running, or killed)"] += 1
        else:
            why = f" ({str(f['error'])[:200]})" if f.get("error") else ""
            states[f.get("status", "unknown") + why] += 1
    return [{"text": f"{n} run{'s' if n > 1 else ''} {s}", "bad": not s.startswith("completed")} for s, n in sorted(states.items())]


def facts(data: RunData) -> list[tuple[str, str]]:
    df = data.records
    counts = df["status"].value_counts()
    exps = ", ".join(sorted({str(e) for e in df["exp"].dropna()} | {str(h.get("exp")) for h in data.headers}))
    devices = ", ".join(sorted({str(d) for d in df["device"].dropna()})) or "—"
    # the trained task models only: each run's own backbone (its header's model) where the run
    # recorded a model's parameters, and each width-ladder model (scale/model: width and active)
    models = df[(df["metric"] == "params/active") & ~is_preset(df)]
    ladder = df[df["metric"] == "scale/model"]
    active = pd.concat([models["v"], ladder["v"]]).dropna()
    widths = sorted(
        {
            int(m["d_model"])
            for h in data.headers
            if h.get("run_dir") in set(models["run_dir"])
            and isinstance(m := (h.get("config") or {}).get("model"), dict)
            and m.get("d_model")
        }
        | ({int(w) for w in ladder["width"].dropna()} if "width" in ladder else set())
    )
    sizes = (
        f"{active.min():,.0f}-{active.max():,.0f} active parameters, width {', '.join(map(str, widths)) or '?'}: verdicts hold in this range only"
        if not active.empty
        else "—"
    )
    return [
        ("experiments", exps or "—"),
        ("results files", str(len(data.files))),
        ("devices", devices),
        ("model sizes", sizes),
        ("records", ", ".join(f"{counts.get(s, 0)} {s}" for s in ("measured", "projected", "analytic", "skipped", "failed"))),
    ]


def appendix(data: RunData, shown: set[str], budget: list[str], out_dir: Path) -> dict:
    """The appendix's parts (the template's names): each run's budget line where several runs
    are merged (one run's is the status line itself), the trainings, every other measurement,
    the caveats, the configs and environments (in files beside the report when many)."""
    other = other_table(data.records, shown)
    configs, environments = configs_section(data), environments_section(data)
    return {
        "budget_lines": budget if len(budget) > 1 else [],
        "training": training_table(data.train),
        "other": other,
        "other_file": other_file(other, out_dir),
        "caveats": caveats(data),
        "configs": configs,
        "configs_file": configs_file(configs, out_dir),
        "environments": environments,
        "environments_file": environments_file(environments, out_dir),
    }


# the metrics the report's tables show (the figures add theirs): the appendix lists every other one
SHOWN = set(DECISION_METRICS) | set(SERVING_METRICS) | set(EXTERNAL_METRICS) | {"eval/budget_summary"}


def tables(df: pd.DataFrame, train: pd.DataFrame | None) -> dict:
    """The report's tables beside the claims, by their names in the template."""
    return {
        "decision": decision_table(df, train),
        "presets": presets_table(df),
        "external": external_table(df),  # models attnbench did not train in-process: apart, never judged
        "serving": serving_table(df),
        "serving_chains": serving_chain_table(df),
    }


def build_report(
    names: Iterable[Path | str],
    out_dir: Path | str | None = None,
    *,
    pdf: bool = True,
    pdf_timeout_s: float = 60.0,
    command: str | None = None,
    title: str | None = None,
    intro: str | None = None,
) -> ReportResult:
    """Write report.html (and report.pdf) for the records under ``paths`` into ``out_dir``.

    ``out_dir`` defaults to the one run directory given, or the directory the given ones share.
    """
    t0 = time.perf_counter()
    paths = [Path(p) for p in names]
    data = load(paths)
    if out_dir is None:  # beside the results: a directory given, or the directory of a file given
        dirs = [p if p.is_dir() else p.parent for p in paths]
        out_dir = dirs[0] if len(dirs) == 1 else Path(os.path.commonpath([str(d.resolve()) for d in dirs]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seconds = {"load": time.perf_counter() - t0}

    t = time.perf_counter()
    figures, fig_files = figures_section(data, out_dir)
    seconds["figures"] = time.perf_counter() - t

    t = time.perf_counter()
    df = data.records
    shown = SHOWN | {m for f in FIGURES for m in f.metrics}
    exps = sorted({str(e) for e in df["exp"].dropna()} | {str(h.get("exp")) for h in data.headers if h.get("exp")})
    times = [str(x) for x in df["time"].dropna()] + [str(f.get("ended")) for f in data.footers]
    claims = judge_all(df, data.train)
    from attnbench.bench import (
        costmodel,
    )  # Q-tokens' projected half: the verdicts read records only (on use: loading a report loads no cost model)

    questions = judge_questions(df, data.train, selection_cost=costmodel.selection_cost)
    budget = budget_lines(data)
    context = {
        "title": title or f"attnbench report: {', '.join(exps) or 'no records'}",
        "brief": (summary := brief(df, data.train, claims, questions)),
        "budget_status": budget_status(budget),
        "intro": intro,
        "version": __version__,
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "last_record": max(times) if times else None,
        "run_states": run_states(data),
        "facts": facts(data),
        **tables(df, data.train),
        "claims": claims,
        "claims_measured": [(c, v) for c, v in claims if v.verdict != "not yet measured"],  # the detail rows
        "questions": questions,
        "seed_rule": SEED_RULE,
        "figures": figures,
        "command": command or "python -m attnbench report " + " ".join(str(p) for p in paths),
        **appendix(data, shown, budget, out_dir),
    }
    html = environment().get_template("report.html.j2").render(**context)
    checkouts = [repository_root()] + ([Path.cwd()] if (Path.cwd() / "pyproject.toml").exists() else [])
    html = redact(repo_paths(html, checkouts))  # no path of the machine that ran it: see pages.py
    html_path = out_dir / "report.html"
    _atomic_write(html_path, html.encode("utf-8"))
    seconds["html"] = time.perf_counter() - t

    pdf_path, pdf_error = None, None
    if pdf:
        t = time.perf_counter()
        try:
            pdf_path = html_to_pdf(html_path, out_dir / "report.pdf", timeout_s=pdf_timeout_s)
        except PdfError as ex:
            pdf_error = str(ex)
        seconds["pdf"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    return ReportResult(html_path, pdf_path, pdf_error, fig_files, seconds, data.problems, summary.lines if summary else [])


def experiment_dirs(root: Path | str = ".") -> list[Path]:
    """experiments/<name>/ folders that hold at least one results.jsonl."""
    root = Path(root)
    return [
        p
        for p in sorted((root / "experiments").iterdir())
        if p.is_dir() and any(f for f in p.rglob("results.jsonl") if "wandb" not in f.parts)
    ]


def all_experiments(root: Path | str = ".", *, pdf: bool = True) -> list[ReportResult]:
    """experiments/<name>/ (its results.jsonl files, below it too) -> reports/<name>/report.{html,pdf}."""
    root = Path(root)
    results = []
    for exp_dir in experiment_dirs(root):
        out = root / "reports" / exp_dir.name
        results.append(
            build_report(
                [exp_dir],
                out,
                pdf=pdf,
                command="python -m attnbench report --all-experiments",
                title=f"attnbench report: {exp_dir.name} (recorded reference runs)",
            )
        )
    return results


DECISION_DIR = "decision"


def decision_report(root: Path | str = ".", *, pdf: bool = True, out: Path | str | None = None) -> ReportResult:
    """Every recorded experiment merged into reports/decision/ (or out): the page a team reads to decide."""
    root = Path(root)
    dirs = experiment_dirs(root)
    if not dirs:
        raise FileNotFoundError(f"{root / 'experiments'}: no results.jsonl in any experiment folder")
    result = build_report(
        dirs,
        Path(out) if out is not None else root / "reports" / DECISION_DIR,
        pdf=pdf,
        command="python -m attnbench report --decision" + (f" --out {out}" if out is not None else ""),
        title="attnbench decision report: every recorded experiment",
        intro=f"Merged from {', '.join(d.name for d in dirs)} (experiments/<name>/). Each table cell and "
        f"claim names the records it comes from; hover a cell for its source.",
    )
    headline = result.figures.get("niah_vs_length")
    if headline is not None:  # the README's headline figure, beside the report (figures/ is not kept in git)
        shutil.copyfile(headline, result.html.parent / "headline.png")
    if out is None and (root / "README.md").exists():  # the README's first screen says what the report found
        readme = root / "README.md"
        readme.write_text(with_bottom_line(readme.read_text(), result.bottom_line))
    return result


BOTTOM_LINE = re.compile(r"(<!-- bottom-line: generated by python -m attnbench report --decision -->\n)(.*?)(<!-- /bottom-line -->)", re.S)


def with_bottom_line(text: str, lines: list[str]) -> str:
    """The README with its bottom-line block replaced by the decision brief's lines (unchanged without a block)."""
    body = "".join(f"- {line}\n" for line in lines)
    return BOTTOM_LINE.sub(lambda m: m.group(1) + body + m.group(3), text)


__all__ = ["ReportResult", "build_report", "all_experiments", "decision_report"]
