"""Continuous-batching engine: scheduler, sequence state, recorder."""
from kvbench.engine.engine import Engine, EngineOutput
from kvbench.engine.scheduler import Scheduler, SchedulerConfig

__all__ = ["Engine", "EngineOutput", "Scheduler", "SchedulerConfig"]
