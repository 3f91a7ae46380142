"""Regenerate the README's parameter tables from the config models (the single source of defaults)."""

from hello_agents_rl.actions import markdown_tables
from hello_agents_rl.readme import write_block

write_block("params", markdown_tables())
