"""Property test: random bad input of every kind stops with one line naming the problem (no traceback).

Kinds: invalid configs (composed and validated as the CLI does), unusable run or cache
directories and a run directory holding another config (what the CLI checks before Hydra
creates anything), and the ``report`` command's inputs, damaged results files included (the
report is written, the damage named in one line, exit code 2).
"""

from __future__ import annotations

import contextlib
import io
import os
import string
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbench.cli.preflight import config_error
from attnbench.cli.main import report_main
from attnbench.config import MAX_SEED
from attnbench.config import ranges as ranges_mod
from attnbench.config import schema as schema_mod
from attnbench.experiments import CACHE_USERS
from attnbench.records.integrity import encode_line

DESIGNS = ["softmax", "lightning", "lightning_hybrid", "sliding_window", "swa_hybrid", "msa"]
EXPS = ["smoke", "needle_4m", "multihop", "train", "kv_memory", "crossover", "msa_speedup", "kernels_cpu", "kernels_gpu"]
# words Hydra's override grammar reads as values, not names (design=null is "no design", valid)
KEYWORDS = {"null", "true", "false", "nan", "inf"}
names = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12).filter(lambda s: s not in KEYWORDS)
ALL_DESIGNS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "attention").glob("*.yaml"))
CONFIG_KINDS, DIR_KINDS, REPORT_KINDS, DAMAGE = 20, 3, 4, ("garbled", "utf8", "number", "torn", "junk", "nochecksum")


@st.composite
def invalid(draw):
    """(overrides, the field the error must name) for one invalid config."""
    exp = draw(st.sampled_from(EXPS))
    design = draw(st.sampled_from(DESIGNS))
    kind = draw(st.integers(0, CONFIG_KINDS - 1))
    if kind == 0:
        bad = draw(names.filter(lambda s: s not in ALL_DESIGNS))
        return [f"+exp={exp}", f"design={bad}"], "design"
    if kind == 1:
        good = draw(st.text(alphabet="SLWM", min_size=0, max_size=3))
        bad = draw(st.sampled_from("ABXYZslwmQ0"))
        return [f"+exp={exp}", f"attention.{design}.layout={good}{bad}"], f"attention.{design}.layout"
    if kind == 2:
        return [f"+exp={exp}", f"attention.{design}.window={draw(st.integers(-1000, 0))}"], f"attention.{design}.window"
    if kind == 3:
        return [f"+exp={exp}", f"attention.{design}.top_k={draw(st.integers(-1000, 0))}"], f"attention.{design}.top_k"
    if kind == 4:
        bs = draw(st.integers(3, 4096).filter(lambda n: n & (n - 1)))
        return [f"+exp={exp}", "backend=triton", f"attention.{design}.block_size={bs}"], f"attention.{design}.block_size"
    if kind == 5:
        heads = draw(st.integers(2, 64))
        kv = draw(st.integers(2, 64).filter(lambda k: heads % k))
        return [f"+exp={exp}", f"model.n_heads={heads}", f"model.n_kv_heads={kv}"], "model.n_kv_heads"
    if kind == 6:
        n = draw(st.integers(-(10**9), 15))
        return [f"+exp={exp}", f"eval.context_lens=[1024,{n}]"], "eval.context_lens[1]"
    if kind == 7:
        word = draw(st.text(alphabet=string.ascii_letters, min_size=1, max_size=8).filter(lambda s: s.lower() not in ("s", "m", "h")))
        return [f"+exp={exp}", f"exp.budget={word}"], "exp.budget"
    if kind == 8:
        key = draw(
            names.filter(
                lambda s: (
                    s
                    not in (
                        "name",
                        "d_model",
                        "n_layers",
                        "n_heads",
                        "n_kv_heads",
                        "head_dim",
                        "rotary_frac",
                        "rope_base",
                        "n_experts",
                        "top_k_experts",
                        "d_expert",
                        "balance_coef",
                        "vocab_size",
                        "tie_embeddings",
                        "init_std",
                    )
                )
            )
        )
        return [f"+exp={exp}", f"model.{key}=1"], f"model.{key}"
    if kind == 9:
        word = draw(st.text(alphabet=string.ascii_letters, min_size=1, max_size=6))
        return [f"+exp={exp}", f"model.d_model={word}"], "model.d_model"
    if kind == 10:
        return [f"+exp={exp}", f"device={draw(names.filter(lambda s: s not in ('auto', 'cpu', 'cuda')))}"], "device"
    if kind == 11:
        experts = draw(st.integers(1, 16))  # set here: experiments choose their own expert counts
        top_k = draw(st.integers(experts + 1, 64))
        return [f"+exp={exp}", f"model.n_experts={experts}", f"model.top_k_experts={top_k}"], "model.top_k_experts"
    if kind == 12:
        return [f"+exp={exp}", f"train.lr={draw(st.floats(-1.0, 0.0))}"], "train.lr"
    if kind == 13:
        seed = draw(st.one_of(st.integers(-(10**12), -1), st.integers(MAX_SEED + 1, 10**15)))
        return [f"+exp={exp}", f"seed={seed}"], "seed"
    if kind == 14:
        threads = draw(st.one_of(st.integers((os.cpu_count() or 1) + 1, 100_000), st.integers(-1000, -1)))
        return [f"+exp={exp}", f"threads={threads}"], "threads"
    if kind == 15:
        return [f"+exp={exp}", "eval.context_lens=[]"], "eval.context_lens"
    if kind == 16:
        field = draw(st.sampled_from(["exp.budget", "train.budget"]))
        return [f"+exp={exp}", f"{field}={draw(st.sampled_from(['0', '0s', '0m', '0h0m', '0.0']))}"], field
    if kind == 17:  # far more memory than any machine this runs on has
        return ["+exp=smoke", f"exp.seq_len={draw(st.integers(10**10, 10**13))}"], "exp.seq_len"
    if kind == 18:
        return [f"+exp={exp}", f"lock={draw(names.filter(lambda s: s not in ('wait', 'refuse')))}"], "lock"
    bad = draw(names.filter(lambda s: s not in EXPS))
    return [f"+exp={bad}"], "exp"


