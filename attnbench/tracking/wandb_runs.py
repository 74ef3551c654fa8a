"""W&B tracking: a run's records -> one W&B run per (experiment, design, seed), grouped by experiment.

Every exp run ends by calling ``log_in_child`` (attnbench.cli.main): the logging runs in a child
process killed after ``wandb.timeout_s``, so W&B being absent, offline, slow or failing never
fails a run nor holds it up longer than that. Offline (the default) writes the runs under
RUN_DIR/wandb/; ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads them later. The child gets
no credential from the environment unless mode is online (then only WANDB_API_KEY), so secrets
are masked in the parent, before anything leaves the process: the wandb settings handed to the
child (tags, group, entity, project), and the records and headers it reads (masked when written).
A failure in the child comes back as one line: ``W&B: logging failed (ErrorType: message)``.

What a W&B run holds (names are stable; dashboards key on them, see attnbench.tracking.dashboard):
  config    the run's full config, plus experiment, design, layout, seed, config_hash, device, commit
  history   train/loss against train/step; per context length (x: ``context_len``) the mean of
            niah/acc, multihop/acc, latency/*, memory/*, msa_speedup/*, eval/* over depths, hops, seeds
  summary   one key per record: ``metric@len=65536,depth=0.5`` (and the mean over depths as
            ``niah/acc@len=65536``); projected values under ``<metric>_projected``; the plain
            ``metric`` too where the design has one measured value of it (params/total)
  tables    ``records`` (all of the design's records), ``niah/heatmap`` (depth x length)
One more run per experiment, ``<exp>/report`` (job_type report), holds the report's figures as
images under ``figures/<id>``.

One W&B run per (experiment, design, seed) and config: its id is a hash of them (``run_id``), so a
rerun, a resumed run or a second identical run logs the same run again; offline, the copy written
last replaces the older ones (RUN_DIR/wandb/offline-run-*-<id>), and a run's id never collides
with another config's. ``force=true`` moves the superseded config's runs aside with its records
(attnbench/records/rundir.py). The printed ``wandb sync`` command names exactly the current runs.

Re-log a run directory by hand:  python -m attnbench.tracking.wandb_runs RUN_DIR --mode offline
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd

from attnbench.records.redact import redact, redact_obj, scrubbed_env

HISTORY_PREFIXES = ("niah", "multihop", "latency", "memory", "msa_speedup", "eval", "crossover")
COORDS = (
    ("task", "task"),
    ("context_len", "len"),
    ("depth", "depth"),
    ("hops", "hops"),
    ("op", "op"),
    ("scope", "scope"),
    ("preset", "preset"),
    ("vs", "vs"),
    ("method", "method"),
    ("dtype", "dtype"),
)
TABLE_COLUMNS = ("metric", "value", "unit", "status", "context_len", "depth", "hops", "task", "step", "note")


class Logging:
    """W&B logging of one run directory, running in a child process (see ``start``)."""

    def __init__(self, run_dir: Path, proc: subprocess.Popen | None, message: str = ""):
        self.run_dir, self.proc, self.message = run_dir, proc, message

    def kill(self) -> None:
        """Stop the child and the wandb service it started (its own session) at once."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.communicate()

    def wait(self, timeout_s: float) -> str:
        """Wait at most ``timeout_s`` more; kill the child then. One line saying what happened."""
        if self.proc is None:
            return self.message
        try:
            out, err = self.proc.communicate(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            self.kill()
            return (
                f"W&B: gave up (wandb.timeout_s); the run's records are unaffected; "
                f"re-log with `python -m attnbench.tracking.wandb_runs {self.run_dir}`"
            )
        lines = [l for l in out.splitlines() if l.startswith("W&B:")]
        if self.proc.returncode != 0:
            why = lines[-1] if lines else f"W&B: logging failed ({last_error(err) or 'exit ' + str(self.proc.returncode)})"
            return redact(f"{why}; the run's records are unaffected")
        return redact(lines[-1] if lines else "W&B: done")


def last_error(stderr: str) -> str:
    """The exception line of a traceback (``SomeError: message``), not a line of code around it."""
    found = [l.strip() for l in stderr.splitlines() if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b", l.strip())]
    return found[-1][:300] if found else ""


def unwritable(ex: BaseException, where: Path) -> str | None:
    """The one line naming the W&B directory a write failed in (disk full, quota, read-only or no
    permission), anywhere in ``ex``'s chain (wandb wraps OSErrors); else None. ``where``: the
    directory to name when the error carries no file name."""
    import errno

    from attnbench.records.write import DISK_FULL, free_bytes

    seen: BaseException | None = ex
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (*DISK_FULL, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM):
            path = Path(seen.filename) if seen.filename else where
            if seen.errno in DISK_FULL:
                return f"W&B: disk full writing {path}: {free_bytes(path):,} bytes free"
            return f"W&B: cannot write {path} ({seen.strerror or errno.errorcode.get(seen.errno or 0, 'error')})"
        seen = seen.__cause__ or seen.__context__
    return None


def start(run_dir: Path, wandb_cfg: dict) -> Logging:
    """Start logging ``run_dir`` to W&B in a child process (its own session, so it can be killed whole)."""
    mode = wandb_cfg.get("mode", "offline")
    if mode == "disabled":
        return Logging(run_dir, None, "W&B: disabled (wandb.mode=disabled)")
    wandb_cfg = redact_obj(wandb_cfg)  # the child has no secrets to mask with: mask them here
    env = scrubbed_env(keep=("WANDB_API_KEY",) if mode == "online" else ())
    env.update(WANDB_SILENT="true", WANDB_CONSOLE="off", WANDB_DISABLE_GIT="true", WANDB_DISABLE_CODE="true")
    if mode != "online":
        env["WANDB_MODE"] = "offline"
    cmd = [sys.executable, "-m", "attnbench.tracking.wandb_runs", str(run_dir), "--config", json.dumps(wandb_cfg)]
    try:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True
        )
    except OSError as ex:
        return Logging(run_dir, None, f"W&B: could not start the logging process ({ex}); the run's records are unaffected")
    return Logging(run_dir, proc)


def log_in_child(run_dir: Path, wandb_cfg: dict, timeout_s: float) -> str:
    """Log ``run_dir`` to W&B in a child process killed after ``timeout_s``; one line saying what happened."""
    return start(run_dir, wandb_cfg).wait(timeout_s)


# ---------------------------------------------------------------- the child


def stable_key(metric: str, row: pd.Series, projected: bool = False) -> str:
    coords = []
    for col, short in COORDS:
        v = row.get(col)
        if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        coords.append(f"{short}={v}")
    name = metric + ("_projected" if projected else "")
    return name + ("@" + ",".join(coords) if coords else "")


def summary_of(g: pd.DataFrame) -> dict:
    """Stable summary keys of one design's records (means over seeds/repeats with equal coordinates)."""
    out: dict[str, list[float]] = {}
    ok = g[g["status"].isin(["measured", "projected"]) & g["v"].notna()]
    for status, part in ok.groupby("status"):
        proj = status == "projected"
        for _, r in part.iterrows():
            key = stable_key(r["metric"], r, proj)
            out.setdefault(key, []).append(float(r["v"]))
        for name in ("niah/acc", "multihop/acc"):
            m = part[part["metric"] == name]
            for length, mm in m.groupby("context_len"):
                key = f"{name}{'_projected' if proj else ''}@len={int(length)}"
                out[key] = [float(mm["v"].mean())]
    summary = {k: sum(v) / len(v) for k, v in out.items()}
    for name in ok.loc[ok["status"] == "measured", "metric"].unique():  # plain name where it is unambiguous
        keys = {k for k in summary if k == name or k.startswith(name + "@")}
        if len(keys) == 1 and name not in summary:
            summary[name] = summary[keys.pop()]
    return summary


def history_rows(g: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """(train rows keyed by train/step, rows keyed by context_len) of one design's records."""
    train = g[(g["metric"] == "train/loss") & g["step"].notna() & g["v"].notna() & (g["status"] == "measured")]
    train_rows = [{"train/step": int(step), "train/loss": float(x["v"].mean())} for step, x in train.groupby("step")]
    per_len = g[
        g["metric"].str.split("/").str[0].isin(HISTORY_PREFIXES)
        & g["context_len"].notna()
        & g["v"].notna()
        & g["status"].isin(["measured", "projected"])
    ]
    len_rows = []
    for length, x in per_len.groupby("context_len"):
        row: dict[str, float] = {"context_len": int(length)}
        for (name, status), y in x.groupby(["metric", "status"]):
            row[name + ("_projected" if status == "projected" else "")] = float(y["v"].mean())
        len_rows.append(row)
    return train_rows, len_rows


def _table_value(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    return v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)


def run_id(config_hash: str | None, *parts: object) -> str:
    """The W&B run id of (config, experiment, design, seed), or of (config, experiment, "report")."""
    return hashlib.sha256(json.dumps([config_hash, *[str(p) for p in parts]]).encode()).hexdigest()[:20]


def keep_latest(run_dir: str | Path, ids: dict[str, Path]) -> None:
    """Offline: remove the older copies of each run just written (same id, another directory)."""
    for f in (Path(run_dir) / "wandb").glob("offline-run-*"):
        for rid, latest in ids.items():
            if f.name.endswith("-" + rid) and f.resolve() != latest.resolve():
                shutil.rmtree(f, ignore_errors=True)


def sync_command(run_dirs: list[Path], written: list[Path]) -> str:
    """``wandb sync`` for exactly the runs ``written``: a glob per run directory where its wandb/
    holds only them, else their directories one by one; paths shell-quoted (Hydra names a
    directory ``exp.designs=[softmax]``, a shell pattern unquoted), only the glob left bare."""
    import shlex

    parts = []
    for d in run_dirs:
        ours = {p.resolve() for p in written if p.parent.resolve() == (d / "wandb").resolve()}
        present = {p.resolve() for p in (d / "wandb").glob("offline-run-*")}
        if present == ours:
            parts.append(f"{shlex.quote(str(d / 'wandb'))}/offline-run-*")
        else:
            parts += sorted(shlex.quote(str(p)) for p in written if p.resolve() in ours)
    return "wandb sync " + " ".join(parts)


def log_runs(paths: list[Path], wcfg: dict) -> list[str]:
    """Log the records of these run directories to W&B: one run per (run directory,
    experiment, design, seed), then one run of each directory's report figures; returns the
    ids written."""
    import wandb

    from attnbench.report.frame import load

    data = load(paths)
    df = data.records
    headers = {h["run_dir"]: h for h in data.headers}
    init = _initer(wandb, wcfg)
    written = []
    for (run_dir, exp, design, seed), g in df.groupby(["run_dir", "exp", "design", df["seed"].fillna(-1)], dropna=False):
        written.append(_log_design(wandb, init, run_dir, exp, design, seed, g, headers.get(run_dir, {})))
    return written + _log_figures(wandb, init, headers)


def _initer(wandb, wcfg: dict):
    """wandb.init with this config's project, entity, mode, group and tags, quiet and bounded in time."""
    settings = wandb.Settings(
        console="off",
        x_disable_stats=True,
        x_disable_meta=True,
        disable_git=True,
        save_code=False,
        silent=True,
        init_timeout=max(5.0, float(wcfg.get("timeout_s", 20)) / 2),
    )
    mode = wcfg.get("mode", "offline")

    def init(run_dir: str, exp: str, name: str, job_type: str, config: dict, tags: list[str], rid: str):
        return wandb.init(
            id=rid,
            resume="allow" if mode == "online" else None,
            project=wcfg.get("project") or "attnbench",
            entity=wcfg.get("entity"),
            mode=mode,
            group=wcfg.get("group") or exp,
            job_type=job_type,
            name=name,
            dir=run_dir,
            tags=[t for t in dict.fromkeys([*tags, *(wcfg.get("tags") or [])]) if t][:64],
            config=redact_obj(config),
            settings=settings,
        )

    return init


def _log_design(wandb, init, run_dir: str, exp: str, design: str, seed, g: pd.DataFrame, h: dict) -> str:
    """One design's W&B run: its config, its history, its records table, the needle heatmap, a summary."""
    seed_txt = "-" if seed == -1 else str(int(seed))
    layout = next((str(x) for x in g["layout"].dropna() if str(x)), "")
    config = {
        **(h.get("config") or {}),
        "experiment": exp,
        "design": design,
        "layout": layout,
        "seed": None if seed == -1 else int(seed),
        "config_hash": h.get("config_hash"),
        "device": ",".join(sorted({str(d) for d in g["device"].dropna()})),
        "git_commit": (h.get("git") or {}).get("commit"),
        "hardware": h.get("hardware"),
        "run_dir": run_dir,
    }
    rid = run_id(h.get("config_hash") or run_dir, exp, design, seed_txt)
    run = init(run_dir, exp, f"{exp}/{design}/seed{seed_txt}", exp, config, [exp, str(design)], rid)
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("context_len")
    for prefix in HISTORY_PREFIXES:
        run.define_metric(f"{prefix}/*", step_metric="context_len")
    train_rows, len_rows = history_rows(g)
    for row in train_rows + len_rows:
        run.log(row)
    _log_tables(wandb, run, g)
    summary = summary_of(g)
    summary["records/measured"] = int((g["status"] == "measured").sum())
    summary["records/projected"] = int((g["status"] == "projected").sum())
    summary["records/skipped"] = int((g["status"] == "skipped").sum())
    summary["records/failed"] = int((g["status"] == "failed").sum())
    run.summary.update(summary)
    written = run.id
    finish(run, run_dir)
    return written


def _log_tables(wandb, run, g: pd.DataFrame) -> None:
    """The run's records as a W&B table, and the needle accuracies by depth and length."""
    cols: list[str | int] = [c for c in TABLE_COLUMNS]
    run.log(
        {
            "records": wandb.Table(
                columns=cols,
                data=[
                    [_table_value(r.get(c)) if c != "value" else _table_value(r["v"] if pd.notna(r["v"]) else r["value"]) for c in cols]
                    for _, r in g.iterrows()
                ],
                allow_mixed_types=True,
            )
        }
    )
    niah = g[(g["metric"] == "niah/acc") & g["depth"].notna()]
    if not niah.empty:
        run.log(
            {
                "niah/heatmap": wandb.Table(
                    columns=["depth", "context_len", "accuracy", "status"],
                    data=[[float(r["depth"]), int(r["context_len"]), _table_value(r["v"]), r["status"]] for _, r in niah.iterrows()],
                    allow_mixed_types=True,
                )
            }
        )


def _log_figures(wandb, init, headers: dict[str, dict]) -> list[str]:
    """The report's figures, one run per experiment run directory that has them."""
    from attnbench.report.frame import FIGURE_DIR

    written = []
    for run_dir, h in headers.items():
        figs = sorted((Path(run_dir) / FIGURE_DIR).glob("*.png"))
        if not figs:
            continue
        exp = h.get("exp") or "attnbench"
        run = init(
            run_dir,
            exp,
            f"{exp}/report",
            "report",
            {**(h.get("config") or {}), "experiment": exp, "design": "all", "config_hash": h.get("config_hash"), "run_dir": run_dir},
            [exp, "report"],
            run_id(h.get("config_hash") or run_dir, exp, "report"),
        )
        run.log({f"figures/{f.stem}": wandb.Image(str(f), caption=f.stem) for f in figs})
        written.append(run.id)
        finish(run, run_dir)
    return written


def finish(run, run_dir: str | Path) -> None:
    """Finish ``run``; offline, then drop the older copies of it (see ``keep_latest``)."""
    sync_dir = Path(run.settings.sync_dir) if getattr(run.settings, "sync_dir", None) else None
    rid = run.id
    run.finish()
    if sync_dir is not None and sync_dir.name.startswith("offline-run-"):
        keep_latest(run_dir, {rid: sync_dir})
        _written_dirs.append(sync_dir)


_written_dirs: list[Path] = []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnbench.tracking.wandb_runs", description="Log run directories to W&B.")
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--config", default="{}", help="the wandb config section as JSON")
    ap.add_argument("--mode", choices=("offline", "online", "disabled"))
    args = ap.parse_args(argv)
    wcfg = json.loads(args.config)
    if args.mode:
        wcfg["mode"] = args.mode
    if wcfg.get("mode") == "disabled":
        print("W&B: disabled")
        return 0
    try:
        import wandb  # noqa: F401
    except ImportError:
        print("W&B: wandb is not installed; nothing logged")
        return 0
    try:
        ids = log_runs(args.run_dirs, wcfg)
    except Exception as ex:  # one line for the parent (the traceback's last line is often code)
        first = str(ex).strip().splitlines()[0] if str(ex).strip() else ""
        where = unwritable(ex, args.run_dirs[0] / "wandb")
        print(redact(where or f"W&B: logging failed ({type(ex).__name__}: {first[:300]})"))
        return 1
    where = ", ".join(str(d / "wandb") for d in args.run_dirs)
    if wcfg.get("mode", "offline") == "online":
        print(f"W&B: {len(ids)} runs logged online to project {wcfg.get('project')}")
    else:
        print(f"W&B: {len(ids)} offline runs in {where}; upload later with `{sync_command(args.run_dirs, _written_dirs)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
