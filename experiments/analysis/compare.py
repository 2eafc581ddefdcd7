"""What `python -m experiments.plot` draws: runs read, grouped, summarised
(IQM, stratified-bootstrap CIs) and drawn. See `experiments/plot.py`.

This module reads JSON files only: it imports neither JAX nor Sacred.
"""

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments._errors import PlotError
from experiments.analysis import stats
from experiments.record.folder import CONFIG, INFO, METRICS, RECORD, RunFolder

DEFAULT_OUT = Path("plots") / "compare"
_MEMBER_COLUMNS = {"member", "return_mean", "return_worst", "return_std"}


@dataclass
class _Unit:
    """One stratum: a run, or one member of a sweep run."""

    path: str
    config: dict[str, Any]  # a sweep member's: the run's, with its hp
    env: str
    status: str
    num_seeds: int
    per_seed: bool  # False: one sample per step, the mean over the seeds
    steps: np.ndarray  # [evaluation]
    values: np.ndarray  # [evaluation, sample]
    member: int | None = None
    # A member's hp values (`{"member": i}` before its sweep wrote its table).
    swept: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path if self.member is None else f"{self.path} member {self.member}"


@dataclass
class _Group:
    key: tuple[str, str]
    label: str
    env: str
    units: list[_Unit]


# --- reading run folders ------------------------------------------------------


