"""Hydra's handle on ``hydra/launcher=packed`` (conf/hydra/launcher/packed.yaml).

Hydra instantiates a launcher only from a class whose module lies under the ``hydra_plugins`` namespace package
(``Plugins._instantiate`` refuses any other ``_target_``: "not the hydra_plugins package"), and it imports every
module there at each start, so this one stays light: the launcher's work is ``ropelab.core.packed_launcher``.
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra.plugins.launcher import Launcher


class PackedLauncher(Launcher):
    def __init__(self, pack: int = 8) -> None:
        self.pack = pack
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from ropelab.core.packed_launcher import launch

        return launch(self, job_overrides, initial_job_idx)
