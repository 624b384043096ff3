"""How a run names its model, and a quick check that a named model can be found here.

A run's ``config.json`` is read again from other folders (``evaluate --run``, ``leaderboard add
--run``, ``verify``), so it must not name its model relative to the folder it was trained from:

* :func:`model_reference` -- what a run records: a named model by its name (``smollm2-135m``); an
  existing directory or ``.gguf`` file by its absolute path, symlinks resolved (a record made
  from the run adds the weights' digest, ``model.base_weights``); anything else (a hub id) as
  given.
* :func:`model_problem` -- why a recorded model cannot be loaded here, with the fix, judged
  before ``from_pretrained`` runs: a path that does not exist, or a hub id that is neither in
  the local Hugging Face cache nor reachable. Offline (``HF_HUB_OFFLINE``,
  ``TRANSFORMERS_OFFLINE`` or ``AGENTBENCH_POAD_OFFLINE`` set) the hub is not asked at all;
  online it is asked once, with a short timeout, instead of the loader's retries.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Variables that say the Hugging Face hub must not be asked (any value but ``0``/``false``).
HUB_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AGENTBENCH_POAD_OFFLINE")
#: Seconds the one reachability probe of :func:`model_problem` may take.
HUB_PROBE_TIMEOUT_S = 5.0


def model_reference(model: str | os.PathLike) -> str:
    """The model as a run records it (see the module doc): an existing path (which wins over a
    name, as in :func:`~agentbench_poad.models.store.resolve_model`) made absolute, else the
    name or hub id unchanged."""
    text = os.fspath(model)
    path = Path(text).expanduser()
    return str(path.resolve()) if path.exists() else text


def hub_offline() -> bool:
    """Whether one of :data:`HUB_OFFLINE_VARS` is set to a true value."""
    return any(
        os.environ.get(var, "").strip().lower() not in ("", "0", "false", "no", "off")
        for var in HUB_OFFLINE_VARS
    )


def _looks_like_path(text: str) -> bool:
    return (
        text.startswith(("/", "./", "../", "~"))
        or text.lower().endswith(".gguf")
        or text.count("/") > 1
        or (os.sep != "/" and os.sep in text)
    )


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers brings huggingface_hub
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False
    return isinstance(found, str)


def model_problem(model: str, *, where: str = "the model") -> str | None:
    """Why ``model`` (as a run or record states it) cannot be loaded here, with the fix; None
    when it can be tried (see the module doc).

    Args:
        model: a named model, a path or a hub id.
        where: what names it, for the message (``"run runs/x's model"``).
    """
    from agentbench_poad.models.named import NAMED_MODELS

    text = os.fspath(model)
    if Path(text).expanduser().exists() or text in NAMED_MODELS:
        return None
    fix = (
        "runs made before runs recorded absolute paths store the path as it was typed: run the "
        "command from the folder the run was trained in, or put the model at that path"
    )
    if _looks_like_path(text) or Path(text).is_absolute():
        return f"{where} {text!r} does not exist on this machine; {fix}"
    if _hub_cached(text):
        return None
    if hub_offline():
        return (
            f"{where} {text!r} is neither a folder here, a named model, nor in the local Hugging "
            f"Face cache, and the hub is offline ({', '.join(HUB_OFFLINE_VARS)}); if it is a "
            f"folder, {fix}; if it is a hub id, fetch it where the hub is reachable"
        )
    try:
        from huggingface_hub import model_info
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError:  # pragma: no cover - transformers brings huggingface_hub
        return None
    try:
        model_info(text, timeout=HUB_PROBE_TIMEOUT_S)
    except RepositoryNotFoundError:
        return (
            f"{where} {text!r} is neither a folder here, a named model, nor a model on the "
            f"Hugging Face hub; if it is a folder, {fix}"
        )
    except Exception as exc:  # noqa: BLE001 - any failure to reach the hub
        if _unreachable(exc):
            return (
                f"{where} {text!r} is not a folder here nor a named model, and the Hugging Face "
                f"hub cannot be reached ({type(exc).__name__}); if it is a folder, {fix}; if it "
                "is a hub id, make the hub reachable (set HF_HUB_OFFLINE=1 to use a cached copy)"
            )
    return None


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the hub could not be reached: anything but an HTTP answer (a 401 or
    403 is the hub answering; the loader reports those itself)."""
    try:
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:  # pragma: no cover - transformers brings huggingface_hub
        return True
    return not isinstance(exc, HfHubHTTPError)


__all__ = ["HUB_OFFLINE_VARS", "hub_offline", "model_problem", "model_reference"]
