"""What a run records: metrics and progress between chunks, artifacts at the end.

Everything here runs on the host between compiled chunks and sees only plain
Python floats (a `runners.Report`), never `jax.Array`: Sacred would store arrays
as opaque blobs, and reading one would sync with the device mid-run.
"""

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np


class Recorder:
    """The `runners.run` callback: logs metrics to the run's sink, drives the
    progress bar, and keeps the learning curve.

    **Arguments:**

    - `sink`: where the series go (`experiments.record.sink.Sink`), or `None` to
      record nothing.
    - `num_seeds`: seeds trained together; per-seed series only when above 1.
    - `progress`: show a tqdm bar on stderr.
    """

    def __init__(self, sink: Any, num_seeds: int, progress: bool):
        self.log = None if sink is None or not sink.recording else sink.log
        self.num_seeds = num_seeds
        self.progress = progress
        self.bar: Any = None
        self.curve_steps: list[int] = []
        self.curve_returns: list[list[float]] = []  # [evaluation][seed]

    def __call__(self, report: Any) -> None:
        step = report.env_steps
        log = self.log
        # Chunk 0 (before training) and a finished run's final evaluation (empty
        # `train`) trained nothing.
        if log is not None and report.chunk > 0 and report.train:
            for name, value in report.train.items():
                # NaN marks "no episode ended in this chunk": leave a gap.
                if math.isfinite(value):
                    log(f"train.{name}", float(value), step)
            log("perf.steps_per_s", float(report.steps_per_s), step)
        if report.eval_returns is not None:
            returns = [float(r) for r in report.eval_returns]
            self.curve_steps.append(step)
            self.curve_returns.append(returns)
            if log is not None:
                log("eval.return_mean", float(np.mean(returns)), step)
                log("eval.return_std", float(np.std(returns)), step)
                if self.num_seeds > 1:
                    for i, r in enumerate(returns):
                        log(f"eval.return.seed_{i}", r, step)
                # A multi-agent env: `eval.return_mean` sums the agents' returns.
                for name, per_seed in (report.eval_agent_returns or {}).items():
                    log(f"eval.return.{name}", float(np.mean(per_seed)), step)
        if self.progress:
            self._show(report)

    def _show(self, report: Any) -> None:
        from tqdm import tqdm

        postfix = {"steps/s": f"{report.steps_per_s:,.0f}"}
        if self.curve_returns:
            postfix["eval"] = f"{np.mean(self.curve_returns[-1]):.1f}"
        if self.bar is None:
            # Created at the first report, so that compile time does not distort
            # the rate and ETA; the ETA appears from the second chunk.
            self.bar = tqdm(
                total=report.total_steps,
                initial=report.env_steps,
                unit="step",
                unit_scale=True,
                file=sys.stderr,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} steps "
                "[{elapsed}<{remaining}{postfix}]",
                smoothing=0.3,
                postfix=postfix,
            )
        else:
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(report.env_steps - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
            # Sacred's captured output reads what reached its tee; the bar's final
            # state must not wait in stderr's buffer (seen missing from cout.txt).
            sys.stderr.flush()


def preload_matplotlib() -> None:
    """Import what `plot_curve` needs, from a background thread."""
    try:
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401
    except Exception:
        pass  # `plot_curve` imports (and reports) it again


def plot_curve(
    path: Path,
    steps: list[int],
    returns: list[list[float]],
    title: str,
    series: str = "seed",
) -> None:
    """Save the learning curve: mean greedy return and, for several seeds (or
    sweep members: `series="member"`), each one's, against env steps."""
    # A bare Figure renders with Agg and never touches pyplot's global backend
    # state, so it works headless and inside other programs alike.
    from matplotlib.figure import Figure

    per_seed = np.asarray(returns).T  # [seed][evaluation]
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    if len(per_seed) > 1:
        for i, seed_returns in enumerate(per_seed):
            ax.plot(steps, seed_returns, lw=0.8, alpha=0.4, label=f"{series} {i}")
    ax.plot(steps, per_seed.mean(axis=0), lw=2, color="black", marker="o", ms=3)
    ax.lines[-1].set_label("mean")
    ax.set_xlabel("env steps (per seed)")
    ax.set_ylabel("greedy return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(per_seed) > 1 and len(per_seed) <= 8:
        ax.legend(fontsize="small")
    fig.savefig(path, dpi=100)


def write_json(
    path: Path, data: Any, *, indent: int = 2, sort_keys: bool = False
) -> None:
    """`data` as JSON at `path`, written whole or not at all (a temporary
    file, then renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")
    tmp.replace(path)


class SweepRecorder:
    """The callback of one program of a sweep: each member's series
    (`member_<i>.eval.return_mean`, with several seeds each seed's
    `member_<i>.eval.return.seed_<j>`, `member_<i>.train.episode_return`), member
    `i` numbered in the whole sweep, and `perf.steps_per_s`. Series over all
    runs together would mix programs, so there are none.

    **Arguments:**

    - `sink`: where the series go, or `None` to record nothing.
    - `recorder`: a `Recorder` that records nothing (its sink is `None`) and
      shows the progress bar.
    - `members`: the sweep indices of this program's members, in run order.
    - `num_seeds`: seeds per member.
    - `curves`: `{member: [(env_steps, mean greedy return), ...]}`, filled in.
    """

    def __init__(
        self,
        sink: Any,
        recorder: Recorder,
        members: list[int],
        num_seeds: int,
        curves: dict[int, list[tuple[int, float]]],
    ):
        self.log = None if sink is None or not sink.recording else sink.log
        self.recorder = recorder
        self.members = members
        self.num_seeds = num_seeds
        self.curves = curves

    def __call__(self, report: Any) -> None:
        self.recorder(report)
        log, step, n = self.log, report.env_steps, self.num_seeds
        if log is not None and report.chunk > 0 and report.train:
            log("perf.steps_per_s", float(report.steps_per_s), step)
        # A program without float hyperparameters is one member, run as a plain
        # run: its `train` is that member's.
        runs = report.train_runs or [report.train] * n
        for j, member in enumerate(self.members):
            if log is not None:
                values = [
                    r.get("episode_return", math.nan) for r in runs[j * n : (j + 1) * n]
                ]
                values = [v for v in values if math.isfinite(v)]
                if values:
                    log(
                        f"member_{member}.train.episode_return",
                        float(np.mean(values)),
                        step,
                    )
            if report.eval_returns is not None:
                mean = float(np.mean(report.eval_returns[j * n : (j + 1) * n]))
                self.curves.setdefault(member, []).append((step, mean))
                if log is not None:
                    log(f"member_{member}.eval.return_mean", mean, step)
                    if n > 1:  # each seed's, for confidence intervals
                        for i, r in enumerate(report.eval_returns[j * n : (j + 1) * n]):
                            log(f"member_{member}.eval.return.seed_{i}", float(r), step)

    def close(self) -> None:
        """Close the progress bar (its `recorder`'s)."""
        self.recorder.close()