@st.composite
def bad_directory(draw):
    """(kind, exp, how deep below the blocking file) for a run or cache directory that cannot be used."""
    return draw(st.integers(0, DIR_KINDS - 1)), draw(st.sampled_from(CACHE_USERS)), draw(st.integers(0, 2))


@st.composite
def bad_report(draw):
    """(kind, what damages the results file, which line, junk bytes) for the report command."""
    return (
        draw(st.integers(0, REPORT_KINDS)),
        draw(st.sampled_from(DAMAGE)),
        draw(st.integers(0, 5)),
        draw(st.binary(min_size=1, max_size=40)),
    )


def one_line(message: str | None, case) -> str:
    assert message is not None, f"{case} was accepted"
    lines = [l for l in message.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in message, f"{case}: {message!r}"
    return lines[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid())
def test_every_invalid_config_gets_one_line_naming_the_field(case):
    overrides, field = case
    message = one_line(config_error(overrides), overrides)
    assert field in message, f"{overrides}: {message!r} does not name {field}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bad_directory())
def test_unusable_directories_get_one_line_before_anything_is_created(case):
    kind, exp, depth = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "file").write_text("in the way\n")
        below = Path(tmp / "file", *["sub"] * depth)
        before = sorted(tmp.rglob("*"))
        env = {}
        if kind == 0:
            overrides, want = ["+exp=smoke", f"hydra.run.dir={below}"], "run directory"
        elif kind == 1:
            # device=cpu: an exp made for GPUs (train_gpu) would first say there is no CUDA device
            overrides, want = [f"+exp={exp}", "device=cpu", f"hydra.run.dir={tmp}/run"], "cache directory"
            env["ATTNBENCH_CACHE"] = str(below / "cache")
        else:  # a directory holding another config's records
            run = tmp / "run"
            run.mkdir()
            (run / "results.jsonl").write_bytes(encode_line({"type": "header", "config_hash": "0ther0config"}))
            before = sorted(tmp.rglob("*"))
            overrides, want = ["+exp=smoke", f"hydra.run.dir={run}"], "0ther0config"
        with mock.patch.dict(os.environ, env):
            message = one_line(config_error(overrides, check_dirs=True), case)
        assert want in message, (case, message)
        assert sorted(tmp.rglob("*")) == before  # nothing created