def _read_json(path: Path, folder: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlotError(f"{folder}: cannot read {path.name} ({e})") from None


def _series(metrics: dict[str, Any], name: str) -> dict[int, float]:
    """`{step: value}` of a Sacred metric, its non-finite values left out."""
    entry = metrics.get(name)
    if not isinstance(entry, dict):
        return {}
    steps, values = entry.get("steps") or [], entry.get("values") or []
    return {
        int(s): float(v)
        for s, v in zip(steps, values, strict=False)
        if isinstance(v, int | float) and math.isfinite(v)
    }


def _samples(
    metrics: dict[str, Any], prefix: str, num_seeds: int
) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """A run's (or member's) `steps`, `values [step, sample]` and whether the
    samples are seeds: `<prefix>.seed_<i>` when recorded, else the mean over the
    seeds (`<prefix>_mean` or `<prefix>`), which is one seed's value for one seed."""
    pattern = re.compile(re.escape(prefix) + r"\.seed_(\d+)")
    seeds = sorted(int(m[1]) for k in metrics if (m := pattern.fullmatch(k)))
    if seeds:
        series = [_series(metrics, f"{prefix}.seed_{i}") for i in seeds]
        per_seed = True
    else:
        found = [_series(metrics, n) for n in (f"{prefix}_mean", prefix)]
        series = [next((s for s in found if s), {})]
        per_seed = num_seeds == 1
    steps = sorted(set.intersection(*(set(s) for s in series)))
    if not steps:
        return None
    values = np.array([[s[t] for s in series] for t in steps], dtype=np.float64)
    return np.array(steps, dtype=np.int64), values, per_seed


def _members(folder: Path, name: str, info: dict[str, Any]) -> list[dict] | None:
    """A sweep's member table (`info.members`, else the `members.json` artifact);
    None until the sweep has finished."""
    table = info.get("members")
    if table is None and (folder / "members.json").exists():
        table = _read_json(folder / "members.json", name)
    return table if isinstance(table, list) else None


def _is_run(folder: Path) -> bool:
    return RunFolder(folder).is_record()


def _load(path: str, metric: str, by: str) -> list[_Unit]:
    """The strata of one run folder: the run, or each member of a sweep."""
    folder = Path(path)
    _check_run_folder(folder, path)
    config = _read_json(folder / CONFIG, path)
    run = _read_json(folder / RECORD, path)
    metrics_file = folder / METRICS
    metrics = _read_json(metrics_file, path) if metrics_file.exists() else {}
    experiment = run.get("experiment", {}) if isinstance(run, dict) else {}
    if isinstance(experiment, dict) and experiment.get("name") == "equizoo-evaluate":
        raise PlotError(
            f"{path}: a record of python -m experiments.evaluate (greedy episodes, "
            "no learning curve); give the training run it evaluated"
        )
    if not isinstance(config, dict) or "env" not in config:
        raise PlotError(f"{path}: config.json has no env: not an equizoo run")
    status = str(run.get("status", "UNKNOWN")) if isinstance(run, dict) else "UNKNOWN"
    num_seeds = int(config.get("num_seeds", 1))
    yet = " yet" if status in ("RUNNING", "QUEUED") else ""
    none_yet = (
        f"{path}: no evaluations of {metric}{yet} (status {status}; "
        f"metrics.json has no {metric}.seed_<i> or {metric}_mean)"
    )
    env = str(config["env"])
    if not (config.get("sweep") or config.get("sweep_samples")):
        found = _samples(metrics, metric, num_seeds)
        if found is None:
            raise PlotError(none_yet)
        steps, values, per_seed = found
        return [_Unit(path, config, env, status, num_seeds, per_seed, steps, values)]
    units = _member_units(folder, path, config, metrics, metric, by, status)
    if not units:
        raise PlotError(none_yet.replace(f"{metric}.seed", f"member_<i>.{metric}.seed"))
    return units


def _check_run_folder(folder: Path, path: str) -> None:
    """A folder Sacred's file observer wrote a run into; else a `PlotError`
    naming the runs inside, if any."""
    if not folder.is_dir():
        raise PlotError(f"{path}: no such folder")
    if _is_run(folder):
        return
    inner = sorted(
        (p for p in folder.iterdir() if p.is_dir() and _is_run(p)),
        key=lambda p: (
            not p.name.isdigit(),
            int(p.name) if p.name.isdigit() else 0,
            p.name,
        ),
    )
    hint = (
        f"; it holds runs: pass them, e.g. {path.rstrip('/')}/{inner[0].name}"
        if inner
        else ""
    )
    raise PlotError(
        f"{path}: not a run folder (a FileStorageObserver run has config.json "
        f"and run.json){hint}"
    )


def _member_units(
    folder: Path,
    path: str,
    config: dict[str, Any],
    metrics: dict[str, Any],
    metric: str,
    by: str,
    status: str,
) -> list[_Unit]:
    """A sweep's strata: one per member, with the member's hyperparameters."""
    num_seeds = int(config.get("num_seeds", 1))
    info_file = folder / INFO
    info = _read_json(info_file, path) if info_file.exists() else {}
    table = _members(folder, path, info if isinstance(info, dict) else {})
    indices = sorted(
        {int(m[1]) for k in metrics if (m := re.match(r"member_(\d+)\.", k))}
    )
    swept_keys = sorted(config.get("sweep") or {})
    if table is None and by.startswith("hp.") and by[3:] in swept_keys:
        raise PlotError(
            f"{path}: a sweep whose member table (written when it finishes) is not "
            f"there yet: its members' {by} is unknown"
        )
    hp_of = {
        int(row["member"]): {k: v for k, v in row.items() if k not in _MEMBER_COLUMNS}
        for row in table or []
    }
    units = []
    for i in indices or sorted(hp_of):
        found = _samples(metrics, f"member_{i}.{metric}", num_seeds)
        if found is None:
            continue
        steps, values, per_seed = found
        swept = hp_of.get(i)
        member_config = {**config, "hp": {**config.get("hp", {}), **(swept or {})}}
        if swept is None:  # no member table yet: name the member by its index
            swept = {"member": i}
        units.append(
            _Unit(
                path,
                member_config,
                str(config["env"]),
                status,
                num_seeds,
                per_seed,
                steps,
                values,
                member=i,
                swept=swept,
            )
        )
    return units


# --- grouping -----------------------------------------------------------------


def _lookup(config: dict[str, Any], key: str, where: str) -> Any:
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise PlotError(f"{where}: its config has no key {key!r} (--by)")
        value = value[part]
    return value


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _group(units: list[_Unit], by: str) -> list[_Group]:
    """Groups in a stable order: numeric `--by` values ascending, else the order
    of the arguments."""
    groups: dict[tuple[str, str, str], _Group] = {}
    numbers: dict[tuple[str, str, str], float] = {}
    short = by.removeprefix("hp.")
    for u in units:
        value = _lookup(u.config, by, u.name)
        head = (
            _fmt_value(value)
            if by in ("agent", "env")
            else f"{short}={_fmt_value(value)}"
        )
        # A member is its own group unless `--by` is one of its hyperparameters.
        rest = (
            ""
            if by.removeprefix("hp.") in u.swept and by.startswith("hp.")
            else " ".join(f"{k}={_fmt_value(v)}" for k, v in u.swept.items())
        )
        value_key = json.dumps(value, sort_keys=True, default=str)
        key = (value_key, rest, u.env)
        if key not in groups:
            label = f"{head} {rest}".strip()
            groups[key] = _Group((value_key, rest), label, u.env, [])
            if isinstance(value, int | float) and not isinstance(value, bool):
                numbers[key] = float(value)
        groups[key].units.append(u)
    order = list(groups)
    if len(numbers) == len(order):
        order.sort(key=lambda k: numbers[k])  # stable: ties keep argument order
    return [groups[k] for k in order]


def _check_envs(groups: list[_Group]) -> None:
    """Runs drawn on one axis (one env) must share the env's parameters too."""
    seen: dict[str, tuple[str, Any]] = {}
    for g in groups:
        for u in g.units:
            params = u.config.get("env_params") or {}
            first = seen.setdefault(g.env, (u.name, params))
            if params != first[1]:
                raise PlotError(
                    f"{first[0]} and {u.name} are both {g.env} but with different "
                    f"env_params ({first[1]} vs {params}): they cannot share one axis"
                )


# --- statistics ---------------------------------------------------------------


def _strata(samples: list[np.ndarray]) -> list[np.ndarray]:
    """Runs with one seed each are pooled into one stratum."""
    single = [s for s in samples if s.size == 1]
    many = [s for s in samples if s.size > 1]
    return [*many, np.concatenate(single)] if single else many


def _summarise(g: _Group, resamples: int, seed: int) -> dict[str, Any]:
    common = set.intersection(*(set(u.steps.tolist()) for u in g.units))
    if not common:
        raise PlotError(
            f"group {g.label!r} on {g.env}: its runs "
            f"({', '.join(u.name for u in g.units)}) share no evaluation step; "
            "group them apart with --by"
        )
    steps = sorted(common)
    with_ci = all(u.per_seed for u in g.units)
    iqms, lows, highs = [], [], []
    for t in steps:
        samples = [u.values[int(np.searchsorted(u.steps, t))] for u in g.units]
        pooled = np.concatenate(samples)
        iqms.append(float(stats.iqm(pooled)))
        if with_ci and pooled.size > 1:
            low, high = stats.iqm_ci(_strata(samples), resamples=resamples, seed=seed)
        else:
            low = high = math.nan
        lows.append(low)
        highs.append(high)
    last = [int(u.steps[-1]) for u in g.units]
    return {
        "label": g.label,
        "env": g.env,
        "runs": [u.name for u in g.units],
        "seeds": sum(u.num_seeds for u in g.units),
        "samples": sum(u.values.shape[1] for u in g.units),
        "seed_means_only": not with_ci,
        "statuses": sorted({u.status for u in g.units}),
        "steps": steps,
        "iqm": iqms,
        "low": lows,
        "high": highs,
        "final_step": steps[-1],
        "final_iqm": iqms[-1],
        "final_ci": (lows[-1], highs[-1]),
        "dropped_steps": max(last) > steps[-1],
    }


# --- drawing ------------------------------------------------------------------


def _colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, n)]


