"""The Sacred wiring every equizoo experiment shares (`run`, `evaluate`): the
logger, the default observers (`runs/` files, `-m` MongoDB through ours), and
where a run is recorded."""

import contextlib
import inspect
import logging
import sys
from pathlib import Path
from typing import Any

from experiments import _distributed
from experiments.sacred import liveness as _liveness, mongo as _mongo
from experiments.sacred.observers import (
    Experiment,
    FileRecords,
    FileStorageObserver,
    MongoObserver,
    apply_backspaces_and_linefeeds,
    get_config_updates,
)

ROOT = Path(__file__).resolve().parents[2]  # the checkout: zoo/, envs/, ...
RUNS_DIR = Path("runs")  # relative to the working directory, like `-F runs`


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever `sys.stderr` is now, so that Sacred's
    captured output (which swaps `sys.stderr`) includes our log lines."""

    @property
    def stream(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _not_a_sweep_entry(record: logging.LogRecord) -> bool:
    # `sweep.<name>=...` and `env_params.<name>=...` add entries to dicts that
    # start empty by design; Sacred would warn about each one.
    return not record.getMessage().startswith(
        ('Added new config entry: "sweep.', 'Added new config entry: "env_params.')
    )


def logger() -> logging.Logger:
    logger = logging.getLogger("equizoo")
    if not logger.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
        handler.addFilter(_not_a_sweep_entry)
        logger.addHandler(handler)
        logger.propagate = False
    # Sacred's INFO lines (run ID, "Completed after") would follow our summary
    # line; `-l INFO` brings them back.
    logger.setLevel(logging.WARNING)
    return logger


def experiment(name: str) -> Any:
    """A Sacred `Experiment` with our logger, output filter, default observers
    (`observe`) and complete records (`record_code`); its `mainfile` is the
    module that calls this."""
    ex = Experiment(name, base_dir=str(ROOT))
    caller = inspect.currentframe().f_back  # pyright: ignore[reportOptionalMemberAccess]
    record_code(ex, Path(caller.f_globals["__file__"]))  # pyright: ignore[reportOptionalMemberAccess]
    ex.logger = logger()  # pyright: ignore[reportAttributeAccessIssue]
    # The progress bar redraws itself with carriage returns; keep only the final
    # state of each line in the recorded output.
    ex.captured_out_filter = apply_backspaces_and_linefeeds  # pyright: ignore[reportAttributeAccessIssue]
    observe(ex)
    return ex


# The top-level folders of the repository whose code decides a run's numbers.
PACKAGES = ("zoo", "envs", "runners", "experiments", "benchmarks")


def record_code(ex: Any, main: Path) -> None:
    """Make `ex`'s runs record their code and versions: every equizoo module
    imported by the time the run starts and the tuned-config files read (Sacred
    collects only the modules imported when the `Experiment` was built), `main`
    as the `mainfile`, and the versions of the libraries that decide the numbers
    (`versions.LIBRARIES`, sacred, and jaxmarl on its envs). A config hook: it
    runs before a run starts, for each run of the process."""
    from experiments import versions
    from experiments.sacred.observers import (
        PackageDependency,
        Source,
        get_commit_if_possible,
        get_digest,
    )

    main = main.resolve()

    @ex.config_hook
    def _record_code(config, command_name, logger):
        # What training will import anyway; importing it now puts it in the record.
        import envs
        import runners  # noqa: F401
        import zoo  # noqa: F401
        from experiments import configs

        files = {main, *configs.files_read()}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if path is None:
                continue
            path = Path(path).resolve()
            if path.parts[: len(ROOT.parts)] != ROOT.parts:
                continue
            if path.relative_to(ROOT).parts[0] in PACKAGES and path.suffix == ".py":
                files.add(path)
        # Git is asked once, and its answer kept on the main file only: Sacred's
        # `Source.create` would ask once per file, and the record's
        # `repositories` would list the same commit once per file.
        repo, commit, dirty = get_commit_if_possible(str(main), ex.save_git_info)
        ex.mainfile = Source(str(main), get_digest(str(main)), repo, commit, dirty)
        ex.sources.clear()
        ex.sources.add(ex.mainfile)
        ex.sources.update(
            Source(str(f), get_digest(str(f)), None, None, None) for f in files
        )
        names = [*versions.LIBRARIES, "sacred"]
        env = config.get("env")
        if isinstance(env, str) and envs.uses_jaxmarl(env):
            names.append("jaxmarl")
        for name in names:
            version = versions.version_of(name)
            if version != "absent":
                ex.dependencies.discard(PackageDependency(name, None))
                ex.add_package_dependency(name, version)
        return {}


def observe(ex: Any) -> None:
    """Sacred option hook of `ex`: records to `runs/` unless `-F DIR` or `-u`;
    `-m` adds our MongoDB observer; a multi-process run joins here, and only
    its process 0 records."""
    defaults: list[Any] = []

    @ex.option_hook
    def _observers(options):
        # Drop the default observers a previous run in this process added.
        ex.observers[:] = [o for o in ex.observers if o not in defaults]
        defaults.clear()
        # A multi-process run joins before anything starts JAX (the config hook
        # builds agents), and only its process 0 records.
        updates, _ = get_config_updates(options.get("UPDATE") or [])
        join = _distributed.plan(updates.get("distributed"))
        if join is not None and options.get("COMMAND") in (None, "main"):
            _distributed.join(join)
            if not _distributed.is_main():
                options["--unobserved"] = True
                options["--mongo_db"] = None
                options["--file_storage"] = None
        # Ours instead of Sacred's (`-F DIR` or `runs/`): whole, locked records.
        basedir = Path(options.get("--file_storage") or RUNS_DIR)
        options["--file_storage"] = None
        mongo = options.get("--mongo_db")
        if mongo and not options.get("--unobserved"):
            # Ours instead of Sacred's: a short timeout and a ping before anything.
            observer = _mongo.mongo_observer(mongo)
            # Its run numbers follow the file record's too (which takes the same).
            observer.equizoo_file_dirs = (basedir,)
            options["--mongo_db"] = None
            defaults.append(observer)
            ex.observers.append(observer)
        # "sys" tees Python's streams; Sacred's default "fd" starts a `tee`
        # subprocess and redirects file descriptors, which buys nothing here.
        if not options.get("--capture"):
            options["--capture"] = "sys"
        if not options.get("--unobserved"):
            observer = FileRecords(str(basedir))
            defaults.append(observer)
            ex.observers.append(observer)
        if options.get("COMMAND") in (None, "main") and not options.get("--unobserved"):
            # Records a killed process left RUNNING: marked INTERRUPTED and named.
            _liveness.mark_dead_file_records(basedir)
            for observer in ex.observers:
                if isinstance(observer, MongoObserver):
                    with contextlib.suppress(Exception):  # the run will say
                        _liveness.mark_dead_mongo_records(observer, (basedir,))

    ex.equizoo_default_observers = defaults


# Content types of the artifacts we record: Sacred's MongoDB observer would
# guess them from the file name and print a line for each (and for `.eqx`, that
# it could not).
CONTENT_TYPES = {
    ".eqx": "application/octet-stream",
    ".gif": "image/gif",
    ".json": "application/json",
    ".mp4": "video/mp4",
    ".png": "image/png",
    ".txt": "text/plain",
    ".csv": "text/csv",
}


def add_artifact(run: Any, path: Path | str, name: str | None = None) -> None:
    """`run.add_artifact` with the content type of `path`'s suffix."""
    path = Path(path)
    content_type = CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")
    run.add_artifact(str(path), name or path.name, content_type=content_type)


def file_dir(run: Any) -> Path | None:
    """The run's folder under a `FileStorageObserver`, if it has one."""
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            return Path(observer.dir or observer.basedir)
    return None


def where(run: Any) -> str:
    if not _distributed.is_main():
        return "recorded by process 0"
    places = []
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            places.append(str(observer.dir))
        elif isinstance(observer, MongoObserver):
            places.append(f"MongoDB {observer.runs.full_name} _id={run._id}")
        else:
            places.append(type(observer).__name__)
    return "recorded in " + " and ".join(places) if places else "not recorded"
