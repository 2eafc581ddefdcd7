"""Every error the experiments say in one line, without a traceback.

All share `EquizooError`. Sacred's command line prints it as `module.Name:
message` and exits 1 (`experiments.sacred.observers` teaches it to: an `EquizooError` is
not a `SacredError`, so that `plot` and `publish` run without importing Sacred);
the CLIs that are not Sacred experiments print the same line themselves. Each
error shows the module users import it from, not this one.
"""


class EquizooError(Exception):
    """A one-line error: bad input named with its fix, or a run that failed."""

    # What Sacred's command line reads from an error it prints (as a SacredError's).
    print_usage = False
    print_traceback = False
    filter_traceback = "default"


class ConfigError(EquizooError):
    """An invalid experiment config, found before anything compiles."""


class TrainingError(EquizooError):
    """Training failed (e.g. a non-finite loss); Sacred marks the run FAILED."""


class DistributedError(EquizooError):
    """A bad `distributed` config, or processes that cannot be joined."""


class EvaluateError(EquizooError):
    """Bad input to `experiments.evaluate`."""


class PublishError(EquizooError):
    """Bad arguments to `experiments.publish`, before anything trains."""


class PlotError(EquizooError, ValueError):
    """A run folder or option that cannot be plotted (the CLI exits 2)."""


for _error, _module in (
    (ConfigError, "experiments.run"),
    (TrainingError, "experiments.run"),
    (DistributedError, "experiments.run"),
    (EvaluateError, "experiments.evaluate"),
    (PublishError, "experiments.publish"),
    (PlotError, "experiments.plot"),
):
    _error.__module__ = _module
