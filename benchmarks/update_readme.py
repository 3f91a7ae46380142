"""Regenerate the README's parameter tables from the config models (the single source of defaults)."""

from hello_agents_rl.workflows.actions import markdown_tables
from readme_blocks import write_block

write_block("params", markdown_tables())
