"""Agents of agentbench-poad (import name ``agentbench_poad.baselines``).

* :mod:`.oracle` -- scripted agents that solve every task from the environment state;
* :mod:`.random` -- a uniformly random agent over the available actions;
* :mod:`.poad`, :mod:`.ntpo`, :mod:`.twosome` -- the reference RL agents (need the ``train`` extra).
"""
