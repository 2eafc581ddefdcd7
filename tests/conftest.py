import os

# Before JAX initialises its backend: jax 0.10 on 2 CPU cores can hang with many
# vmapped seeds under the concurrency-optimised scheduler, and optimisation level 1
# compiles faster without training slower.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    + " --xla_backend_optimization_level=1"
).strip()

# MuJoCo picks its OpenGL backend at its first import, which any module may
# make (Gymnasium's envs, Brax): headless, render through OSMesa (.ci/osmesa).
if not os.environ.get("DISPLAY"):
    import ctypes.util

    if ctypes.util.find_library("OSMesa"):
        os.environ.setdefault("MUJOCO_GL", "osmesa")

import importlib.util
from pathlib import Path

import jax
import jax.random as jr
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")


_CACHE_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture(autouse=True)
def _persistent_cache_stays_as_it_was():
    """An experiment run in this process turns JAX's persistent compilation
    cache on (into the user's cache folder) for the rest of the process; every
    test leaves it as it found it, so the suite never writes there."""
    before = {name: getattr(jax.config, name) for name in _CACHE_SETTINGS}
    yield
    if any(getattr(jax.config, name) != value for name, value in before.items()):
        from jax._src import compilation_cache

        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


@pytest.fixture(scope="module", autouse=True)
def _compiled_programs_go_with_their_module():
    """Drop JAX's compiled programs after each test module. XLA's CPU backend
    maps each executable's code into memory (hundreds of mappings a training
    program); one process that kept the whole suite's passed Linux's default
    limit of 65530 mappings (`vm.max_map_count`) and XLA crashed compiling the
    next one. A module's programs are shared through its own fixtures, so
    nothing later needs them."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="session")
def code_facts():
    """`benchmarks/code_facts.py` (a script, not a package), loaded once."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "code_facts.py"
    spec = importlib.util.spec_from_file_location("code_facts", path)
    assert spec is not None and spec.loader is not None
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    return facts


@pytest.fixture
def getkey():
    """A function returning a fresh key each call, deterministic per test."""
    key = jr.PRNGKey(0)

    def _getkey():
        nonlocal key
        key, sub = jr.split(key)
        return sub

    return _getkey


@pytest.fixture(scope="session")
def init_state():
    """`init_state(agent, env, key, num_envs, total_steps)`: a fresh agent
    state for the env's spaces, as the runners make it."""

    def init(agent, env, key, num_envs, total_steps):
        return agent.init(
            env.observation_space,
            env.action_space,
            key=key,
            num_envs=num_envs,
            total_steps=total_steps,
        )

    return init


@pytest.fixture(scope="session")
def resumes_bitwise():
    """`resumes_bitwise(agent, env, folder, *, every, **run_kwargs)`: train with
    `runners.run`, checkpointing every `every` env steps into `folder`; resume
    from the first checkpoint; assert the two runs end in the same bytes.
    Returns the uninterrupted run's result."""
    import io

    import equinox as eqx

    import runners

    def serialised(tree) -> bytes:
        f = io.BytesIO()
        eqx.tree_serialise_leaves(f, tree)
        return f.getvalue()

    def check(agent, env, folder, *, every, **kwargs):
        def saver(state, report):
            runners.save_checkpoint(folder / str(report.env_steps), state, {})

        full = runners.run(
            agent, env, checkpoint=saver, checkpoint_every=every, **kwargs
        )
        like = runners.state_template(
            agent,
            env,
            num_envs=kwargs["num_envs"],
            total_steps=1,
            num_seeds=kwargs["num_seeds"],
        )
        state, _ = runners.load_checkpoint(folder / str(every), like)
        resumed = runners.run(agent, env, state=state, chunks=full.chunks, **kwargs)
        assert serialised(resumed.state) == serialised(full.state)
        return full

    return check


@pytest.fixture
def mongo_client(monkeypatch):
    """A mongomock client with GridFS, handed to whoever builds a
    `pymongo.MongoClient` (as `-m host:port:db` does): MongoDB the way Sacred's own
    tests use it."""
    import mongomock
    import mongomock.gridfs
    import pymongo

    mongomock.gridfs.enable_gridfs_integration()
    client = mongomock.MongoClient()
    monkeypatch.setattr(pymongo, "MongoClient", lambda *a, **k: client)
    return client


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory):
    """A real MongoDB-wire server (SecantusDB, the `board` extra) on a free
    loopback port, for the whole test session."""
    from experiments.board.server import LocalServer

    server = LocalServer(tmp_path_factory.mktemp("mongo") / "data").start()
    yield server
    server.stop()


_databases = iter(range(1, 1_000_000))


@pytest.fixture(params=["mongomock", "server"])
def mongo(request, monkeypatch):
    """MongoDB for `-m`, twice: mongomock (as Sacred's own tests use it) and the
    real server of `mongo_server`, a fresh database per test. `.spec` is the
    `-m` argument, `.db` the pymongo database it names."""
    from types import SimpleNamespace

    if request.param == "mongomock":
        client = request.getfixturevalue("mongo_client")
        return SimpleNamespace(spec="localhost:27017:equizoo", db=client["equizoo"])
    import pymongo

    server = request.getfixturevalue("mongo_server")
    name = f"test{next(_databases)}"
    client = pymongo.MongoClient(server.address, serverSelectionTimeoutMS=5000)
    request.addfinalizer(client.close)
    return SimpleNamespace(spec=f"{server.address}:{name}", db=client[name])
