"""Simulated GPU: a documented cost model of a named GPU running a model's geometry.

``cost_model`` holds the formula and every constant with its source; ``profiles`` loads the
GPU and model configs from ``conf/`` outside Hydra (tests, scripts).
"""
