"""Build hook: ship ``agentbench_poad-gymnasium.pth`` at the root of site-packages.

Everything else lives in pyproject.toml. The .pth file imports ``_agentbench_poad_hook`` at
interpreter start so that ``gymnasium.make`` knows the package's ids without another import
(gymnasium 1.x has no entry-point plugin loading). Wheels (``pip install .``) get it from
``build_py``; editable installs (``pip install -e .``) from the editable-wheel strategy.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "agentbench_poad-gymnasium.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class EditableWheelWithPth(editable_wheel):
    def _select_strategy(self, name, tag, build_lib):  # noqa: ANN001 - setuptools internals
        strategy = super()._select_strategy(name, tag, build_lib)
        content = Path(PTH).read_bytes()

        class WithPth:
            def __enter__(self):
                strategy.__enter__()
                return self

            def __exit__(self, *exc):  # noqa: ANN002
                return strategy.__exit__(*exc)

            def __call__(self, wheel, files, mapping):  # noqa: ANN001
                strategy(wheel, files, mapping)
                wheel.writestr(PTH, content)

        return WithPth()


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
