"""What a process tells about itself: Prometheus metrics and OpenTelemetry spans (06 §14)."""
