-- PausePartition: ? partition. Pausing a paused partition keeps its since.
INSERT INTO {pause_part} (`partition`, since) VALUES (?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE `partition` = `partition`
