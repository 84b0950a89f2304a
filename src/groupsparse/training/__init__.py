"""Pretraining by (population) gradient descent and its recording."""
