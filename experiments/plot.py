"""Compare recorded runs: learning curves and final returns, IQM with 95 % CIs.

    python -m experiments.plot runs/1 runs/2 runs/5             # grouped by agent
    python -m experiments.plot runs/[0-9]* --by hp.learning_rate --out plots/lr
    python -m experiments.plot runs/7 --by env --title "PPO, three envs"

Each argument is a run folder of a `FileStorageObserver` (`runs/<id>`, or
another `-F` folder). Runs are grouped by a config key (`--by`, default
`agent`; any dotted key: `env`, `hp.learning_rate`, `num_envs`, ...) and every
seed of every run of a group is pooled. A sweep run (`sweep.<hp>=[...]`) gives
one group per member, labelled by its hyperparameters, unless `--by` names a
swept hyperparameter: then its members are pooled by that value.

The figure (`<out>.png` and `<out>.svg`, default `plots/compare`) has one row
per env: the learning curves (IQM over seeds at each evaluation, 95 %
stratified-bootstrap band, against env steps) and the final returns (IQM of the
last evaluation with its 95 % CI as a horizontal interval). Strata are runs: a
run's seeds are resampled within the run (see `experiments.analysis.stats.iqm_ci`).

Rules:

- A group's curve is drawn at the evaluation steps that all its runs share (no
  interpolation); its final value is at the last of them, so runs of different
  lengths are compared at the same step. A group whose runs share no step is
  refused.
- Runs with one seed each are pooled into one stratum (one value cannot be
  resampled); a group of one seed in all has no CI.
- A sweep records each member's seeds (`member_<i>.eval.return.seed_<j>`); one
  recorded before that has only each member's mean, one sample per member, and
  a group holding one has no CI.

This module reads JSON files only: it imports neither JAX nor Sacred.
"""

import argparse
import sys

from experiments.analysis.compare import (
    DEFAULT_OUT as DEFAULT_OUT,
    PlotError as PlotError,
    compare as compare,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.plot",
        description="Compare recorded runs: learning curves and final returns, "
        "IQM over seeds with 95 %% stratified-bootstrap CIs.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders (runs/1)")
    parser.add_argument(
        "--by",
        default="agent",
        help="config key that groups runs, dotted (agent, env, hp.learning_rate); "
        "default: agent",
    )
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help="output stem or folder: writes <out>.png and <out>.svg "
        "(default: plots/compare)",
    )
    parser.add_argument("--title", default=None, help="the figure's title")
    parser.add_argument(
        "--metric",
        default="eval.return",
        help="the recorded series: <metric>.seed_<i> per seed, else <metric>_mean "
        "(default: eval.return)",
    )
    args = parser.parse_args(argv)
    try:
        result = compare(
            args.runs, by=args.by, out=args.out, title=args.title, metric=args.metric
        )
    except PlotError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    for line in result["summary"]:
        print(line)
    for line in result["notes"]:
        print(f"note: {line}")
    print("wrote " + " ".join(str(p) for p in result["files"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
