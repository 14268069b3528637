"""The composed config: its checks (rule table, knob kinds, launcher/sweeper) and the run spec."""
