"""The drain: the loop, acknowledgements, slots, wake-up, liveness, limits, the run log."""
