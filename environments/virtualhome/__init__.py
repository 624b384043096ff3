"""The VirtualHome family: household chores in a four-room flat, as text.

``tasks`` is the task table (data only; registration imports nothing else), ``engine`` the
scene-graph engine, ``goals`` the goal objects (instruction text + success check),
``scenarios`` the action catalogues, offered-action rules and prompt facts, and ``env`` the
gymnasium entry point :class:`~.env.VirtualHomeEnv`. See ``docs/envs/virtualhome.md``.
"""
