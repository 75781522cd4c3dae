"""Delivery state: what is leased, what is redeliverable, what the lease/ack log records."""
