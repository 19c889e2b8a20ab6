-- PauseTopic: ? topic. Pausing a paused topic keeps its since (the
-- server's clock at the first pause).
INSERT INTO {pause_topic} (topic, since) VALUES (?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE topic = topic