def damaged_results(path: Path, damage: str, at: int, junk: bytes) -> None:
    """A small results file (header, one cell of 3 records, footer), then one line damaged."""
    recs = [
        {
            "type": "record",
            "exp": "smoke",
            "design": "softmax",
            "layout": "S",
            "metric": f"smoke/m{i}",
            "value": 0.5 + i,
            "unit": "ratio",
            "status": "measured",
            "cell": "c0ffee",
        }
        for i in range(3)
    ]
    objs = [
        {"type": "header", "exp": "smoke", "config_hash": "h", "config": {}},
        *recs,
        {"type": "commit", "cell": "c0ffee", "coords": {"design": "softmax"}, "records": 3},
        {"type": "footer", "exp": "smoke", "status": "completed", "wall_s": 1.0},
    ]
    lines = [encode_line(o) for o in objs]
    i = 1 + at % (len(lines) - 1)  # never the header: a file without one is another kind
    if damage == "garbled":  # still valid JSON, one value changed: only the checksum tells
        lines[i] = lines[i].replace(b'"type": "', b'"type": "x', 1)
    elif damage == "utf8":
        lines[i] = lines[i][:5] + b"\xff" + junk + lines[i][5:]
    elif damage == "number":
        lines[i] = b"123\n"
    elif damage == "torn":
        lines, i = lines[:-1] + [lines[-1][: max(1, len(lines[-1]) // 2)]], len(lines) - 1
    elif damage == "junk":
        lines[i] = junk.replace(b"\n", b" ") + b"\n"
    else:  # a line without its checksum after lines with one
        lines[i] = lines[i].replace(b', "crc32": "', b', "crc": "', 1)
    path.write_bytes(b"".join(lines))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bad_report())
def test_every_bad_report_input_gets_one_line(case):
    kind, damage, at, junk = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "file").write_bytes(b"not results\n" + junk)
        (tmp / "empty").mkdir()
        argv, want = {
            0: ([str(tmp / "missing")], "no such file"),
            1: ([str(tmp / "file")], "not an attnbench results file"),
            2: ([str(tmp / "empty")], "no results.jsonl"),
            3: ([str(tmp / "empty"), "--out", str(tmp / "file")], "--out"),
        }.get(kind, ([str(tmp / "run")], "line "))
        if kind == REPORT_KINDS:
            (tmp / "run").mkdir()
            damaged_results(tmp / "run" / "results.jsonl", damage, at, junk)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = report_main([*argv, "--no-pdf"])
            except SystemExit as ex:
                code = ex.code
        assert code == 2, (case, err.getvalue())
        message = one_line(err.getvalue(), case)
        assert want in message, (case, message)
        if kind == REPORT_KINDS:  # the report is written anyway, the damage flagged in it
            assert "Damaged results" in (tmp / "run" / "report.html").read_text()


# ---------------------------------------------------------------- declared ranges (issue 30, C)


# where each schema class sits in the config (a list item or dict value: its first element)
WHERE = {
    "RootConfig": "",
    "DesignConfig": "attention.{design}.",
    "ModelConfig": "model.",
    "TaskConfig": "task.",
    "Stage": "train.stages.0.",
    "TrainConfig": "train.",
    "EvalConfig": "eval.",
    "ExpConfig": "exp.",
    "WandbConfig": "wandb.",
    "ReportConfig": "report.",
    "KernelShapes": "kernels.shapes.",
    "KernelsConfig": "kernels.",
    "HardwareConfig": "hardware.",
    "BenchConfig": "bench.",
    "ScaleConfig": "scale.",
    "ExternalConfig": "external.",
}


def numeric_fields() -> dict[str, dict[str, str]]:
    """Every field of the schema that holds numbers (int, float, or a list or dict of them), by class."""
    import dataclasses
    import typing

    found: dict[str, dict[str, str]] = {}
    todo, seen = [schema_mod.RootConfig], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            inner = args[-1] if args else tp
            if dataclasses.is_dataclass(inner):
                todo.append(inner)
            elif inner in (int, float) and inner is not bool:
                found.setdefault(cls.__name__, {})[f.name] = "int" if inner is int else "float"
    return found


def test_every_numeric_field_has_a_declared_range():
    fields = numeric_fields()
    classes = {c.__name__: c for c in _classes()}
    missing = sorted(f"{c}.{f}" for c, fs in fields.items() for f in fs if ranges_mod.range_of(classes[c], f) is None)
    assert not missing, f"numeric config fields without a range (ranges.py RANGES, or a design setting's own): {missing}"
    stale = sorted(f"{c}.{f}" for c, fs in ranges_mod.RANGES.items() for f in fs if f not in fields.get(c, {}))
    assert not stale, stale
    assert set(fields) <= set(WHERE), sorted(set(fields) - set(WHERE))


@st.composite
def out_of_range(draw):
    """(overrides, field) for a numeric field set outside its declared range (nan, inf, or past a bound)."""
    fields = numeric_fields()
    cls = draw(st.sampled_from(sorted(fields)))
    name = draw(st.sampled_from(sorted(fields[cls])))
    r, kind = ranges_mod.range_of(next(c for c in _classes() if c.__name__ == cls), name), fields[cls][name]
    bad = [st.sampled_from(["nan", "inf", "-inf"])] if kind == "float" else []
    if r.lo is not None:
        lo = r.lo if r.lo_open else r.lo - (1 if kind == "int" else 1e-6)
        bad.append(st.integers(-(10**12), int(lo)).map(str) if kind == "int" else st.floats(-1e12, lo).map(repr))
    if r.hi is not None:
        hi = r.hi if r.hi_open else r.hi + (1 if kind == "int" else 1e-6)
        bad.append(st.integers(int(hi), 10**15).map(str) if kind == "int" else st.floats(hi, 1e12).map(repr))
    value = draw(st.one_of(*bad))
    design = draw(st.sampled_from(DESIGNS))
    key = WHERE[cls].format(design=design) + name
    extra = ["hardware=h200"] if cls == "HardwareConfig" else []
    if container(cls, name) == "dict":  # hardware.flops: FLOP/s by dtype
        key += ".bfloat16"
    is_list = container(cls, name) == "list"
    override = f"{key}=[{value}]" if is_list else f"{key}={value}"
    field = f"{key}[0]" if is_list else key
    return ["+exp=smoke", *extra, override], field.replace("train.stages.0.", "train.stages[0].")


def container(cls_name: str, field: str) -> str:
    """list, dict or scalar: how the field holds its numbers."""
    import typing

    cls = next(c for c in _classes() if c.__name__ == cls_name)
    tp = typing.get_type_hints(cls)[field]
    origin = typing.get_origin(tp)
    return "list" if origin is list else "dict" if origin is dict else "scalar"


def _classes():
    import dataclasses
    import typing

    out, todo = [], [schema_mod.RootConfig]
    while todo:
        cls = todo.pop()
        if cls in out:
            continue
        out.append(cls)
        for tp in typing.get_type_hints(cls).values():
            todo += [a for a in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(a)]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(out_of_range())
def test_a_number_outside_its_declared_range_gets_one_line_naming_the_field(case):
    overrides, field = case
    message = one_line(config_error(overrides), overrides)
    assert message.startswith(field), f"{overrides}: {message!r} does not name {field}"
