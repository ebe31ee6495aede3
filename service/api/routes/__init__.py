"""One router per resource: tune, runs, schedules, kernels, devices, health."""
