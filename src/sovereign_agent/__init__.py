"""The runtime the chapter imports: durable work, ownership fences, orders and the owned loop."""