def _label_ends(ax: Any, ends: list[tuple[float, float, str, Any]]) -> None:
    """Each line's label at its right end, pushed apart so that none overlap."""
    low, high = ax.get_ylim()
    gap = 0.07 * (high - low)
    order = sorted(range(len(ends)), key=lambda i: ends[i][1])
    placed: list[float] = []
    for i in order:
        y = ends[i][1]
        placed.append(y if not placed or y >= placed[-1] + gap else placed[-1] + gap)
    shift = max(0.0, placed[-1] - high) if placed else 0.0
    for i, y in zip(order, placed, strict=True):
        x, _, text, colour = ends[i]
        ax.annotate(
            text,
            xy=(x, y - shift),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=colour,
            annotation_clip=False,
        )


def _figure(
    summaries: list[dict[str, Any]], colour_of: dict[str, Any], title: str, what: str
) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    envs = list(dict.fromkeys(s["env"] for s in summaries))
    most = max(sum(s["env"] == e for s in summaries) for e in envs)
    row_h = max(3.0, 0.9 + 0.32 * most)
    fig = Figure(figsize=(11, 0.5 + row_h * len(envs)), layout="constrained")
    axes = fig.subplots(
        len(envs), 2, squeeze=False, gridspec_kw={"width_ratios": [1.8, 1]}
    )
    for row, env in zip(axes, envs, strict=True):
        curves, finals = row
        mine = [s for s in summaries if s["env"] == env]
        ends = []
        for s in mine:
            colour = colour_of[s["label"]]
            curves.plot(s["steps"], s["iqm"], color=colour, lw=1.8, marker="o", ms=2.5)
            if not s["seed_means_only"]:
                curves.fill_between(
                    s["steps"], s["low"], s["high"], color=colour, alpha=0.2, lw=0
                )
            ends.append((s["steps"][-1], s["iqm"][-1], s["label"], colour))
        curves.set_title(f"{env}: learning curves", fontsize=10)
        curves.set_xlabel("env steps (per seed)")
        curves.set_ylabel(what)
        curves.xaxis.set_major_formatter(EngFormatter(sep=""))
        curves.grid(alpha=0.3)
        curves.spines[["top", "right"]].set_visible(False)
        _label_ends(curves, ends)

        _finals_panel(finals, mine, colour_of, what)
    fig.suptitle(title, fontsize=11)
    return fig


