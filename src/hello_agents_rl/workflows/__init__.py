"""Workflows over the engine: the action table, pipeline, search, jobs, export, serve, the demos and their reports."""
