"""`python -m hello_agents_rl <action> ...`: the same command line as `hello-agents-rl`."""

from hello_agents_rl.interfaces.cli import main

main()