def _finals_panel(
    finals: Any, mine: list[dict[str, Any]], colour_of: dict[str, Any], what: str
) -> None:
    """Each group's final IQM and its interval, one bar per group."""
    ys = np.arange(len(mine))[::-1]
    for y, s in zip(ys, mine, strict=True):
        colour = colour_of[s["label"]]
        low, high = s["final_ci"]
        centre = s["final_iqm"]
        if math.isfinite(low):
            finals.barh(y, high - low, left=low, height=0.6, color=colour, alpha=0.6)
        finals.vlines(centre, y - 0.32, y + 0.32, color="black", lw=1.5)
        finals.annotate(
            f"{centre:.1f}" + ("" if math.isfinite(low) else " (no CI)"),
            xy=(max(centre, high) if math.isfinite(high) else centre, y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
            annotation_clip=False,
        )
    finals.set_yticks(ys, [s["label"] for s in mine], fontsize=8)
    for tick, s in zip(finals.get_yticklabels(), mine, strict=True):
        tick.set_color(colour_of[s["label"]])
    finals.set_ylim(-0.6, len(mine) - 0.4)
    finals.set_title(f"{mine[0]['env']}: final", fontsize=10)
    finals.set_xlabel(f"IQM of {what} (95 % CI)")
    finals.grid(axis="x", alpha=0.3)
    finals.spines[["top", "right", "left"]].set_visible(False)
    finals.tick_params(axis="y", length=0)


def _stem(out: str | os.PathLike[str]) -> Path:
    """`<out>.png`/`.svg`: a folder (existing, or ending in a separator) gets
    `compare` inside it; a `.png`/`.svg` suffix is dropped."""
    text = os.fspath(out)
    path = Path(text)
    if path.is_dir() or text.endswith(("/", os.sep)):
        return path / "compare"
    return path.with_suffix("") if path.suffix in (".png", ".svg") else path


def _save(fig: Any, stem: Path) -> list[Path]:
    """PNG and SVG, each written to a temporary name and renamed into place."""
    import matplotlib

    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in ("png", "svg"):
        final = stem.with_name(f"{stem.name}.{fmt}")
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            # Fixed ids and no date: the same runs give the same SVG.
            with matplotlib.rc_context({"svg.hashsalt": "equizoo"}):
                fig.savefig(tmp, format=fmt, dpi=120, metadata={"Date": None})
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(final)
    return written


# --- the command --------------------------------------------------------------


def _ci_text(s: dict[str, Any]) -> str:
    low, high = s["final_ci"]
    if math.isfinite(low):
        return f"[{low:.1f}, {high:.1f}]"
    return "[no CI: seed means only]" if s["seed_means_only"] else "[no CI: one seed]"


def compare(
    paths: Sequence[str | os.PathLike[str]],
    by: str = "agent",
    out: str | os.PathLike[str] = DEFAULT_OUT,
    title: str | None = None,
    metric: str = "eval.return",
    resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare run folders: group them by the config key `by`, draw the figure
    to `<out>.png` and `<out>.svg` and return what it shows.

    **Returns:** `{"groups": [...], "files": [png, svg], "summary": [lines],
    "notes": [lines]}`; a group is `{"label", "env", "runs", "seeds", "steps",
    "iqm", "low", "high", "final_step", "final_iqm", "final_ci", ...}` (a CI is
    `nan` where there is none).

    **Raises:** `PlotError` for a folder that is not a run, a run with no
    evaluation yet, an unknown `by` key, runs of one env with different
    `env_params`, or a group whose runs share no evaluation step.
    """
    if not paths:
        raise PlotError("no run folders given")
    names = [os.fspath(p) for p in paths]
    seen: dict[Path, str] = {}
    for name in names:
        resolved = Path(name).resolve()
        if resolved in seen:
            raise PlotError(f"{name}: given twice (as {seen[resolved]})")
        seen[resolved] = name
    units = [u for name in names for u in _load(name, metric, by)]
    groups = _group(units, by)
    envs = list(dict.fromkeys(u.env for u in units))
    groups.sort(key=lambda g: envs.index(g.env))  # stable: by env, then as grouped
    _check_envs(groups)
    summaries = [_summarise(g, resamples, seed) for g in groups]

    labels = list(dict.fromkeys(s["label"] for s in summaries))
    colour_of = dict(zip(labels, _colours(len(labels)), strict=True))
    what = "greedy return" if metric == "eval.return" else metric
    fig = _figure(
        summaries,
        colour_of,
        title or f"{what}: IQM over seeds, 95 % stratified-bootstrap CI (strata: runs)",
        what,
    )
    files = _save(fig, _stem(out))

    summary, notes = _summary_lines(summaries)
    return {"groups": summaries, "files": files, "summary": summary, "notes": notes}


def _summary_lines(summaries: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """One line per group, and notes on what the figure leaves out."""
    width = max(len(s["label"]) for s in summaries)
    summary, notes = [], []
    for s in summaries:
        summary.append(
            f"{s['label']:<{width}}  {s['env']}  runs {len(s['runs'])}  "
            f"seeds {s['seeds']}  final IQM {s['final_iqm']:.1f} {_ci_text(s)} "
            f"at {s['final_step']:,} steps"
        )
        if s["dropped_steps"]:
            notes.append(
                f"{s['label']} ({s['env']}): runs evaluated beyond "
                f"{s['final_step']:,} steps, the last step all its runs share; "
                "drawn up to there"
            )
        unfinished = [x for x in s["statuses"] if x != "COMPLETED"]
        if unfinished:
            notes.append(f"{s['label']} ({s['env']}): a run is {'/'.join(unfinished)}")
    return summary, notes
