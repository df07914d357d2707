"""The benchmark card's suite (``conf/card/suite.yaml``): per task the calibrated setting, its metrics, the seeds.

The file is declared by hand but for its ``plan:`` block, which ``python -m ropelab.card plan`` writes from the
records (``write_plan``). Reading it checks every key, so a typo is one line naming it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ropelab.core.cli import CONF_DIR
from ropelab.core.errors import ConfigError

SUITE = CONF_DIR / "card" / "suite.yaml"
PLAN_MARKER = "# ---- plan:"
DIRECTIONS = ("higher", "lower")
TASK_KEYS = {"setting", "why", "source", "metric", "ood", "direction", "level", "extrapolation"}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    setting: dict[str, Any] | None  # None: not calibrated, nothing trains, the card row says nothing
    why: str = ""
    source: str | None = None
    metric: str = "val/acc"
    ood: str | None = None
    direction: str = "higher"
    level: float | None = None
    extrapolation: tuple[float, ...] = ()

    @property
    def calibrated(self) -> bool:
        return self.setting is not None

    @property
    def is_accuracy(self) -> bool:
        return self.metric.endswith(("/acc", "/exact"))

    def overrides(self) -> list[str]:
        """The setting as Hydra overrides, in the file's order."""
        return [f"{k}={_override_value(v)}" for k, v in (self.setting or {}).items()]


@dataclass(frozen=True)
class Suite:
    path: Path
    seeds: tuple[int, ...]
    margin: float
    ceiling: float
    tasks: dict[str, TaskSpec]
    plan: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_seeds: int = 10
    useful: dict[str, float] = field(default_factory=dict)   # unit → the largest MDE worth planning for
    tiers: dict[str, list[str]] = field(default_factory=dict)  # tier → its tasks (quick: the cheap ones); full: all

    def tier(self, name: str) -> list[str]:
        """The tasks of a tier (``full``: every task); an unknown tier is one line naming the tiers."""
        if name == "full":
            return list(self.tasks)
        if name not in self.tiers:
            raise ConfigError(f"--tier {name}: no such tier: choose from {', '.join(['full', *self.tiers])}")
        return list(self.tiers[name])

    def for_tier(self, name: str) -> "Suite":
        """The suite a tier's card reads: ``full`` as planned; any other tier at the fewest seeds (``seeds``) on its
        own tasks, so that its card fits the time a user has (its MDE per task, larger, is on the card)."""
        if name in ("", "full"):
            return self
        self.tier(name)   # an unknown tier is one line
        return replace(self, plan={t: {**p, "n": len(self.seeds)} for t, p in self.plan.items()})

    def seeds_for(self, task: str) -> list[int]:
        """The task's seeds: as many as its plan's n (the first ``seeds`` on, consecutive), else ``seeds``."""
        n = int((self.plan.get(task) or {}).get("n") or len(self.seeds))
        return [*self.seeds, *range(self.seeds[-1] + 1, self.seeds[-1] + 1 + n - len(self.seeds))][:max(n, 1)]

    def select(self, names: list[str] | None) -> list[TaskSpec]:
        """The tasks named (every task of the suite when None), in the suite's order; an unknown name is one line."""
        if not names:
            return list(self.tasks.values())
        for name in names:
            if name not in self.tasks:
                raise ConfigError(f"TASKS: {name!r} is not a task of the suite {_shown(self.path)}: choose from "
                                  f"{', '.join(self.tasks)}")
        return [spec for name, spec in self.tasks.items() if name in names]


def _override_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(CONF_DIR.parent))
    except ValueError:
        return str(path)


def load(path: Path | str = SUITE) -> Suite:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError:
        raise ConfigError(f"{path}: no such suite file (the default is {_shown(SUITE)})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks"), dict) or not raw["tasks"]:
        raise ConfigError(f"{path}: a suite needs `tasks:`, a mapping of task name → setting")
    unknown = set(raw) - {"seeds", "max_seeds", "rule", "tasks", "tiers", "plan"}
    if unknown:
        raise ConfigError(f"{path}: {sorted(unknown)[0]} is not a suite key: valid keys are seeds, max_seeds, rule, "
                          "tasks, tiers, plan")
    seeds = raw.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"{path}: seeds={seeds!r} is invalid: a list of integers, e.g. [200, 201, 202]")
    rule = raw.get("rule") or {}
    specs = {}
    import tasks as task_registry

    known_tasks = task_registry.names()
    for name, entry in raw["tasks"].items():
        if name not in known_tasks:
            raise ConfigError(f"{path}: tasks.{name} names no task: choose from {', '.join(known_tasks)}")
        if not isinstance(entry, dict) or "setting" not in entry:
            raise ConfigError(f"{path}: tasks.{name} needs `setting:` (a mapping of overrides, or null with `why:`)")
        if bad := set(entry) - TASK_KEYS:
            raise ConfigError(f"{path}: tasks.{name}.{sorted(bad)[0]} is not a task key: valid keys are "
                              f"{', '.join(sorted(TASK_KEYS))}")
        if entry["setting"] is None and not entry.get("why"):
            raise ConfigError(f"{path}: tasks.{name} has no setting: say why (`why:`)")
        if entry.get("direction", "higher") not in DIRECTIONS:
            raise ConfigError(f"{path}: tasks.{name}.direction={entry['direction']!r} is invalid: higher or lower")
        specs[name] = TaskSpec(name=name, setting=entry["setting"], why=str(entry.get("why") or ""),
                               source=entry.get("source"), metric=entry.get("metric", "val/acc"),
                               ood=entry.get("ood"), direction=entry.get("direction", "higher"),
                               level=entry.get("level"),
                               extrapolation=tuple(float(f) for f in entry.get("extrapolation") or ()))
    return Suite(path=path, seeds=tuple(seeds), margin=float(rule.get("margin", 0.05)),
                 ceiling=float(rule.get("ceiling", 1.0)), tasks=specs, plan=dict(raw.get("plan") or {}),
                 max_seeds=int(raw.get("max_seeds", 10)), useful=dict(rule.get("useful") or {}),
                 tiers=_tiers(path, raw.get("tiers") or {}, specs))


def _tiers(path: Path, tiers: dict, specs: dict) -> dict[str, list[str]]:
    for tier, names in tiers.items():
        for name in names or []:
            if name not in specs:
                raise ConfigError(f"{path}: tiers.{tier}: {name} is not a task of the suite: choose from "
                                  f"{', '.join(specs)}")
    return {tier: list(names or []) for tier, names in tiers.items()}


def write_plan(path: Path, plan: dict[str, dict[str, Any]]) -> None:
    """Replace the suite file's ``plan:`` block (everything from the marker line on) with ``plan``; the declared
    part above it is left as written, comments included."""
    text = Path(path).read_text()
    head, found, _ = text.partition(PLAN_MARKER)
    if not found:
        raise ConfigError(f"{path}: no plan marker line ({PLAN_MARKER!r} …): add it at the end of the file")
    block = yaml.safe_dump({"plan": plan}, sort_keys=False, width=120, allow_unicode=True)
    Path(path).write_text(head + PLAN_MARKER + " written by `python -m ropelab.card plan` from the source records "
                          "(do not edit below this line) ----\n" + block)
