"""What every layer shares: models, config, durations, errors, payloads, text."""
