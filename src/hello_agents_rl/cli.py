"""`python -m hello_agents_rl.cli` (the form `accelerate launch -m` needs): the command line of `interfaces/cli.py`."""

from hello_agents_rl.interfaces.cli import main

if __name__ == "__main__":
    main()
