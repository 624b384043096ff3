import sys

from agentbench_poad.cli import main

sys.exit(main())
