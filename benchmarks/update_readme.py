"""Regenerate the parameter tables (docs/parameters.md) from the config models (the single source of defaults)."""

from readme_blocks import write_block

from hello_agents_rl.workflows.actions import markdown_tables

write_block("params", markdown_tables())
