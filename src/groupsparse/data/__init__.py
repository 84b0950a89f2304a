"""Inputs: synthetic group-sparse tasks and real images."""
