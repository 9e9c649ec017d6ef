"""What operators do and see: gc, list/show, status (text, JSON, page), Prometheus, mq check."""
