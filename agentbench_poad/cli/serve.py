"""``agentbench-poad serve``: one registered id as an OpenEnv server (docs/integrations.md)."""

from __future__ import annotations

import argparse

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "serve",
        "serve an environment over OpenEnv (for TRL and other trainers)",
        "Serve ENV_ID as an OpenEnv environment server: every WebSocket session (/ws, what\n"
        "OpenEnv's EnvClient speaks) gets its own env, closed when the session ends or idles\n"
        'past --session-timeout. Needs the openenv extra: pip install "agentbench-poad[openenv]".\n'
        "  agentbench-poad serve Overcooked-TomatoSalad-v0 --port 8000\n"
        "Connect with agentbench_poad.serve.TextEnvClient (or RemoteTextEnv, gymnasium-shaped);\n"
        "docs/integrations.md shows TRL training against it and the way back to the board.",
    )
    p.add_argument("env_id", help="an id from `agentbench-poad envs`")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: all)")
    p.add_argument("--port", type=int, default=8000, help="port to bind")
    p.add_argument(
        "--env-kwargs", default="{}", metavar="JSON", help="keyword arguments for gym.make"
    )
    p.add_argument("--max-sessions", type=int, default=16, help="concurrent sessions (envs)")
    p.add_argument(
        "--session-timeout",
        type=float,
        default=600.0,
        help="seconds a session may idle before its env is closed (0: never)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int,
        default=1 << 20,
        help="largest WebSocket message (a larger one closes its connection) and HTTP body (413)",
    )
    p.add_argument(
        "--handshake-timeout",
        type=float,
        default=30.0,
        help="seconds a new connection may take to send its whole HTTP request or its first "
        "WebSocket message before it is closed (0: never); it holds no session slot until then",
    )
    p.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=8,
        help="concurrent sessions of one client address (so no one client takes every slot)",
    )
    p.add_argument(
        "--max-handshakes",
        type=int,
        default=64,
        help="connections at once that have not yet sent their request or first WebSocket "
        "message (slow or silent clients); one over it gets 503 and is closed",
    )
    p.add_argument(
        "--max-handshakes-per-client",
        type=int,
        default=16,
        help="the same, per client address",
    )
    p.add_argument("--log-level", default="info", help="uvicorn log level")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import json

    from agentbench_poad.serve.app import BadEnvKwargs, UnknownEnvId, check_env_id, check_env_kwargs

    try:
        check_env_id(args.env_id)
    except UnknownEnvId as exc:
        return die(str(exc))
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        return die(f"--env-kwargs is not valid JSON ({exc.msg}): {args.env_kwargs!r}")
    if not isinstance(env_kwargs, dict):
        return die(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    if not 0 < args.port < 65536:
        return die(f"--port must be in 1..65535, got {args.port}")
    if args.max_sessions < 1:
        return die(f"--max-sessions must be >= 1, got {args.max_sessions}")
    if args.session_timeout < 0:
        return die(f"--session-timeout must be >= 0, got {args.session_timeout}")
    if args.handshake_timeout < 0:
        return die(f"--handshake-timeout must be >= 0, got {args.handshake_timeout}")
    for flag in ("max_sessions_per_client", "max_handshakes", "max_handshakes_per_client"):
        if getattr(args, flag) < 1:
            return die(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.max_message_bytes < 1:
        return die(f"--max-message-bytes must be >= 1, got {args.max_message_bytes}")
    try:  # make the env once now, rather than fail every session's first reset
        check_env_kwargs(args.env_id, env_kwargs)
    except BadEnvKwargs as exc:
        return die(str(exc))
    try:
        import openenv.core  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return die(
            f"serving needs the openenv extra ({exc.name} is not installed): "
            'pip install "agentbench-poad[openenv]"'
        )
    from agentbench_poad.serve.app import serve

    print(f"serving {args.env_id} on http://{args.host}:{args.port} (OpenEnv; Ctrl-C stops)")
    serve(
        args.env_id,
        host=args.host,
        port=args.port,
        env_kwargs=env_kwargs,
        max_sessions=args.max_sessions,
        session_timeout=args.session_timeout or None,
        max_message_bytes=args.max_message_bytes,
        handshake_timeout=args.handshake_timeout or None,
        max_sessions_per_client=args.max_sessions_per_client,
        max_handshakes=args.max_handshakes,
        max_handshakes_per_client=args.max_handshakes_per_client,
        log_level=args.log_level,
    )
    return 0
