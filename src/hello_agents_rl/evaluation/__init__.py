"""Evaluation: one run and one compare over rollouts, and the book's error analysis (docs/evaluation.md)."""
