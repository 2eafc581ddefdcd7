"""Tuned defaults per agent and env: `experiments/configs/<agent>.yaml`."""

from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).parent


def tuned(agent: str, env: str) -> dict[str, Any] | None:
    """The tuned block for `agent` on `env` (`total_steps`, `num_envs`, `hp`), or
    `None` when that pair has none."""
    path = CONFIG_DIR / f"{agent}.yaml"
    if not path.exists():
        return None
    blocks = yaml.safe_load(path.read_text()) or {}
    return blocks.get(env)
