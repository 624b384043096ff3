"""Register agentbench-poad's environments whenever gymnasium is imported.

Gymnasium 1.x dropped the ``gymnasium.envs`` entry-point plugin system, yet
``import gymnasium as gym; gym.make("Overcooked-TomatoSalad-v0")`` must work with no other
import. The installed ``agentbench_poad-gymnasium.pth`` imports this module at interpreter start;
it only appends a finder to ``sys.meta_path`` (no other import), and the finder registers the
package's ids right after ``gymnasium`` finishes importing. Any failure is reported as a warning
and never breaks the import of gymnasium.
"""

from __future__ import annotations

import sys


class _AfterGymnasiumImport:
    """A meta-path finder that wraps the loader of the top-level ``gymnasium`` package."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - importlib protocol
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)  # one-shot: also avoids recursion in find_spec below
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):  # noqa: ANN001
            exec_module(module)
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


def _register() -> None:
    """Register now; if a half-imported module of ours is in the way, retry on first lookup.

    When the import of gymnasium was itself triggered from inside one of our modules (say
    ``datasets.py`` importing ``agentbench_poad.core``), registering at once would re-enter that
    half-initialised module. Then ``gymnasium.envs.registration._find_spec`` (used by ``make``,
    ``make_vec`` and ``spec``) is wrapped to register first, once.
    """
    try:
        from agentbench_poad.environments import register_envs

        register_envs()
    except ImportError:
        _register_on_first_lookup()
    except Exception as exc:  # never break `import gymnasium`
        _warn(exc)


def _register_on_first_lookup() -> None:
    from gymnasium.envs import registration

    find_spec = registration._find_spec
    if getattr(find_spec, "_agentbench_poad", False):
        return

    def find_spec_after_registering(env_id):  # noqa: ANN001, ANN202
        registration._find_spec = find_spec
        try:
            from agentbench_poad.environments import register_envs

            register_envs()
        except Exception as exc:
            _warn(exc)
        return find_spec(env_id)

    find_spec_after_registering._agentbench_poad = True
    registration._find_spec = find_spec_after_registering


def _warn(exc: BaseException) -> None:
    import warnings

    warnings.warn(f"agentbench-poad could not register its environments: {exc!r}", stacklevel=3)


def install() -> None:
    """Register now if gymnasium is already imported, else after it is."""
    if "gymnasium" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterGymnasiumImport) for f in sys.meta_path):
        # First in line: appended after PathFinder it would never see `import gymnasium`.
        sys.meta_path.insert(0, _AfterGymnasiumImport())


install()
