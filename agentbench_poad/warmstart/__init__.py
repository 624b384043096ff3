"""Supervised warm starts for DataSciCoding: a small model learns what a working program looks
like before reinforcement learning starts (``docs/warmstart.md``).

* :mod:`~agentbench_poad.warmstart.programs` -- working ``build_model`` bodies from a grid of
  estimators x preprocessing x hyper-parameters, drawn deterministically;
* :mod:`~agentbench_poad.warmstart.examples` -- (prompt, completion) pairs on training datasets,
  never evaluation ones;
* :mod:`~agentbench_poad.warmstart.sft` -- TRL ``SFTTrainer`` with a LoRA adapter, the
  manifest and the merged model agents train from.
"""
