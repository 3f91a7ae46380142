"""Rollouts: the trajectory (a plain answer is a one-turn trajectory), tools and their guard, evaluation's
rollout loop.

Nothing here imports torch or transformers at module level: the config layer validates tools through it.
"""
