"""What the drain and the operators' commands share on a host: per-host slots (slots.py),
wake-up FIFOs (wakeup.py), fleet slots (fleet.py), the clock record (clock.py),
taking messages back from dead drains (recovery.py) and the run log's terms
(runlog.py). Under ops and drain, over runners: an enqueue and `mq status` never
enter drain/."""
