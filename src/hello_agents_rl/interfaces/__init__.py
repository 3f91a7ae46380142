"""Interfaces on top: the dict-in dict-out tool, the CLI, the MCP server, the JSON Schema, hello-agents' Tool and the
book's import hook. Nothing below imports them.
"""
